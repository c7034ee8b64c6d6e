"""An async client for OpenAI-compatible chat completion servers (NIM, vLLM, llama.cpp, OpenAI).

Layers you can see: :class:`ChatClient` builds the request and reads the answer; a
:class:`~guardcache.llm.wire.WireLane` (shared per base URL and event loop, behind a FIFO admission
gate) carries it: guardcache's own HTTP/1.1 client (:mod:`guardcache.llm.h1_pool`) by default, an
``httpx2.AsyncClient`` (:mod:`guardcache.llm.httpx_pool`) only for a caller's ``transport=`` /
``http_client=`` (see :mod:`guardcache.llm.pool`); :class:`~guardcache.llm.retry.RetryPolicy` decides
whether a failure is tried again. Every failure that survives the retries is raised as one of the typed
``BackendError`` subclasses of :mod:`guardcache.errors`, whose message names the URL and what to do.
The client knows nothing of caching, prompts or rails.

One budget bounds a whole call. A guard check sits on the user's critical path, and a timeout that
bounds one phase of one attempt does not bound the check: a 429 asking for 30 s, a server dripping a
byte a second or a connect that is never accepted each held a check for 6-20 s at ``timeout: 2``.
So ``complete()`` runs under one timeout (``llm/cancel.py``, a lean ``asyncio.timeout``) that covers
queueing for a connection, every attempt, backoff and Retry-After waits, and slow bodies, and a wait
that could not end in time is not started: the call fails at once.

Nothing the user wrote is logged: prompts can hold personal data, and servers quote them back in
error bodies (a 400 "maximum context length ... you requested ..." or a 422 listing each invalid
field with its input). Logs and error messages name the URL, the model, the status with its
standard phrase, identifier-like error codes and the failure class only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import http
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from guardcache import tracing
from guardcache.errors import (
    BackendConnectionError,
    BackendDeclinedError,
    BackendError,
    BackendInputRejectedError,
    BackendProtocolError,
    BackendProxyError,
    BackendRefusedConfigError,
    BackendStatusError,
    BackendTimeoutError,
    BackendTLSError,
)
from guardcache.llm.cancel import CancelAfter
from guardcache.llm.logs import RateLimitedLog
from guardcache.llm.pool import aclose_all, default_pool, get_http_client
from guardcache.llm.response import (
    DeclinedAnswer,
    MalformedResponse,
    error_summary,
    parse_usage,
    read_completion,
)
from guardcache.llm.retry import RETRY_AFTER_STATUSES, RetryPolicy, parse_retry_after
from guardcache.llm.stream import StreamTotals, read_events
from guardcache.llm.transport import TransportSettings, check_base_url
from guardcache.llm.types import ChatResult
from guardcache.llm.wire import (
    CHECK_LIMITS,
    Reply,
    Timeouts,
    WireError,
    WireKind,
    WireLane,
    WireLimits,
    WirePool,
)

if TYPE_CHECKING:
    import httpx2

    from guardcache.llm.httpx_pool import ClientPool


def __getattr__(name: str) -> Any:
    # ClientPool (httpx2's transport) is re-exported on first use: the default path never imports
    # httpx2 (~90 ms); only a caller's transport= / http_client= needs it.
    if name == "ClientPool":
        from guardcache.llm.httpx_pool import ClientPool

        return ClientPool
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = Timeouts(connect=2.0, read=10.0, write=5.0, pool=5.0)
"""Phase timeouts of a guard call, in seconds; the whole call is bounded by its read timeout (10 s).

