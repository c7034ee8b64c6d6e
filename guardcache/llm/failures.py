"""A failed call, classified: which typed ``BackendError`` it raises, whether it is tried again, and
what its message tells the operator.

Why one module: every way a call can fail (below HTTP, an error status, an answer that is no answer,
a budget that ran out) is decided and worded here once, for plain calls and streams alike, so a
message and its retry decision cannot drift apart between them. The client only asks
(:mod:`guardcache.llm.client`); the retry loop only reads the verdict (:mod:`guardcache.llm.attempts`).

Nothing the user wrote is logged or put into a message: prompts can hold personal data, and servers
quote them back in error bodies (a 400 "maximum context length ... you requested ..." or a 422
listing each invalid field with its input). Messages name the URL, the model, the status with its
standard phrase, identifier-like error codes (:func:`~guardcache.llm.response.error_summary`) and the
failure class only, and say what to do.
"""

from __future__ import annotations

import http
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

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
from guardcache.llm.budget import CallBudget
from guardcache.llm.response import DeclinedAnswer, MalformedResponse, error_summary
from guardcache.llm.retry import RETRY_AFTER_STATUSES, RetryPolicy, parse_retry_after
from guardcache.llm.transport_contract import Reply, Timeouts, WireError, WireKind

INPUT_REJECTED_STATUSES: frozenset[int] = frozenset({400, 413, 422})
"""Statuses by which a server refuses the request for what it contains (too long for the context,
too large, unreadable). The user controls the content, so this is an unsafe input, never an outage
(``BackendInputRejectedError``), and never retried: the same input is refused again."""

CONFIG_STATUSES: frozenset[int] = frozenset({401, 403, 404})
"""Statuses (with every 3xx) that say the backend can never answer as configured (the key, the URL,
the model name): ``BackendRefusedConfigError``, which blocks whatever ``on_error`` says and is never
retried."""


