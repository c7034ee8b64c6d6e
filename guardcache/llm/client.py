"""An async client for OpenAI-compatible chat completion servers (NIM, vLLM, llama.cpp, OpenAI).

Layers you can see: :class:`ChatClient` builds the request, sends each attempt and reads the answer
(its :meth:`~ChatClient.parse_answer` hook); a :class:`~guardcache.llm.transport_contract.WireLane`
(shared per base URL and event loop, behind a FIFO admission gate) carries it: guardcache's own
HTTP/1.1 client (:mod:`guardcache.llm.h1_pool`) by default, an ``httpx2.AsyncClient``
(:mod:`guardcache.llm.httpx_pool`) only for a caller's ``transport=`` / ``http_client=`` (see
:mod:`guardcache.llm.default_pools`). The rest is one module per job, each imported here and none
importing this one: the call's time budget (:mod:`guardcache.llm.budget`), the retry loop
(:mod:`guardcache.llm.attempts`) under its policy (:mod:`guardcache.llm.retry`), what each failure
raises and says (:mod:`guardcache.llm.failures`: one of the typed ``BackendError`` subclasses of
:mod:`guardcache.errors`, whose message names the URL and what to do), and reading a completion
(:mod:`guardcache.llm.response`). The client knows nothing of caching, prompts or rails.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from guardcache import tracing
from guardcache.llm.attempts import run_attempts
from guardcache.llm.budget import DEFAULT_TIMEOUT, CallBudget, bound, client_timeouts
from guardcache.llm.cancel import CancelAfter
from guardcache.llm.default_pools import default_pool
from guardcache.llm.failures import (
    Failure,
    answer_failure,
    backend_error,
    no_time_left_error,
    overrun_error,
    status_failure,
    stream_overrun_error,
    wire_failure,
)
from guardcache.llm.logs import RateLimitedLog
from guardcache.llm.response import parse_usage, read_completion
from guardcache.llm.retry import RetryPolicy
from guardcache.llm.settings import TransportSettings, check_base_url
from guardcache.llm.stream import StreamTotals, read_events
from guardcache.llm.transport_contract import (
    CHECK_LIMITS,
    Reply,
    Timeouts,
    WireError,
    WireLane,
    WireLimits,
    WirePool,
)
from guardcache.llm.types import ChatResult

if TYPE_CHECKING:
    import httpx2

    from guardcache.llm.httpx_pool import ClientPool

logger = logging.getLogger(__name__)

RETRY_LOG_INTERVAL = 10.0
"""Seconds between two retry WARNING lines of one client; the lines in between are counted."""


class ChatClient:
    """POSTs chat completions to one OpenAI-compatible endpoint, with retries and typed errors.

    Args:
        base_url: the API root, usually ending in ``/v1`` (``http://nim:8000/v1``); requests go to
            ``{base_url}/chat/completions``. Checked at construction (see ``check_base_url``:
            a ``ValueError`` says what is wrong).
        model: the ``model`` field of every request.
        api_key: sent as ``Authorization: Bearer ...`` when set (hosted endpoints); never logged.
        provider: a label copied into :class:`Usage` (``"nim"``, ``"vllm"``, ``"openai"``).
        timeout: one number: seconds for the WHOLE call (a config's ``timeout: 2`` means "every
            check within 2 s"), with phase timeouts inside it (see
            :func:`~guardcache.llm.budget.phase_timeouts`).
            :class:`~guardcache.llm.transport_contract.Timeouts` (or an ``httpx2.Timeout``, read by its
            attributes): the phases as given, and the whole call within its read timeout. None: no
            limit.
        deadline_s: the whole-call budget in seconds, when it should differ from the one the
            timeout implies. Each call may also pass an absolute ``deadline``; the earlier wins.
        retry: when to try again; see :class:`RetryPolicy`.
        default_params: body fields added to every request (``temperature``, ``max_tokens``...);
            per-call ``params`` override them.
        default_headers: extra headers of every request (a gateway's routing header...).
        transport: an httpx transport for a private AsyncClient (tests: ``httpx2.MockTransport``).
            The client wrapping it is owned, and closed (with the transport) by :meth:`aclose`.
        http_client: an AsyncClient to use as is; not owned, never closed here, and without the
            pool's admission gate. Must belong to the loop the calls run on.
        pool: where to get a shared connection pool when neither of the two above is given
            (:class:`~guardcache.llm.httpx_pool.ClientPool` for httpx2,
            :class:`~guardcache.llm.h1_pool.H1Pool` for guardcache's own HTTP/1.1 client); default:
            the process's (see :func:`~guardcache.llm.default_pools.default_pool`).
        sleep: the coroutine used to wait between retries (tests inject one to record delays).
        limits: how much of an answer is read before the call fails (:class:`WireLimits`):
            :data:`CHECK_LIMITS` for a guard, :data:`MAIN_LIMITS` for a main model's answers.
        key_note: why no key is sent although one is set (a 401's hint says it instead of "the key
            is not set"): e.g. ``NVIDIA_API_KEY`` kept off a plain http:// URL.
        tool_calls: a main model's client: an answer may hold tool calls (null content), returned
            in ``ChatResult.tool_calls`` for the rails to judge; a guard's (False) never.

    The instance holds no loop-bound resource when it uses the pool, so one ChatClient can serve
    many ``asyncio.run`` calls; each loop gets its own pooled connections.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        api_key: str | None = None,
        provider: str = "nim",
        timeout: Timeouts | httpx2.Timeout | float | None = DEFAULT_TIMEOUT,
        deadline_s: float | None = None,
        retry: RetryPolicy | None = None,
        default_params: Mapping[str, Any] | None = None,
        default_headers: Mapping[str, str] | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
        http_client: httpx2.AsyncClient | None = None,
        pool: WirePool | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        limits: WireLimits = CHECK_LIMITS,
        key_note: str | None = None,
        tool_calls: bool = False,
    ) -> None:
        if transport is not None and http_client is not None:
            raise ValueError("ChatClient: pass either transport or http_client, not both")
        # Fail at construction (start-up), not on the first user request.
        try:
            self.base_url = check_base_url(base_url)
        except ValueError as exc:
            raise ValueError(f"ChatClient: base_url: {exc}") from None
        self.url = f"{self.base_url}/chat/completions"
        self.model = model
        self.provider = provider
        self.timeout, self.deadline_s = client_timeouts(timeout, deadline_s)
        self.retry = retry if retry is not None else RetryPolicy()
        self.default_params: dict[str, Any] = dict(default_params or {})
        self.has_api_key = bool(api_key)  # what a 401's hint says (the key itself is never kept)
        # Content-Type is set here once (httpx2 sets the same from json=; h1 sends bytes).
        self._headers = {
            "Accept": "application/json",
            "Content-Type": "application/json",
            **(default_headers or {}),
        }
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._http_client = http_client
        self._fixed_lane: WireLane | None = None
        self._owned_pool: ClientPool | None = None
        if transport is not None or http_client is not None:
            # httpx2's lane, imported only for a caller's own stack (the default is h1's).
            from guardcache.llm.httpx_pool import ClientPool, Lane

            if http_client is not None:
                self._fixed_lane = Lane(http_client, None)
            else:  # a private pool (per loop, like the shared one) that this instance owns
                self._owned_pool = ClientPool(transport=transport)
        self._pool: WirePool = self._owned_pool or (pool if pool is not None else default_pool())
        self._sleep = sleep if sleep is not None else asyncio.sleep
        self.limits = limits
        self.key_note = key_note
        self.tool_calls = tool_calls
        self.retry_log = RateLimitedLog(logger, interval=RETRY_LOG_INTERVAL)

    @classmethod
    def from_settings(
        cls,
        settings: TransportSettings,
        *,
        model: str,
        api_key: str | None = None,
        provider: str = "nim",
        default_base_url: str | None = None,
        **kwargs: Any,
    ) -> ChatClient:
        """The client a model's transport settings describe (``ModelConfig.transport``: parsed
        from its ``parameters`` at validation, so nothing here can be a config error).

        ``default_base_url`` is used when the settings name none; ``api_key``, when None, is the
        settings' own.
        Settings left None keep the client's defaults: :data:`DEFAULT_TIMEOUT`, and the
        :class:`RetryPolicy` given in ``kwargs`` (or the default one), whose ``max_retries``
        ``settings.max_retries`` replaces. Other ``kwargs`` go to the constructor as they are.
        """
        if api_key is None:
            api_key = settings.api_key
        base_url = settings.base_url or default_base_url
        if base_url is None:
            raise ValueError(f"ChatClient.from_settings: no base_url for model {model!r}")
        if settings.timeout is not None:
            kwargs["timeout"] = settings.timeout
        if settings.max_retries is not None:
            retry = kwargs.get("retry") or RetryPolicy()
            kwargs["retry"] = dataclasses.replace(retry, max_retries=settings.max_retries)
        if settings.default_headers:
            kwargs["default_headers"] = {**settings.headers, **kwargs.get("default_headers", {})}
        return cls(base_url, model=model, api_key=api_key, provider=provider, **kwargs)

    def __repr__(self) -> str:  # no api_key, ever
        return f"ChatClient(base_url={self.base_url!r}, model={self.model!r}, provider={self.provider!r})"

    async def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        deadline: float | None = None,
        **params: Any,
    ) -> ChatResult:
        """Send one chat completion and return its text and usage.

        The body is ``{"model", "messages", **default_params, **params}``. Retries follow
        :attr:`retry`; ``duration`` covers every attempt and every backoff.

        ``deadline`` is an absolute ``time.monotonic()`` value by which the call must be over (a
        per-turn deadline); the call ends by the earlier of it and ``now + deadline_s``, give or
        take the event loop's scheduling.

        Raises:
            BackendTimeoutError: no answer within the call's budget or deadline (the message names
                which and where it hit), or a read/write timeout of one attempt.
            BackendConnectionError: the server could not be reached or dropped the connection.
            BackendInputRejectedError: HTTP 400, 413 or 422: the server refused the input itself
                (e.g. longer than the model's context); at once, never retried.
            BackendStatusError: another HTTP error status (``.status``) after the last try, at once
                for a 4xx other than 429, or when the wait before the next try would pass the
                deadline.
            BackendProtocolError: a 2xx body that is not JSON or has no
                ``choices[0].message.content`` string.
        """
        return await self.send(self.request_body(messages, params), deadline=deadline)

    def request_body(
        self, messages: Sequence[Mapping[str, str]], params: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The body :meth:`complete` sends: ``{"model", "messages", **default_params, **params}``
        (each message copied)."""
        return {
            "model": self.model,
            "messages": [dict(message) for message in messages],
            **self.default_params,
            **params,
        }

    async def send(
        self, body: Mapping[str, Any], *, deadline: float | None = None, _traced: bool = False
    ) -> ChatResult:
        """POST ``body`` to :attr:`url` within the call's budget, with the retry policy, and read
        the answer with :meth:`parse_answer` (a client of another JSON endpoint, such as a
        classifier, sets ``url`` and overrides ``parse_answer``). Raises as :meth:`complete`."""
        if not _traced and tracing.backend_traced():  # a span per call when tracing is on
            return await tracing.traced_call(self, body, self.send(body, deadline=deadline, _traced=True))
        started = time.monotonic()
        call = bound(started, deadline, self.deadline_s)
        if call.end is None:
            return await self._attempts(body, call)
        left = call.end - started
        if left <= 0:
            raise no_time_left_error(self, call)
        scope = CancelAfter(left)
        try:
            with scope:  # (awaits nothing itself: no coroutines of its own to enter and exit)
                # The first attempt sent here, not in run_attempts: a call that answers at once
                # (nearly every call) goes through one coroutine fewer.
                call.attempts = 1
                outcome = await self._attempt(body, call)
                if type(outcome) is ChatResult:
                    return _whole_call(outcome, call)
                return await self._attempts(body, call, outcome)
        except TimeoutError:
            if not scope.expired():
                raise
            raise overrun_error(self, call) from None

    def _attempts(
        self, body: Mapping[str, Any], call: CallBudget, first: ChatResult | Failure | None = None
    ) -> Awaitable[ChatResult]:
        """The retry loop (:func:`~guardcache.llm.attempts.run_attempts`) of this client's call."""
        return run_attempts(
            self._attempt, body, call, self.retry, self._sleep, self.retry_log, self.url, self.model, first
        )

    def parse_answer(self, reply: Reply) -> ChatResult:
        """The answer of a successful (2xx) reply: the hook a client of another JSON endpoint
        overrides (``ClassifyClient``: a classifier's JSON text is its answer).

        ``duration`` is left 0 and ``attempts`` 1: the retry loop fills both in for the whole call.

        Raises:
            DeclinedAnswer: the model declined to answer (``BackendDeclinedError``, not retried).
            MalformedResponse: not the endpoint's answer shape (``BackendProtocolError``).
            ValueError: a body that is not JSON (``BackendProtocolError``).
        """
        completion = read_completion(reply.json(), tools=self.tool_calls)
        usage = parse_usage(completion.usage, model=completion.model or self.model, provider=self.provider)
        # Positional (a frozen dataclass built from keywords costs about twice as much); duration
        # 0.0: the caller measures the whole call; attempts 1.
        return ChatResult(completion.content, usage, 0.0, completion.finish_reason, 1, completion.tool_calls)

    async def stream(
        self,
        messages: Sequence[Mapping[str, str]],
        totals: StreamTotals,
        *,
        deadline: float | None = None,
        _traced: bool = False,
        **params: Any,
    ) -> AsyncIterator[str]:
        """Send one streamed chat completion and yield its text deltas as the server sends them;
        ``totals`` gets the usage and the finish reason as it ends.

        The body is :meth:`complete`'s with ``stream: true`` and ``stream_options.include_usage``.
        The whole stream runs within the call's budget (``deadline_s`` and ``deadline``, as a
        plain call), on the same lane, gate, headers, timeouts and limits. Not retried (see
        :mod:`guardcache.llm.stream`). Raises the typed ``BackendError`` s of :meth:`complete`.
        """
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(message) for message in messages],
            **self.default_params,
            **params,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if not _traced and tracing.backend_traced():  # a span per call when tracing is on
            deltas = self.stream(messages, totals, deadline=deadline, _traced=True, **params)
            async for delta in tracing.traced_stream(self, body, totals, deltas):
                yield delta
            return
        started = time.monotonic()
        call = bound(started, deadline, self.deadline_s)
        scope = CancelAfter(call.end - started) if call.end is not None else None
        try:
            if scope is None:
                async for delta in self._stream(body, totals):
                    yield delta
            else:
                async with scope:
                    async for delta in self._stream(body, totals):
                        yield delta
        except TimeoutError:
            if scope is None or not scope.expired():
                raise
            raise stream_overrun_error(self, call) from None

    async def _stream(self, body: Mapping[str, Any], totals: StreamTotals) -> AsyncIterator[str]:
        lane = self._lane()
        gate = lane.gate
        if gate is not None:
            await gate.acquire()
        try:
            async with lane.stream(self.url, body, self._headers, self.timeout, self.limits) as response:
                if not response.is_success:
                    raise backend_error(status_failure(self, await response.read()), 1, self.url)
                async for delta in read_events(self, response.lines(), totals, self.limits):
                    yield delta
        except WireError as exc:
            raise backend_error(wire_failure(self, exc), 1, self.url) from exc.__cause__
        finally:
            if gate is not None:
                gate.release()

    async def _attempt(self, body: Mapping[str, Any], call: CallBudget) -> ChatResult | Failure:
        """One HTTP request: a result (duration filled in by the retry loop) or a classified failure."""
        lane = self._lane()
        gate = lane.gate
        try:
            if gate is None:
                call.phase = "request in flight"
                response = await lane.post(self.url, body, self._headers, self.timeout, self.limits)
            else:
                call.phase = "queued for a connection"
                await gate.acquire()  # (not ``async with``: two coroutines fewer per call)
                try:
                    call.phase = "request in flight"
                    response = await lane.post(self.url, body, self._headers, self.timeout, self.limits)
                finally:
                    gate.release()
        except WireError as exc:
            return wire_failure(self, exc)
        if not response.is_success:
            return status_failure(self, response)
        try:
            return self.parse_answer(response)
        except ValueError as exc:  # DeclinedAnswer, MalformedResponse, a body that is not JSON
            return answer_failure(self, exc)

    def _lane(self) -> WireLane:
        if self._fixed_lane is not None:
            return self._fixed_lane
        return self._pool.lane(self.base_url)

    async def aclose(self) -> None:
        """Close the AsyncClient this instance owns on the running loop (the one over ``transport``).

        Pooled clients are shared and closed by :func:`~guardcache.llm.default_pools.aclose_all`; an
        ``http_client`` passed in belongs to the caller. Both are left open.
        """
        if self._owned_pool is not None:
            await self._owned_pool.aclose_all()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _whole_call(result: ChatResult, call: CallBudget) -> ChatResult:
    """The first attempt's result as the call's (as ``run_attempts`` returns one)."""
    return ChatResult(
        result.content,
        result.usage,
        time.monotonic() - call.started,
        result.finish_reason,
        call.attempts,
        result.tool_calls,
    )


__all__ = ["RETRY_LOG_INTERVAL", "ChatClient"]