connect 2 s: a backend on the same network connects in milliseconds; 2 s waiting for a handshake
means it is down, and failing fast lets the rail's ``on_error`` policy act. read 10 s: a verdict is
~10-30 output tokens (~0.1-0.2 s on a GPU, ~1.5 s on a small CPU server), so 10 s only trips on a
stuck or badly overloaded server. write 5 s: the request is a few KB. pool: not used while a
budget bounds the call (queueing for a connection is bounded by the budget instead); kept for a
client built with a read timeout of None.
"""

DEFAULT_CONNECT_TIMEOUT = 2.0
"""The connect phase when the timeout is one number: a dead host fails within it, and a budget
longer than it leaves time to retry the connect (see :data:`DEFAULT_TIMEOUT`)."""

INPUT_REJECTED_STATUSES: frozenset[int] = frozenset({400, 413, 422})
"""Statuses by which a server refuses the request for what it contains (too long for the context,
too large, unreadable). The user controls the content, so this is an unsafe input, never an outage
(``BackendInputRejectedError``), and never retried: the same input is refused again."""

CONFIG_STATUSES: frozenset[int] = frozenset({401, 403, 404})
"""Statuses (with every 3xx) that say the backend can never answer as configured (the key, the URL,
the model name): ``BackendRefusedConfigError``, which blocks whatever ``on_error`` says and is never
retried."""

RETRY_LOG_INTERVAL = 10.0
"""Seconds between two retry WARNING lines of one client; the lines in between are counted."""


def phase_timeouts(total: float | None) -> Timeouts:
    """Phase timeouts inside a whole-call budget of ``total`` seconds (None: no limits).

    The phases only classify a failure early (a connect timeout is retried, a read timeout is
    not); the budget itself is enforced around the whole call.
    """
    if total is None:
        return Timeouts()
    return Timeouts(connect=min(DEFAULT_CONNECT_TIMEOUT, total), read=total, write=total, pool=None)


@dataclass(slots=True, frozen=True)
class _Failure:
    """One failed attempt, classified: what to raise if it is the last, and whether to retry."""

    error_type: type[BackendError]
    message: str  # without the "after N attempts" part, which is only known at the end
    reason: str  # short, for the retry log line
    retryable: bool
    status: int | None = None
    retry_after: float | None = None
    cause: BaseException | None = None


@dataclass(slots=True)
class _Call:
    """Where one ``complete()`` call stands, so that a deadline overrun can say where it hit."""

    started: float
    end: float | None  # time.monotonic() by which the call must be over; None: unbounded
    own_budget: float | None  # the client's deadline_s when it set ``end``; None: the caller's deadline
    attempts: int = 0
    phase: str = "starting"
    last: _Failure | None = None

    @property
    def budget(self) -> str:
        """The bound in words, for messages (built only when one is written)."""
        if self.own_budget is not None:
            return f"this call's {self.own_budget:g} s budget (timeout)"
        if self.end is None:
            return "no budget"
        return f"the caller's deadline ({self.end - self.started:.3g} s away at the start)"


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
            check within 2 s"), with phase timeouts inside it (see :func:`phase_timeouts`).
            :class:`~guardcache.llm.wire.Timeouts` (or an ``httpx2.Timeout``, read by its
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
            the process's (see :func:`~guardcache.llm.pool.default_pool`).
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
        if isinstance(timeout, int | float) and not isinstance(timeout, bool):
            if not timeout > 0:
                raise ValueError(f"ChatClient: timeout must be > 0 seconds, got {timeout}")
            self.timeout = phase_timeouts(float(timeout))
            implied: float | None = float(timeout)
        else:
            self.timeout = Timeouts.of(timeout)
            implied = self.timeout.read
        if deadline_s is not None and not deadline_s > 0:
            raise ValueError(f"ChatClient: deadline_s must be > 0 seconds, got {deadline_s}")
        self.deadline_s: float | None = deadline_s if deadline_s is not None else implied
        if self.deadline_s is not None:
            # Queueing for a connection is bounded by the call's budget, like everything else; a
            # separate pool timeout would fail a burst that could still be served in time.
            self.timeout = dataclasses.replace(self.timeout, pool=None)
        self.retry = retry if retry is not None else RetryPolicy()
        self.default_params: dict[str, Any] = dict(default_params or {})
        self._has_api_key = bool(api_key)
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
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(message) for message in messages],
            **self.default_params,
            **params,
        }
        return await self.send(body, deadline=deadline)

    async def send(
        self, body: Mapping[str, Any], *, deadline: float | None = None, _traced: bool = False
    ) -> ChatResult:
        """POST ``body`` to :attr:`url` within the call's budget, with the retry policy, and read
        the answer with :meth:`_parse` (a subclass speaking another JSON endpoint, such as a
        classifier, overrides ``url`` and ``_parse``). Raises as :meth:`complete`."""
        if not _traced and tracing.backend_traced():  # a span per call when tracing is on
            return await tracing.traced_call(self, body, self.send(body, deadline=deadline, _traced=True))
        started = time.monotonic()
        call = self._bound(started, deadline)
        if call.end is None:
            return await self._run(body, call)
        left = call.end - started
        if left <= 0:
            raise BackendTimeoutError(
                f"no time left to call {self.url} (model {self.model!r}): {call.budget} had "
                "passed before the call started",
                url=self.url,
            )
        scope = CancelAfter(left)
        try:
            async with scope:
                return await self._run(body, call)
        except TimeoutError:
            if not scope.expired():
                raise
            raise self._overrun(call) from None

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
        call = self._bound(started, deadline)
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
            raise BackendTimeoutError(
                f"{self.url} (model {self.model!r}) did not finish streaming within {call.budget}, "
                f"which bounds the whole stream [after {time.monotonic() - started:.3g} s]; raise "
                "the model's timeout for long answers",
                url=self.url,
            ) from None

    async def _stream(self, body: Mapping[str, Any], totals: StreamTotals) -> AsyncIterator[str]:
        lane = self._lane()
        gate = lane.gate
        if gate is not None:
            await gate.acquire()
        try:
            async with lane.stream(self.url, body, self._headers, self.timeout, self.limits) as response:
                if not response.is_success:
                    raise self._error(self._classify_status(await response.read()), 1)
                async for delta in read_events(self, response.lines(), totals, self.limits):
                    yield delta
        except WireError as exc:
            raise self._error(self._classify_wire(exc), 1) from exc.__cause__
        finally:
            if gate is not None:
                gate.release()

    def _bound(self, started: float, deadline: float | None) -> _Call:
        if self.deadline_s is not None:
            own = started + self.deadline_s
            if deadline is None or own <= deadline:
                return _Call(started, own, self.deadline_s)
        return _Call(started, deadline, None)

    async def _run(self, body: Mapping[str, Any], call: _Call) -> ChatResult:
        max_attempts = self.retry.max_retries + 1
        while True:
            call.attempts += 1
            outcome = await self._attempt(body, call)
            if isinstance(outcome, ChatResult):
                return ChatResult(
                    content=outcome.content,
                    usage=outcome.usage,
                    duration=time.monotonic() - call.started,
                    finish_reason=outcome.finish_reason,
                    attempts=call.attempts,
                    tool_calls=outcome.tool_calls,
                )
            failure = call.last = outcome
            if not failure.retryable or call.attempts >= max_attempts:
                raise self._error(failure, call.attempts) from failure.cause
            if failure.retry_after is not None:
                # Compared as the server sent it: a server that will not serve before the
                # deadline is not asked again (cutting its wait only buys another refusal).
                wait = failure.retry_after
                delay = self.retry.retry_after_delay(wait)
            else:
                wait = delay = self.retry.backoff_delay(call.attempts - 1)
            if call.end is not None:
                left = call.end - time.monotonic()
                if wait >= left:
                    # Waiting would only turn this answer into a timeout later: fail now.
                    what = "Retry-After" if failure.retry_after is not None else "backoff"
                    note = (
                        f"waiting {wait:.3g} s ({what}) would pass {call.budget}, {max(left, 0.0):.3g} s left"
                    )
                    raise self._error(failure, call.attempts, note) from failure.cause
            self.retry_log.warning(
                "LLM call to %s (model %s) failed: %s; attempt %d of %d, retrying in %.3f s",
                self.url,
                self.model,
                failure.reason,
                call.attempts,
                max_attempts,
                delay,
            )
            call.phase = "waiting to retry"
            await self._sleep(delay)

    async def _attempt(self, body: Mapping[str, Any], call: _Call) -> ChatResult | _Failure:
        """One HTTP request: a result (duration filled in by the caller) or a classified failure."""
        lane = self._lane()
        try:
            if lane.gate is None:
                call.phase = "request in flight"
                response = await lane.post(self.url, body, self._headers, self.timeout, self.limits)
            else:
                call.phase = "queued for a connection"
                async with lane.gate:
                    call.phase = "request in flight"
                    response = await lane.post(self.url, body, self._headers, self.timeout, self.limits)
        except WireError as exc:
            return self._classify_wire(exc)
        if not response.is_success:
            return self._classify_status(response)
        return self._parse(response)

    def _lane(self) -> WireLane:
        if self._fixed_lane is not None:
            return self._fixed_lane
        return self._pool.lane(self.base_url)

    def _overrun(self, call: _Call) -> BackendTimeoutError:
        plural = "attempt" if call.attempts == 1 else "attempts"
        last = f"; last failure: {call.last.reason}" if call.last is not None else ""
        return BackendTimeoutError(
            f"{self.url} (model {self.model!r}) gave no answer within {call.budget}, which covers "
            "the whole call (queueing for a connection, every attempt, backoff and Retry-After "
            "waits); the server is overloaded or unreachable, or the timeout is too short for this "
            f"model: check the server's load or raise the timeout [{call.phase} after "
            f"{time.monotonic() - call.started:.3g} s, {call.attempts} {plural}{last}]",
            url=self.url,
        )

    def _classify_wire(self, exc: WireError) -> _Failure:
        """A transport failure (see :class:`~guardcache.llm.wire.WireKind`) as a failed attempt."""
        kind = exc.kind
        reason = str(exc)  # the library's class, and its text only when that cannot quote the server
        cause = exc.__cause__ or exc
        retry = self.retry
        if kind is WireKind.CONNECT_TIMEOUT:
            return _Failure(
                BackendConnectionError,
                f"could not connect to {self.url} within {self.timeout.connect} s (connect "
                "timeout); check that the server is up and reachable and that base_url is right",
                reason,
                retry.retry_connect_errors,
                cause=cause,
            )
        if kind is WireKind.POOL_TIMEOUT:
            # Our own pool is saturated: retrying would only add to the queue.
            return _Failure(
                BackendTimeoutError,
                f"no free connection to {self.url} within the pool timeout ({self.timeout.pool} s); "
                "too many calls in flight: lower the concurrency, or raise the pool timeout or "
                "httpx2.Limits.max_connections",
                reason,
                False,
                cause=cause,
            )
        if kind is WireKind.READ_TIMEOUT or kind is WireKind.WRITE_TIMEOUT:
            phase = "write" if kind is WireKind.WRITE_TIMEOUT else "read"
            limit = self.timeout.write if phase == "write" else self.timeout.read
            return _Failure(
                BackendTimeoutError,
                f"{self.url} (model {self.model!r}) did not answer within {limit} s ({phase} "
                "timeout); the server is overloaded or the timeout is too short for this model: "
                "check the server's load or raise the timeout",
                reason,
                retry.retry_read_timeouts,
                cause=cause,
            )
        if kind is WireKind.TLS_VERIFY:
            return _Failure(
                BackendTLSError,
                f"the TLS certificate of {self.url} did not verify ({reason}); if the server uses a "
                "private CA, name its bundle with SSL_CERT_FILE",
                reason,
                False,  # the certificate is the same on the next try
                cause=cause,
            )
        if kind is WireKind.CONFIG:
            return _Failure(
                BackendProxyError,
                f"the request to {self.url} cannot be sent as the environment sets it up ({reason})",
                reason,
                False,
                cause=cause,
            )
        if kind is WireKind.CONNECT:
            return _Failure(
                BackendConnectionError,
                f"could not connect to {self.url} ({reason}); check that the server is "
                "running and that base_url is right",
                reason,
                retry.retry_connect_errors,
                cause=cause,
            )
        if kind is WireKind.DROPPED:
            # Typically a keep-alive connection the server (or a proxy) closed while idle.
            return _Failure(
                BackendConnectionError,
                f"the connection to {self.url} dropped before a complete response ({reason}); "
                "check the server's logs (crash, restart, proxy idle timeout)",
                reason,
                retry.retry_connect_errors,
                cause=cause,
            )
        if kind is WireKind.UNSUPPORTED:
            return _Failure(
                BackendConnectionError,
                f"invalid base_url {self.base_url!r} ({reason}); it must start with http:// or "
                "https://, e.g. http://localhost:8000/v1",
                reason,
                False,
                cause=cause,
            )
        if kind is WireKind.TOO_LARGE:
            return _Failure(
                BackendProtocolError,
                f"{self.url} sent an answer over a size limit ({reason}); a chat completion is never "
                "that large: check what answers at base_url (a proxy page, a misbehaving server)",
                "answer too large",
                retryable=False,
                cause=cause,
            )
        if kind is WireKind.DECODE:
            return _Failure(
                BackendProtocolError,
                f"{self.url} sent a body that could not be decoded ({exc.name})",
                "undecodable body",
                retryable=False,
                cause=cause,
            )
        return _Failure(  # proxy errors, local protocol errors...: not a transient state
            BackendConnectionError,
            f"the request to {self.url} failed ({reason}); check the proxy and network setup",
            reason,
            False,
            cause=cause,
        )

    def _classify_status(self, response: Reply) -> _Failure:
        status = response.status_code
        # The standard phrase, not the server's: a status line is server text like any other.
        try:
            phrase = f"HTTP {status} {http.HTTPStatus(status).phrase}"
        except ValueError:
            phrase = f"HTTP {status}"
        try:
            summary = error_summary(response.json())
        except ValueError:
            summary = None
        suffix = f" ({summary})" if summary else ""
        if status in INPUT_REJECTED_STATUSES:
            return _Failure(
                BackendInputRejectedError,
                f"{self.url} refused the request as invalid: {phrase}{suffix}; the input cannot be "
                "checked (longer than the model's context, too large, or unreadable), so it is "
                "treated as unsafe. If every request gets this, check the request parameters "
                f"({', '.join(self._param_names())}) and the model's maximum context",
                phrase,
                False,  # the same input is refused again
                status=status,
            )
        error_type: type[BackendError] = BackendStatusError
        if status in CONFIG_STATUSES or 300 <= status < 400:
            error_type = BackendRefusedConfigError
        if 300 <= status < 400:
            hint = (
                "the server redirects; guardcache follows no redirect (the API key must never be "
                "sent to another host): set base_url to the endpoint itself"
            )
        elif status in (401, 403) and not self._has_api_key and self.key_note is not None:
            hint = f"no API key was sent: {self.key_note}"
        elif status in (401, 403):
            hint = (
                "check the API key: the environment variable that holds it (e.g. NVIDIA_API_KEY, "
                "OPENAI_API_KEY) "
                + ("may be wrong or expired" if self._has_api_key else "is not set for this model")
            )
        elif status == 404:
            hint = f"check base_url (it usually ends in /v1) and that model {self.model!r} is served there"
        elif status == 429:
            hint = "the backend is rate limiting: lower the request rate or raise the quota"
        elif status >= 500:
            hint = "the backend failed: check its health endpoint and logs"
        else:
            hint = f"check the request parameters ({', '.join(self._param_names())})"
        retry_after = None
        if status in RETRY_AFTER_STATUSES:
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
        return _Failure(
            error_type,
            f"{self.url} answered {phrase}{suffix}; {hint}",
            phrase,
            error_type is BackendStatusError and status in self.retry.retry_on_status,
            status=status,
            retry_after=retry_after,
        )

    def _param_names(self) -> list[str]:
        return ["model", "messages", *sorted(self.default_params)]

    def _parse(self, response: Reply) -> ChatResult | _Failure:
        try:
            completion = read_completion(response.json(), tools=self.tool_calls)
        except DeclinedAnswer as exc:
            return _Failure(
                BackendDeclinedError,
                f"{self.url} (model {self.model!r}) declined to answer: {exc}; the text is treated as unsafe",
                "declined",
                retryable=False,  # the same text is declined again
                status=200,
                cause=exc,
            )
        except MalformedResponse as exc:
            return self._protocol_failure(str(exc), exc)
        except ValueError as exc:  # json.JSONDecodeError, UnicodeDecodeError
            return self._protocol_failure("a body that is not JSON", exc)
        usage = parse_usage(completion.usage, model=completion.model or self.model, provider=self.provider)
        return ChatResult(
            content=completion.content,
            usage=usage,
            duration=0.0,  # the caller measures the whole call
            finish_reason=completion.finish_reason,
            tool_calls=completion.tool_calls,
        )

    def _protocol_failure(self, what: str, cause: BaseException | None = None) -> _Failure:
        return _Failure(
            BackendProtocolError,
            f"{self.url} answered 200 with {what}; is base_url an OpenAI-compatible "
            "/v1 endpoint (not a proxy page or the server root)?",
            "protocol error",
            retryable=False,
            status=200,
            cause=cause,
        )

    def _error(self, failure: _Failure, attempts: int, note: str | None = None) -> BackendError:
        plural = "attempt" if attempts == 1 else "attempts"
        extra = f"; not retried: {note}" if note else ""
        return failure.error_type(
            f"{failure.message} [after {attempts} {plural}{extra}]",
            status=failure.status,
            url=self.url,
        )

    async def aclose(self) -> None:
        """Close the AsyncClient this instance owns on the running loop (the one over ``transport``).

        Pooled clients are shared and closed by :func:`aclose_all`; an ``http_client`` passed in
        belongs to the caller. Both are left open.
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


__all__ = [
    "CONFIG_STATUSES",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "INPUT_REJECTED_STATUSES",
    "ChatClient",
    "ClientPool",
    "RetryPolicy",
    "aclose_all",
    "get_http_client",
    "parse_usage",
    "phase_timeouts",
]
