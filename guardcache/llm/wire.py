"""What :class:`~guardcache.llm.client.ChatClient` needs from an HTTP client, whichever carries it.

Three transports implement it: guardcache's own HTTP/1.1 client (:mod:`guardcache.llm.h1_pool`, the
default), aiohttp (:mod:`guardcache.llm.aiohttp_pool`: base URLs the environment proxies, and
``GUARDCACHE_HTTP_CLIENT=aiohttp``) and httpx2 (:mod:`guardcache.llm.pool`: what ``transport=`` /
``http_client=`` arguments such as ``httpx2.MockTransport`` use). Why the default is the one it is:
at 100% cache hits the outgoing call to the main model is most of a guarded turn's CPU, and
``benchmarks/bench_http_clients.py`` prints the candidates' client CPU per call side by side.

Each transport turns its own exceptions into one :class:`WireError` with a :class:`WireKind`, so
the client classifies a failure (retry or not, which typed ``BackendError``, what the message says)
once, identically for all. Replies expose the few things the client reads (status, headers,
``json()``, ``text``), nothing library-specific.
"""

from __future__ import annotations

import asyncio
import enum
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import httpx2

try:  # faster than json for request and response bodies; installed with the ``server`` extra
    import orjson

    def dumps_body(body: Any) -> bytes:
        """A body (a request's, or ``guardcache serve``'s answer) as compact UTF-8 JSON."""
        return orjson.dumps(body)

    def loads_body(data: bytes | str) -> Any:
        """A response body's JSON; ``ValueError`` when it is not JSON."""
        return orjson.loads(data)

except ImportError:  # pragma: no cover - depends on the environment

    def dumps_body(body: Any) -> bytes:
        """A body (a request's, or ``guardcache serve``'s answer) as compact UTF-8 JSON."""
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()

    def loads_body(data: bytes | str) -> Any:
        """A response body's JSON; ``ValueError`` when it is not JSON."""
        return json.loads(data)


class WireKind(enum.Enum):
    """How a request failed below HTTP: what the client's retry policy and messages need to know."""

    CONNECT_TIMEOUT = "connect timeout"  # no connection within the connect phase: retried
    POOL_TIMEOUT = "pool timeout"  # no free connection in time (httpx2 without a budget only)
    READ_TIMEOUT = "read timeout"  # accepted, no answer in time: not retried by default
    WRITE_TIMEOUT = "write timeout"
    CONNECT = "connect"  # refused, DNS, TLS handshake or certificate: retried
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


class BodyReply:
    """A whole response read by a transport: status, headers and body bytes (a :class:`Reply`)."""

    __slots__ = ("body", "headers", "status_code")

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status_code = status
        self.headers = headers
        self.body = body

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON; ``ValueError`` when it is not (orjson's error is one)."""
        return loads_body(self.body)


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
        """The body's lines without their line ends; raises :class:`WireError`."""
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
        self, url: str, body: Mapping[str, Any], headers: Mapping[str, str], phases: httpx2.Timeout
    ) -> Reply: ...

    def stream(
        self, url: str, body: Mapping[str, Any], headers: Mapping[str, str], phases: httpx2.Timeout
    ) -> AbstractAsyncContextManager[StreamReply]: ...


class WirePool(Protocol):
    """Hands out lanes per (running loop, base URL); closes the running loop's."""

    def lane(self, base_url: str) -> WireLane: ...

    async def aclose_all(self) -> None: ...


__all__ = [
    "BodyReply",
    "Reply",
    "StreamReply",
    "WireError",
    "WireKind",
    "WireLane",
    "WirePool",
    "dumps_body",
    "loads_body",
]
