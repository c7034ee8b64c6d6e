"""An async client for OpenAI-compatible chat completion servers (NIM, vLLM, llama.cpp, OpenAI).

Layers you can see: :class:`ChatClient` builds the request and reads the answer; an
``httpx.AsyncClient`` (shared per base URL and event loop, see :mod:`guardcache.llm.pool`) carries
it; :class:`~guardcache.llm.retry.RetryPolicy` decides whether a failure is tried again. Every
failure that survives the retries is raised as one of the typed ``BackendError`` subclasses of
:mod:`guardcache.errors`, whose message names the URL and what to do. The client knows nothing
of caching, prompts or rails.

Nothing the user wrote is logged: prompts can hold personal data. Logs and error messages name the
URL, the model, the status and the failure class only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import httpx2 as httpx

from guardcache.errors import (
    BackendConnectionError,
    BackendError,
    BackendInputRejectedError,
    BackendProtocolError,
    BackendStatusError,
    BackendTimeoutError,
)
from guardcache.llm.pool import (
    ClientPool,
    aclose_all,
    default_pool,
    get_http_client,
    normalize_base_url,
)
from guardcache.llm.response import MalformedResponse, error_detail, parse_usage, read_completion
from guardcache.llm.retry import RETRY_AFTER_STATUSES, RetryPolicy, parse_retry_after
from guardcache.llm.types import ChatResult

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = httpx.Timeout(connect=2.0, read=10.0, write=5.0, pool=5.0)
"""Timeouts for a guard call, in seconds.

