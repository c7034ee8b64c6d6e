"""What :class:`~guardcache.llm.client.ChatClient` needs from an HTTP client, whichever carries it.

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
once, identically for all. Replies expose the few things the client reads (status, headers,
``json()``, ``text``), nothing library-specific.
"""

from __future__ import annotations

import asyncio
import enum
import json
import zlib
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

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

DECODE_RATIO_FLOOR = 64 * 1024
"""Decoded bytes below which the decode ratio is not checked (small bodies compress well)."""


def decode_body(body: bytes, coding: str, limits: WireLimits) -> bytes:
    """Undo a ``Content-Encoding`` (gzip, x-gzip, deflate: zlib or raw), within the limits.

    Inflates at most ``max_decoded_bytes + 1`` bytes, so a bomb costs bounded memory and time.

    Raises:
        WireError: ``DECODE`` for an unknown or broken coding, ``TOO_LARGE`` past a limit.
    """
    coding = coding.strip().lower()
    if coding in ("", "identity"):
        return body
    if coding not in ("gzip", "x-gzip", "deflate"):
        raise WireError(WireKind.DECODE, "ContentDecodingError", f"unsupported content-encoding {coding!r}")
    for wbits in (47, -15) if coding == "deflate" else (47,):  # gzip or zlib by header; raw deflate
        inflater = zlib.decompressobj(wbits)
        try:
            data = inflater.decompress(body, limits.max_decoded_bytes + 1)
        except zlib.error:
            continue
        check_decoded(len(data), len(body), limits)
        if not inflater.eof:  # a cut body must not decode to a shorter answer
            raise WireError(WireKind.DECODE, "ContentDecodingError", "the compressed body ends early")
        return data
    raise WireError(WireKind.DECODE, "ContentDecodingError")


def check_decoded(decoded: int, received: int, limits: WireLimits) -> None:
    """Raise ``TOO_LARGE`` when ``decoded`` bytes from ``received`` pass a decoding limit."""
    if decoded > limits.max_decoded_bytes:
        raise WireError(
            WireKind.TOO_LARGE, "BodyTooLarge", f"decoded body over {limits.max_decoded_bytes} bytes"
        )
    if decoded > DECODE_RATIO_FLOOR and decoded > limits.max_decode_ratio * max(received, 1):
        raise WireError(WireKind.TOO_LARGE, "DecodeRatio", f"body inflates over {limits.max_decode_ratio}x")


class BodyDecoder:
    """A body's bytes as received in, decoded bytes out, within ``limits`` (size, decoded size and
    ratio): for transports that hand over raw chunks. Inflates at most what the limit leaves, so a
    bomb stops after ``max_decoded_bytes``.

    Raises:
        WireError: ``DECODE`` for an unknown or broken coding, ``TOO_LARGE`` past a limit.
    """

    __slots__ = ("decoded", "inflater", "limits", "received")

    def __init__(self, coding: str | None, limits: WireLimits) -> None:
        self.limits = limits
        self.received = self.decoded = 0
        name = (coding or "identity").strip().lower()
        if name in ("", "identity"):
            self.inflater = None
        elif name in ("gzip", "x-gzip", "deflate"):
            self.inflater = zlib.decompressobj(47)
        else:
            raise WireError(WireKind.DECODE, "ContentDecodingError", f"unsupported content-encoding {name!r}")

    def feed(self, data: bytes) -> bytes:
        limits = self.limits
        self.received += len(data)
        if self.received > limits.max_body_bytes:
            raise WireError(WireKind.TOO_LARGE, "BodyTooLarge", f"over {limits.max_body_bytes} bytes")
        if self.inflater is None:
            self.decoded += len(data)
            return data
        try:
            out = self.inflater.decompress(data, limits.max_decoded_bytes - self.decoded + 1)
        except zlib.error:
            raise WireError(WireKind.DECODE, "ContentDecodingError") from None
        self.decoded += len(out)
        check_decoded(self.decoded, self.received, limits)
        return out

    def end(self) -> None:
        """At the body's end: a compressed body that ends early must not read as a shorter one."""
        if self.inflater is not None and not self.inflater.eof:
            raise WireError(WireKind.DECODE, "ContentDecodingError", "the compressed body ends early")


class LineSplitter:
    """Bytes in, lines out (without their line ends), each line at most ``max_line`` bytes.

    One per stream; shared by every transport so an endless line fails the same way on each.

    The unfinished line is kept in the pieces it came in, joined once when its end arrives: joining
    (and searching) all of it again at every read was quadratic, so a 1 MiB line dripped in 10-byte
    reads cost ~3 s of a blocked event loop.
    """

    __slots__ = ("max_line", "rest", "size")

    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self.rest: list[bytes] = []  # the unfinished line's pieces
        self.size = 0  # their length

    def feed(self, data: bytes) -> list[str]:
        """The lines completed by ``data``; raises ``TOO_LARGE`` when a line passes the limit."""
        if b"\n" not in data:
            self.size += len(data)
            if self.size > self.max_line:
                raise WireError(WireKind.TOO_LARGE, "LineTooLong", f"a line over {self.max_line} bytes")
            if data:
                self.rest.append(data)
            return []
        if self.rest:
            self.rest.append(data)
            data = b"".join(self.rest)
        *complete, rest = data.split(b"\n")
        self.rest = [rest] if rest else []
        self.size = len(rest)
        # No line is longer than all of them together: the common case checks nothing per line.
        if len(data) > self.max_line and max(self.size, *map(len, complete)) > self.max_line:
            raise WireError(WireKind.TOO_LARGE, "LineTooLong", f"a line over {self.max_line} bytes")
        return [line.decode("utf-8", "replace").rstrip("\r") for line in complete]

    def end(self) -> list[str]:
        """The last line, when the body did not end with a line end."""
        rest = b"".join(self.rest)
        self.rest, self.size = [], 0
        return [rest.decode("utf-8", "replace").rstrip("\r")] if rest else []


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
    "BodyDecoder",
    "BodyReply",
    "LineSplitter",
    "Reply",
    "StreamReply",
    "Timeouts",
    "WireError",
    "WireKind",
    "WireLane",
    "WireLimits",
    "WirePool",
    "check_decoded",
    "decode_body",
    "dumps_body",
    "loads_body",
]
