"""The transport contract: what :class:`~guardcache.llm.client.ChatClient` needs from an HTTP client,
whichever carries it.

Two transports implement it: guardcache's own HTTP/1.1 client (:mod:`guardcache.llm.h1_pool`, the
default, proxies included) and httpx2 (:mod:`guardcache.llm.httpx_pool`: what ``transport=`` /
``http_client=`` arguments such as ``httpx2.MockTransport`` use: a caller's own stack). aiohttp,
once the transport of proxied URLs, earned no place once h1 spoke to proxies: it read a stray
response on an idle connection as the next answer, and cost ~2.5x h1's CPU per call. Why the
default is the one it is: at 100% cache hits the outgoing call to the main model is most of a
guarded turn's CPU, and ``benchmarks/bench_http_clients.py`` prints the candidates' client CPU per
call side by side.

Each transport turns its own exceptions into one :class:`WireError` with a :class:`WireKind`, so
the client classifies a failure (retry or not, which typed ``BackendError``, what the message says)
once, identically for all (:mod:`guardcache.llm.failures`). Replies expose the few things the client
reads (status, headers, ``json()``, ``text``), nothing library-specific. Why a module of its own: the
client, both transports and their tests meet here, and none of them imports another to do so (the
bytes themselves, JSON and content-codings, are :mod:`guardcache.llm.wire`'s).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class Timeouts:
    """The phase timeouts of one request, in seconds (None: that phase is unbounded).

    Why guardcache's own type: it is what the client hands a :class:`WireLane` with every request,
    and that seam is guardcache's; with ``httpx2.Timeout`` as its currency, the default transport
    (:mod:`guardcache.llm.h1_pool`) imported httpx2 (~90 ms, and its pool) only to be told how long
    to wait. Only :mod:`guardcache.llm.httpx_pool` turns it into an ``httpx2.Timeout``.

    Attributes:
        connect: the TCP (and TLS) handshake; a connect timeout is retried.
        read: each wait for bytes of the answer; a read timeout is not retried by default.
        write: sending the request (httpx2 only: h1 writes a few KB within the call's budget).
        pool: waiting for a free connection (httpx2 only; None while a budget bounds the call).
    """

    connect: float | None = None
    read: float | None = None
    write: float | None = None
    pool: float | None = None

    @classmethod
    def of(cls, value: object) -> Timeouts:
        """``value`` as phase timeouts: a :class:`Timeouts` as it is; None: no limits; a number:
        every phase; anything with ``connect``/``read``/``write``/``pool`` attributes (an
        ``httpx2.Timeout``, which callers of ``ChatClient(timeout=...)`` may still pass) by them.

        Raises:
            TypeError: a value that is none of these.
        """
        if isinstance(value, Timeouts):
            return value
        if value is None:
            return cls()
        if isinstance(value, int | float) and not isinstance(value, bool):
            seconds = float(value)
            return cls(seconds, seconds, seconds, seconds)
        try:
            return cls(value.connect, value.read, value.write, value.pool)  # type: ignore[attr-defined]
        except AttributeError:
            raise TypeError(f"expected phase timeouts or seconds (got {type(value).__name__})") from None


@dataclass(frozen=True, slots=True)
class WireLimits:
    """How much of an answer a transport reads before it gives up: every read from a socket is
    bounded in size, so a hostile or broken server (or a proxy in between) costs bounded memory and
    time. Exceeding a limit fails the call (``WireKind.TOO_LARGE``), not retried.

    The defaults are never reached by an honest OpenAI-compatible server and need no tuning; they
    sit at aiohttp's order of magnitude for heads and lines.

    Attributes:
        max_head_bytes: the whole response head (status line and headers, interim 1xx heads
            included).
        max_header_bytes: one header field, name and value (aiohttp: 8190).
        max_body_bytes: the body as received (a stream's, all of it).
        max_decoded_bytes: the body after its content-encoding is undone (gzip, deflate).
        max_decode_ratio: decoded bytes per received byte, checked once the decoded body passes
            64 KiB (a compression bomb: 0.5 MB of gzip inflating to 1 GB).
        max_line_bytes: one line of an event stream (aiohttp's readline: 1 MiB... the same here).
        max_event_bytes: one server-sent event's data, all its ``data:`` lines together.

    An error status's body is read only for an error code: past ``max_body_bytes`` it is cut,
    not failed, so the status still decides (a 400 that quotes a long input stays a 400).
    """

    max_head_bytes: int = 64 * 1024
    max_header_bytes: int = 8 * 1024
    max_body_bytes: int = 1 << 20
    max_decoded_bytes: int = 1 << 20
    max_decode_ratio: int = 100
    max_line_bytes: int = 1 << 20
    max_event_bytes: int = 1 << 20


CHECK_LIMITS = WireLimits()
"""A guard check's answer: a verdict of a few tokens, 1 MiB is generous."""

MAIN_LIMITS = WireLimits(max_body_bytes=64 << 20, max_decoded_bytes=64 << 20)
"""The main model's answer (a long streamed answer is ~200 bytes an event): 64 MiB."""


class WireKind(enum.Enum):
    """How a request failed below HTTP: what the client's retry policy and messages need to know."""

    CONNECT_TIMEOUT = "connect timeout"  # no connection within the connect phase: retried
    POOL_TIMEOUT = "pool timeout"  # no free connection in time (httpx2 without a budget only)
    READ_TIMEOUT = "read timeout"  # accepted, no answer in time: not retried by default
    WRITE_TIMEOUT = "write timeout"
    CONNECT = "connect"  # refused, DNS, TLS handshake: retried
    TLS_VERIFY = "tls verification"  # the certificate did not verify: a configuration error
    TOO_LARGE = "too large"  # an answer over a size limit (see WireLimits): not retried
    CONFIG = "config"  # can never work as set up (a proxy it cannot speak, proxy credentials)
    DROPPED = "dropped"  # closed or malformed before a complete response (stale keep-alive): retried
    UNSUPPORTED = "unsupported"  # not an http(s) URL
    DECODE = "decode"  # a body its content-encoding cannot decode
    OTHER = "other"  # proxy errors and the like: not a transient state


class WireError(Exception):
    """A transport failure, classified.

    ``name`` is the library's exception class (for messages and logs); ``detail`` is its text only
    when that text cannot quote the server (OS errors, timeouts), else empty: a protocol error can
    hold bytes the server sent. The library's exception is ``__cause__``.
    """

    def __init__(self, kind: WireKind, name: str, detail: str = "") -> None:
        super().__init__(f"{name}: {detail}" if detail else name)
        self.kind = kind
        self.name = name
        self.detail = detail


class Reply(Protocol):
    """A complete response: what the client reads of it (``httpx2.Response`` fits)."""

    @property
    def status_code(self) -> int: ...

    @property
    def is_success(self) -> bool: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def text(self) -> str: ...

    def json(self) -> Any: ...


class StreamReply(Protocol):
    """A response whose body is read as lines (server-sent events)."""

    @property
    def status_code(self) -> int: ...

    @property
    def is_success(self) -> bool: ...

    async def read(self) -> Reply:
        """The whole body, as a :class:`Reply` (an error status's body)."""
        ...

    def lines(self) -> AsyncIterator[str]:
        """The body's lines without their line ends, each within the request's
        ``max_line_bytes``; raises :class:`WireError`."""
        ...


class WireLane(Protocol):
    """One base URL's pooled connections on one event loop, and the FIFO gate that admits to them.

    ``gate`` is None when nothing bounds the requests in flight. Both methods raise
    :class:`WireError` for transport failures, never the library's own exceptions.
    ``phases`` are the phase timeouts (connect, read, write); the whole call's budget is the
    caller's (an ``asyncio.timeout`` around the call).
    """

    gate: asyncio.Semaphore | None

    async def post(
        self,
        url: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        phases: Timeouts,
        limits: WireLimits = ...,
    ) -> Reply: ...

    def stream(
        self,
        url: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        phases: Timeouts,
        limits: WireLimits = ...,
    ) -> AbstractAsyncContextManager[StreamReply]: ...


class WirePool(Protocol):
    """Hands out lanes per (running loop, base URL); closes the running loop's."""

    def lane(self, base_url: str) -> WireLane: ...

    async def aclose_all(self) -> None: ...


__all__ = [
    "CHECK_LIMITS",
    "MAIN_LIMITS",
    "Reply",
    "StreamReply",
    "Timeouts",
    "WireError",
    "WireKind",
    "WireLane",
    "WireLimits",
    "WirePool",
]