connect 2 s: a backend on the same network connects in milliseconds; 2 s waiting for a handshake
means it is down, and failing fast lets the rail's ``on_error`` policy act. read 10 s: a verdict is
~10-30 output tokens (~0.1-0.2 s on a GPU, ~1.5 s on a small CPU server), so 10 s only trips on a
stuck or badly overloaded server. write 5 s: the request is a few KB. pool 5 s: the wait for a free
connection when ``max_connections`` calls are already in flight; a burst queues briefly instead of
failing at once.
"""


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


class ChatClient:
    """POSTs chat completions to one OpenAI-compatible endpoint, with retries and typed errors.

    Args:
        base_url: the API root, usually ending in ``/v1`` (``http://nim:8000/v1``); requests go to
            ``{base_url}/chat/completions``.
        model: the ``model`` field of every request.
        api_key: sent as ``Authorization: Bearer ...`` when set (hosted endpoints); never logged.
        provider: a label copied into :class:`Usage` (``"nim"``, ``"vllm"``, ``"openai"``).
        timeout: an ``httpx.Timeout``, or one number for all four phases (None: no timeout);
            see :data:`DEFAULT_TIMEOUT`.
        retry: when to try again; see :class:`RetryPolicy`.
        default_params: body fields added to every request (``temperature``, ``max_tokens``...);
            per-call ``params`` override them.
        transport: an httpx transport for a private AsyncClient (tests: ``httpx.MockTransport``).
            The client wrapping it is owned, and closed (with the transport) by :meth:`aclose`.
        http_client: an AsyncClient to use as is; not owned, never closed here. Must belong to the
            loop the calls run on.
        pool: where to get a shared AsyncClient when neither of the two above is given.
        sleep: the coroutine used to wait between retries (tests inject one to record delays).

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
        timeout: httpx.Timeout | float | None = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        default_params: Mapping[str, Any] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        http_client: httpx.AsyncClient | None = None,
        pool: ClientPool | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        if transport is not None and http_client is not None:
            raise ValueError("ChatClient: pass either transport or http_client, not both")
        self.base_url = normalize_base_url(base_url)
        if not self.base_url.startswith(("http://", "https://")):
            # Fail at construction (start-up), not on the first user request.
            raise ValueError(
                f"ChatClient: base_url {base_url!r} must start with http:// or https://, "
                "e.g. http://localhost:8000/v1"
            )
        self.url = f"{self.base_url}/chat/completions"
        self.model = model
        self.provider = provider
        self.timeout = httpx.Timeout(timeout)
        self.retry = retry if retry is not None else RetryPolicy()
        self.default_params: dict[str, Any] = dict(default_params or {})
        self._has_api_key = bool(api_key)
        self._headers = {"Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._http_client = http_client
        # A transport gets a private pool (per loop, like the shared one) that this instance owns.
        self._owned_pool = ClientPool(transport=transport) if transport is not None else None
        self._pool = self._owned_pool or (pool if pool is not None else default_pool())
        self._sleep = sleep if sleep is not None else asyncio.sleep

    def __repr__(self) -> str:  # no api_key, ever
        return f"ChatClient(base_url={self.base_url!r}, model={self.model!r}, provider={self.provider!r})"

    async def complete(self, messages: Sequence[Mapping[str, str]], **params: Any) -> ChatResult:
        """Send one chat completion and return its text and usage.

        The body is ``{"model", "messages", **default_params, **params}``. Retries follow
        :attr:`retry`; ``duration`` covers every attempt and every backoff.

        Raises:
            BackendTimeoutError: the server did not answer within the read/write/pool timeout.
            BackendConnectionError: the server could not be reached or dropped the connection.
            BackendStatusError: an HTTP error status (``.status``) after the last try, or at once
                for a 4xx other than 429.
            BackendProtocolError: a 2xx body that is not JSON or has no
                ``choices[0].message.content`` string.
        """
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(message) for message in messages],
            **self.default_params,
            **params,
        }
        return await self.send(body)

    async def send(self, body: Mapping[str, Any]) -> ChatResult:
        """POST ``body`` to :attr:`url` with the retry policy; the answer as :meth:`_parse` reads it
        (for a subclass speaking another JSON endpoint, e.g. a classifier)."""
        max_attempts = self.retry.max_retries + 1
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            outcome = await self._attempt(body)
            if isinstance(outcome, ChatResult):
                return ChatResult(
                    content=outcome.content,
                    usage=outcome.usage,
                    duration=time.monotonic() - started,
                    finish_reason=outcome.finish_reason,
                    attempts=attempt,
                )
            failure = outcome
            if not failure.retryable or attempt >= max_attempts:
                raise self._error(failure, attempt) from failure.cause
            if failure.retry_after is not None:
                delay = self.retry.retry_after_delay(failure.retry_after)
            else:
                delay = self.retry.backoff_delay(attempt - 1)
            logger.warning(
                "LLM call to %s (model %s) failed: %s; attempt %d of %d, retrying in %.3f s",
                self.url,
                self.model,
                failure.reason,
                attempt,
                max_attempts,
                delay,
            )
            await self._sleep(delay)

    async def _attempt(self, body: Mapping[str, Any]) -> ChatResult | _Failure:
        """One HTTP request: a result (duration filled in by the caller) or a classified failure."""
        client = self._http()
        try:
            response = await client.post(self.url, json=body, headers=self._headers, timeout=self.timeout)
        except httpx.TransportError as exc:
            return self._classify_transport(exc)
        except httpx.DecodingError as exc:  # a body the content-encoding cannot decode
            return _Failure(
                BackendProtocolError,
                f"{self.url} sent a body that could not be decoded ({exc})",
                "undecodable body",
                retryable=False,
                cause=exc,
            )
        if not response.is_success:
            return self._classify_status(response)
        return self._parse(response)

    def _http(self) -> httpx.AsyncClient:
        if self._http_client is not None:
            return self._http_client
        return self._pool.get(self.base_url)

    def _classify_transport(self, exc: httpx.TransportError) -> _Failure:
        kind = type(exc).__name__
        reason = f"{kind}: {exc}" if str(exc) else kind  # httpx messages hold no request content
        retry = self.retry
        if isinstance(exc, httpx.ConnectTimeout):
            return _Failure(
                BackendConnectionError,
                f"could not connect to {self.url} within {self.timeout.connect} s (connect "
                "timeout); check that the server is up and reachable and that base_url is right",
                reason,
                retry.retry_connect_errors,
                cause=exc,
            )
        if isinstance(exc, httpx.PoolTimeout):
            # Our own pool is saturated: retrying would only add to the queue.
            return _Failure(
                BackendTimeoutError,
                f"no free connection to {self.url} within {self.timeout.pool} s (pool timeout); "
                "too many calls in flight: lower the concurrency, or raise the pool timeout or "
                "httpx.Limits.max_connections",
                reason,
                False,
                cause=exc,
            )
        if isinstance(exc, httpx.TimeoutException):  # ReadTimeout, WriteTimeout
            phase = "write" if isinstance(exc, httpx.WriteTimeout) else "read"
            limit = self.timeout.write if phase == "write" else self.timeout.read
            return _Failure(
                BackendTimeoutError,
                f"{self.url} (model {self.model!r}) did not answer within {limit} s ({phase} "
                "timeout); the server is overloaded or the timeout is too short for this model: "
                "check the server's load or raise the timeout",
                reason,
                retry.retry_read_timeouts,
                cause=exc,
            )
        if isinstance(exc, httpx.ConnectError):
            return _Failure(
                BackendConnectionError,
                f"could not connect to {self.url} ({reason}); check that the server is "
                "running and that base_url is right",
                reason,
                retry.retry_connect_errors,
                cause=exc,
            )
        if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
            # Typically a keep-alive connection the server (or a proxy) closed while idle.
            return _Failure(
                BackendConnectionError,
                f"the connection to {self.url} dropped before a complete response ({reason}); "
                "check the server's logs (crash, restart, proxy idle timeout)",
                reason,
                retry.retry_connect_errors,
                cause=exc,
            )
        if isinstance(exc, httpx.UnsupportedProtocol):
            return _Failure(
                BackendConnectionError,
                f"invalid base_url {self.base_url!r} ({exc}); it must start with http:// or "
                "https://, e.g. http://localhost:8000/v1",
                reason,
                False,
                cause=exc,
            )
        return _Failure(  # ProxyError, LocalProtocolError, CloseError...: not a transient state
            BackendConnectionError,
            f"the request to {self.url} failed ({reason}); check the proxy and network setup",
            reason,
            False,
            cause=exc,
        )

    def _classify_status(self, response: httpx.Response) -> _Failure:
        status = response.status_code
        phrase = f"HTTP {status} {response.reason_phrase}".rstrip()
        try:
            detail = error_detail(response.json())
        except ValueError:
            detail = None
        suffix = f" (server says: {detail})" if detail else ""
        if status in (401, 403):
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
        # 400/413/422: the server refused this request's content (too long for its context, too
        # large, undecodable). The static part never changes, so the user's text caused it: unsafe.
        rejected = status in (400, 413, 422)
        return _Failure(
            BackendInputRejectedError if rejected else BackendStatusError,
            f"{self.url} answered {phrase}{suffix}; {hint}",
            phrase,
            status in self.retry.retry_on_status,
            status=status,
            retry_after=retry_after,
        )

    def _param_names(self) -> list[str]:
        return ["model", "messages", *sorted(self.default_params)]

    def _parse(self, response: httpx.Response) -> ChatResult | _Failure:
        try:
            completion = read_completion(response.json())
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

    def _error(self, failure: _Failure, attempts: int) -> BackendError:
        plural = "attempt" if attempts == 1 else "attempts"
        return failure.error_type(
            f"{failure.message} [after {attempts} {plural}]",
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
    "DEFAULT_TIMEOUT",
    "ChatClient",
    "ClientPool",
    "RetryPolicy",
    "aclose_all",
    "get_http_client",
    "parse_usage",
]