class Caller(Protocol):
    """What a failure's message and retry decision read of the client that met it
    (:class:`~guardcache.llm.client.ChatClient` fits; this module imports nothing above it)."""

    @property
    def url(self) -> str: ...

    @property
    def base_url(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def timeout(self) -> Timeouts: ...

    @property
    def retry(self) -> RetryPolicy: ...

    @property
    def default_params(self) -> Mapping[str, Any]: ...

    @property
    def has_api_key(self) -> bool: ...

    @property
    def key_note(self) -> str | None: ...


@dataclass(slots=True, frozen=True)
class Failure:
    """One failed attempt, classified: what to raise if it is the last, and whether to retry."""

    error_type: type[BackendError]
    message: str  # without the "after N attempts" part, which is only known at the end
    reason: str  # short, for the retry log line
    retryable: bool
    status: int | None = None
    retry_after: float | None = None
    cause: BaseException | None = None


def wire_failure(client: Caller, exc: WireError) -> Failure:
    """A transport failure (see :class:`~guardcache.llm.transport_contract.WireKind`) as a failed
    attempt."""
    kind = exc.kind
    url = client.url
    reason = str(exc)  # the library's class, and its text only when that cannot quote the server
    cause = exc.__cause__ or exc
    retry = client.retry
    if kind is WireKind.CONNECT_TIMEOUT:
        return Failure(
            BackendConnectionError,
            f"could not connect to {url} within {client.timeout.connect} s (connect "
            "timeout); check that the server is up and reachable and that base_url is right",
            reason,
            retry.retry_connect_errors,
            cause=cause,
        )
    if kind is WireKind.POOL_TIMEOUT:
        # Our own pool is saturated: retrying would only add to the queue.
        return Failure(
            BackendTimeoutError,
            f"no free connection to {url} within the pool timeout ({client.timeout.pool} s); "
            "too many calls in flight: lower the concurrency, or raise the pool timeout or "
            "httpx2.Limits.max_connections",
            reason,
            False,
            cause=cause,
        )
    if kind is WireKind.READ_TIMEOUT or kind is WireKind.WRITE_TIMEOUT:
        phase = "write" if kind is WireKind.WRITE_TIMEOUT else "read"
        limit = client.timeout.write if phase == "write" else client.timeout.read
        return Failure(
            BackendTimeoutError,
            f"{url} (model {client.model!r}) did not answer within {limit} s ({phase} "
            "timeout); the server is overloaded or the timeout is too short for this model: "
            "check the server's load or raise the timeout",
            reason,
            retry.retry_read_timeouts,
            cause=cause,
        )
    if kind is WireKind.TLS_VERIFY:
        return Failure(
            BackendTLSError,
            f"the TLS certificate of {url} did not verify ({reason}); if the server uses a "
            "private CA, name its bundle with SSL_CERT_FILE",
            reason,
            False,  # the certificate is the same on the next try
            cause=cause,
        )
    if kind is WireKind.CONFIG:
        return Failure(
            BackendProxyError,
            f"the request to {url} cannot be sent as the environment sets it up ({reason})",
            reason,
            False,
            cause=cause,
        )
    if kind is WireKind.CONNECT:
        return Failure(
            BackendConnectionError,
            f"could not connect to {url} ({reason}); check that the server is "
            "running and that base_url is right",
            reason,
            retry.retry_connect_errors,
            cause=cause,
        )
    if kind is WireKind.DROPPED:
        # Typically a keep-alive connection the server (or a proxy) closed while idle.
        return Failure(
            BackendConnectionError,
            f"the connection to {url} dropped before a complete response ({reason}); "
            "check the server's logs (crash, restart, proxy idle timeout)",
            reason,
            retry.retry_connect_errors,
            cause=cause,
        )
    if kind is WireKind.UNSUPPORTED:
        return Failure(
            BackendConnectionError,
            f"invalid base_url {client.base_url!r} ({reason}); it must start with http:// or "
            "https://, e.g. http://localhost:8000/v1",
            reason,
            False,
            cause=cause,
        )
    if kind is WireKind.TOO_LARGE:
        return Failure(
            BackendProtocolError,
            f"{url} sent an answer over a size limit ({reason}); a chat completion is never "
            "that large: check what answers at base_url (a proxy page, a misbehaving server)",
            "answer too large",
            retryable=False,
            cause=cause,
        )
    if kind is WireKind.DECODE:
        return Failure(
            BackendProtocolError,
            f"{url} sent a body that could not be decoded ({exc.name})",
            "undecodable body",
            retryable=False,
            cause=cause,
        )
    return Failure(  # proxy errors, local protocol errors...: not a transient state
        BackendConnectionError,
        f"the request to {url} failed ({reason}); check the proxy and network setup",
        reason,
        False,
        cause=cause,
    )


def status_failure(client: Caller, response: Reply) -> Failure:
    """An answer with an error status (not 2xx) as a failed attempt; its body is read for an
    identifier-like error code only."""
    status = response.status_code
    url = client.url
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
        return Failure(
            BackendInputRejectedError,
            f"{url} refused the request as invalid: {phrase}{suffix}; the input cannot be "
            "checked (longer than the model's context, too large, or unreadable), so it is "
            "treated as unsafe. If every request gets this, check the request parameters "
            f"({', '.join(_param_names(client))}) and the model's maximum context",
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
    elif status in (401, 403) and not client.has_api_key and client.key_note is not None:
        hint = f"no API key was sent: {client.key_note}"
    elif status in (401, 403):
        hint = (
            "check the API key: the environment variable that holds it (e.g. NVIDIA_API_KEY, "
            "OPENAI_API_KEY) "
            + ("may be wrong or expired" if client.has_api_key else "is not set for this model")
        )
    elif status == 404:
        hint = f"check base_url (it usually ends in /v1) and that model {client.model!r} is served there"
    elif status == 429:
        hint = "the backend is rate limiting: lower the request rate or raise the quota"
    elif status >= 500:
        hint = "the backend failed: check its health endpoint and logs"
    else:
        hint = f"check the request parameters ({', '.join(_param_names(client))})"
    retry_after = None
    if status in RETRY_AFTER_STATUSES:
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
    return Failure(
        error_type,
        f"{url} answered {phrase}{suffix}; {hint}",
        phrase,
        error_type is BackendStatusError and status in client.retry.retry_on_status,
        status=status,
        retry_after=retry_after,
    )


def _param_names(client: Caller) -> list[str]:
    return ["model", "messages", *sorted(client.default_params)]


def answer_failure(client: Caller, exc: ValueError) -> Failure:
    """A 2xx answer its parse hook could not read (``ChatClient.parse_answer`` raised ``exc``): a
    declined answer (:class:`~guardcache.llm.response.DeclinedAnswer`), or a body that is not the
    endpoint's shape (:class:`~guardcache.llm.response.MalformedResponse`) or not JSON at all
    (any other ``ValueError``: ``json.JSONDecodeError``, ``UnicodeDecodeError``)."""
    if isinstance(exc, DeclinedAnswer):
        return Failure(
            BackendDeclinedError,
            f"{client.url} (model {client.model!r}) declined to answer: {exc}; the text is treated as unsafe",
            "declined",
            retryable=False,  # the same text is declined again
            status=200,
            cause=exc,
        )
    what = str(exc) if isinstance(exc, MalformedResponse) else "a body that is not JSON"
    return Failure(
        BackendProtocolError,
        f"{client.url} answered 200 with {what}; is base_url an OpenAI-compatible "
        "/v1 endpoint (not a proxy page or the server root)?",
        "protocol error",
        retryable=False,
        status=200,
        cause=exc,
    )


def backend_error(failure: Failure, attempts: int, url: str, note: str | None = None) -> BackendError:
    """The error a call raises when ``failure`` is its last: the failure's message, with how many
    attempts were made and, when ``note`` says so, why the call was not retried."""
    plural = "attempt" if attempts == 1 else "attempts"
    extra = f"; not retried: {note}" if note else ""
    return failure.error_type(
        f"{failure.message} [after {attempts} {plural}{extra}]",
        status=failure.status,
        url=url,
    )


def wait_passes_budget(failure: Failure, wait: float, left: float, call: CallBudget) -> str:
    """Why a retry was not waited for: its wait (Retry-After, else backoff) ends past the budget."""
    what = "Retry-After" if failure.retry_after is not None else "backoff"
    return f"waiting {wait:.3g} s ({what}) would pass {call.described}, {max(left, 0.0):.3g} s left"


def overrun_error(client: Caller, call: CallBudget) -> BackendTimeoutError:
    """A call that ran past its budget: where it was (the phase) and what failed last."""
    plural = "attempt" if call.attempts == 1 else "attempts"
    last = f"; last failure: {call.last_reason}" if call.last_reason is not None else ""
    return BackendTimeoutError(
        f"{client.url} (model {client.model!r}) gave no answer within {call.described}, which covers "
        "the whole call (queueing for a connection, every attempt, backoff and Retry-After "
        "waits); the server is overloaded or unreachable, or the timeout is too short for this "
        f"model: check the server's load or raise the timeout [{call.phase} after "
        f"{time.monotonic() - call.started:.3g} s, {call.attempts} {plural}{last}]",
        url=client.url,
    )


def no_time_left_error(client: Caller, call: CallBudget) -> BackendTimeoutError:
    """A call whose budget had passed before it started: it sends nothing."""
    return BackendTimeoutError(
        f"no time left to call {client.url} (model {client.model!r}): {call.described} had "
        "passed before the call started",
        url=client.url,
    )


def stream_overrun_error(client: Caller, call: CallBudget) -> BackendTimeoutError:
    """A stream that had not finished within its budget (which bounds the whole stream)."""
    return BackendTimeoutError(
        f"{client.url} (model {client.model!r}) did not finish streaming within {call.described}, "
        f"which bounds the whole stream [after {time.monotonic() - call.started:.3g} s]; raise "
        "the model's timeout for long answers",
        url=client.url,
    )


__all__ = [
    "CONFIG_STATUSES",
    "INPUT_REJECTED_STATUSES",
    "Caller",
    "Failure",
    "answer_failure",
    "backend_error",
    "no_time_left_error",
    "overrun_error",
    "status_failure",
    "stream_overrun_error",
    "wait_passes_budget",
    "wire_failure",
]
