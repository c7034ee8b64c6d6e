"""guardcache's own HTTP/1.1 keep-alive client: the default transport of every ChatClient.

Why not aiohttp (the default before): at 100% cache hits the outgoing call to the main model is most
of a guarded turn's CPU. ``benchmarks/bench_http_clients.py`` and ``bench_serve.py`` measure it side
by side: aiohttp's general-purpose request path (URL objects, multidicts, payload writers, tracing
hooks, a response object with cookies and history) cost ~300 us of CPU per proxied call under
load, where this one costs well under a third of that. A call to an OpenAI-compatible endpoint
needs very little of HTTP: one POST with a JSON body, one JSON or SSE answer.

What it does, and what it leaves to others:

- **Parsing** is httptools' (llhttp, the parser of Node.js, uvicorn and aiohttp): status line,
  headers, ``Content-Length``, chunked transfer coding and keep-alive are its job, not ours.
- **Requests** are one ``transport.write`` each: the request line and fixed headers are built once
  per (URL, headers) and only ``Content-Length`` and the body change. ``Accept-Encoding: identity``
  asks for no compression; a gzip or deflate body is decoded anyway, another coding is a
  ``DECODE`` failure.
- **Pooling** is per (event loop, base URL), as every transport here (see :mod:`guardcache.llm.lanes`
  for why): LIFO idle connections (the most recently used socket is the least likely to have been
  closed by the server), at most ``max_idle`` kept, each for ``keepalive_expiry`` seconds (under the
  5 s of common servers). A request on a reused connection that dies before any byte of the answer
  (the server closed it while idle) is sent once more on a fresh connection, as browsers do.
- **Timeouts**: ``connect`` bounds the TCP and TLS handshake; ``read`` bounds each wait for bytes
  (reset by every byte received, as httpx's and aiohttp's ``sock_read``), kept with one timer per
  request that re-arms itself lazily instead of on every packet. There is no separate write
  timeout (as with aiohttp): a request is a few KB and the caller's whole-call budget bounds it.
- **Cancellation** (a turn cancelled, a speculative main call abandoned) closes the connection: an
  answer still on its way must never be read as the next request's.
- **TLS** with the one shared, verified context (:func:`~guardcache.llm.lanes.shared_ssl_context`).
- **Proxies** from the environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``),
  as curl reads them: see :mod:`guardcache.llm.proxy` (absolute form for http, a CONNECT tunnel
  for https).
- **Limits** (:class:`~guardcache.llm.transport_contract.WireLimits`): the head, each header field, the body,
  the decoded body and its ratio, each event-stream line; past one, the call fails in bounded
  memory and time. A connection is polled for unread bytes before it is reused, and bytes after a
  complete answer mark it dead: a response belongs to the request that asked for it.
- **Streams** (SSE) are read as lines as they arrive; reading pauses while more than 256 KB wait
  unread.

Errors are :class:`~guardcache.llm.transport_contract.WireError` with the same kinds as the httpx2 lane's, so
ChatClient's retries and messages do not depend on which one carried the call.
"""

from __future__ import annotations

import asyncio
import select
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import httptools

from guardcache.llm.lanes import DEFAULT_LIMITS, USER_AGENT, LoopLanes, shared_ssl_context
from guardcache.llm.proxy import Proxy, env_proxy, open_tunnel
from guardcache.llm.transport_contract import (
    CHECK_LIMITS,
    Reply,
    Timeouts,
    WireError,
    WireKind,
    WireLane,
    WireLimits,
)
from guardcache.llm.wire import BodyDecoder, BodyReply, LineSplitter, decode_body, dumps_body

KEEPALIVE_EXPIRY = 4.0
"""Seconds an idle connection is kept (under the 5 s keep-alive of uvicorn and many proxies)."""

LINGER = 0.05
"""Seconds a stream read to its own end waits for the rest of the HTTP message (see ``linger``)."""

MAX_UNREAD = 256 * 1024
"""Bytes of a stream buffered unread before the socket stops being read (back-pressure)."""


class _Stop(Exception):
    """Raised from a parser callback to stop reading: ``error`` fails the request; None means a
    message began after the answer was complete (a stray: the answer stands, the connection dies)."""

    def __init__(self, error: WireError | None = None) -> None:
        self.error = error


def _too_large(what: str, limit: int) -> WireError:
    return WireError(WireKind.TOO_LARGE, what, f"over {limit} bytes")


class CaseInsensitiveHeaders(dict[str, str]):
    """Response headers by lower-cased name; ``get``/``[]``/``in`` take any case (as httpx's)."""

    __slots__ = ()

    def get(self, key: str, default: Any = None) -> Any:
        return dict.get(self, key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return dict.__getitem__(self, key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and dict.__contains__(self, key.lower())


def headers_of(raw: list[tuple[bytes, bytes]]) -> CaseInsensitiveHeaders:
    """Raw header pairs as a mapping; repeated names joined with ", " (RFC 9110, 5.3).

    Linear in the head's size: values are gathered per name and joined once (joining as they came
    was quadratic: 10,000 repeated headers on a 429 took seconds of a blocked event loop).
    """
    values: dict[str, list[bytes]] = {}
    for name, value in raw:
        key = name.decode("latin-1").lower()
        found = values.get(key)
        if found is None:
            values[key] = [value]
        else:
            found.append(value)
    headers = CaseInsensitiveHeaders()
    for key, parts in values.items():
        dict.__setitem__(headers, key, b", ".join(parts).decode("latin-1"))
    return headers


class H1Reply(BodyReply):
    """A whole answer whose header mapping is built on first use (a success never needs it)."""

    __slots__ = ("_raw",)

    def __init__(self, status: int, raw: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.status_code = status
        self._raw = raw
        self.body = body

    @property
    def headers(self) -> Mapping[str, str]:  # type: ignore[override]
        return headers_of(self._raw)


class _Connection(asyncio.Protocol):
    """One keep-alive connection: the protocol object asyncio feeds, and httptools' callbacks.

    One request at a time. ``waiter`` is the future the reading side awaits: the end of the answer
    for a plain POST, the next event (headers, a body chunk, the end) for a stream.
    """

    def __init__(self, lane: H1Lane) -> None:
        self.lane = lane
        self.loop = lane.loop
        self.transport: asyncio.Transport | None = None
        # The socket, polled before the connection is reused: a poll object made once per
        # connection, since ``select.select`` parses three lists per call (0.57 vs 1.4 us a poll).
        self.poller: select.poll | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.limits = CHECK_LIMITS
        self.head_bytes = 0  # bytes of the reads that ended inside the head
        # The head's bytes as parsed (every header, every interim head's included), against
        # max_head_bytes: ``data_received`` alone never counts the read that completes a head, so a
        # head (10,000 small headers, 4,000 "100 Continue" heads) arriving whole in one read of up
        # to 256 KiB would pass any limit. Counted inline in the callbacks (a call per header is
        # measurable on the hot path).
        self.head_parsed = 0
        self.body_bytes = 0
        self.truncated = False
        self.waiter: asyncio.Future[None] | None = None
        self.error: WireError | None = None
        self.streaming = False
        self.status = 0
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.coding: str | None = None  # Content-Encoding, the one header read on every answer
        self.chunks: deque[bytes] = deque()
        self.unread = 0
        self.paused = False
        self.head_done = False
        self.interim = False
        self.keep_alive = False
        self.complete = False
        self.closed = False
        self.received = False
        self.idle_since = 0.0
        self.last_io = 0.0
        self.read_timeout: float | None = None
        self.timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            poller = select.poll()
            poller.register(sock.fileno(), select.POLLIN)
            self.poller = poller

    def data_received(self, data: bytes) -> None:
        if (self.waiter is None and not self.streaming) or self.truncated:
            # Bytes nobody asked for (on an idle connection, or after an answer was cut): the
            # connection cannot be trusted with a request any more.
            self.close()
            return
        self.received = True
        self.last_io = time.monotonic()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            upgrade = WireError(WireKind.DROPPED, "UnexpectedUpgrade", "the server switched protocols")
            self._fail(upgrade, close=True)
            return
        except httptools.HttpParserError as exc:
            stop = exc.__context__
            if isinstance(stop, _Stop) and stop.error is not None:  # httptools wraps what a callback raises
                self._fail(stop.error, close=True)
            elif self.complete:
                # Bytes behind the complete answer: a second message (``_Stop``), junk after a
                # "Connection: close" or HTTP/1.0 answer (which llhttp reports as an error of its
                # own, no message begun), or the rest of a stray in a later read (the parser stays
                # in its error state). The answer stands, the connection is not reused: failing
                # it would turn a verdict into an outage, which ``on_error: allow`` lets through.
                self.keep_alive = False
            else:
                self._fail(WireError(WireKind.DROPPED, type(exc).__name__), close=True)
            return
        if not self.head_done:
            # Counted only while the head is incomplete (after feeding, so a packet holding the
            # head and the body's start is not counted): httptools gathers a header in memory
            # until its end, so an endless header line must be cut here. A head that ends in the
            # read that crosses the limit is counted as parsed instead (``head_parsed``).
            self.head_bytes += len(data)
            limit = self.limits.max_head_bytes
            if self.head_bytes > limit and not self.closed:
                self._fail(_too_large("HeadTooLarge", limit), close=True)

    def eof_received(self) -> bool | None:
        return False  # close the transport (connection_lost follows)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._cancel_timer()
        if exc is None and self.error is None and self.head_done and not self.complete and not self._framed():
            # A body delimited by the end of the connection: whole only on a clean close, not a
            # reset (RFC 9112, 8), and not the close that follows a failure (a body over its
            # limit): a stream reader looks at ``complete`` first, and would end as if whole.
            self.on_message_complete()
        if not self.complete:
            detail = str(exc)[:200] if isinstance(exc, OSError) else ""
            name = type(exc).__name__ if exc is not None else "RemoteProtocolError"
            detail = detail or "connection closed before a complete response"
            self._fail(WireError(WireKind.DROPPED, name, detail))
        self.lane.forget(self)

    # -- httptools callbacks ---------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:
            raise _Stop  # stops the parser: nothing after the answer is read as part of it

    def on_header(self, name: bytes, value: bytes) -> None:
        # Kept raw: the mapping is built only when someone reads it (an error status's Retry-After).
        size = len(name) + len(value)
        limits = self.limits
        if size > limits.max_header_bytes:
            raise _Stop(_too_large("HeaderTooLarge", limits.max_header_bytes))
        parsed = self.head_parsed = self.head_parsed + size + 4  # ": " and the line end
        if parsed > limits.max_head_bytes:
            raise _Stop(_too_large("HeadTooLarge", limits.max_head_bytes))
        self.raw_headers.append((name, value))
        if len(name) == 16 and name.lower() == b"content-encoding":
            coding = value.decode("latin-1")
            self.coding = coding if self.coding is None else f"{self.coding}, {coding}"

    @property
    def headers(self) -> CaseInsensitiveHeaders:
        return headers_of(self.raw_headers)

    def on_headers_complete(self) -> None:
        # "HTTP/1.1 200 " and the line ends of the status line and the head (see ``head_parsed``)
        parsed = self.head_parsed = self.head_parsed + 17
        if parsed > self.limits.max_head_bytes:
            raise _Stop(_too_large("HeadTooLarge", self.limits.max_head_bytes))
        parser = self.parser
        self.status = parser.get_status_code()
        if 100 <= self.status < 200:
            self.interim = True  # 100 Continue, 103 Early Hints...: the answer is still to come
            return
        # Asked here: llhttp forgets the answer once the message is complete.
        self.keep_alive = parser.should_keep_alive()
        self.head_done = True
        if self.streaming:
            self._wake()

    def on_body(self, body: bytes) -> None:
        size = self.body_bytes = self.body_bytes + len(body)
        if size > self.limits.max_body_bytes:
            if 200 <= self.status < 300:  # an answer (a stream's included) over the limit
                raise _Stop(_too_large("BodyTooLarge", self.limits.max_body_bytes))
            # An error status's body is read for an error code only: cut it, keep the status, and
            # end the answer here (the connection is not reused).
            self.truncated = True
            self.keep_alive = False
            self.complete = True
            self._cancel_timer()
            self._wake()
            raise _Stop
        self.chunks.append(body)
        if self.streaming:
            self.unread += len(body)
            if self.unread > MAX_UNREAD and not self.paused and self.transport is not None:
                self.paused = True
                self.transport.pause_reading()
            self._wake()

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
            self.status = 0
            self.raw_headers = []
            self.coding = None
            return
        self.complete = True
        self._cancel_timer()
        self._wake()

    # -- the request's side ----------------------------------------------------------------------

    def start(
        self, data: bytes, read_timeout: float | None, streaming: bool, limits: WireLimits
    ) -> asyncio.Future[None]:
        """Send one request (the connection must be idle) and arm the read timeout; returns the
        waiter of its first event (see ``waiter``)."""
        self.streaming = streaming
        self.limits = limits
        self.head_bytes = self.head_parsed = self.body_bytes = 0
        self.truncated = False
        self.received = self.head_done = self.complete = self.keep_alive = self.interim = False
        self.status = 0
        self.raw_headers = []
        self.coding = None
        self.chunks.clear()
        self.unread = 0
        self.error = None
        waiter = self.waiter = self.loop.create_future()
        self.last_io = time.monotonic()
        self.read_timeout = read_timeout
        if read_timeout is not None:
            self.timer = self.loop.call_later(read_timeout, self._check_read)
        assert self.transport is not None
        self.transport.write(data)
        return waiter

    async def wait(self) -> None:
        """Until the next event (see ``waiter``); raises the connection's failure.

        Callers look at the state (``head_done``, ``chunks``, ``complete``) before waiting, in the
        same step, so an event that happened before this call is never waited for again.
        """
        waiter = self.waiter
        if waiter is None or waiter.done():
            waiter = self.waiter = self.loop.create_future()
            if self.complete or self.error is not None:
                waiter.set_result(None)
        await waiter
        if self.error is not None:
            raise self.error

    def take(self) -> bytes:
        """The body bytes received and not yet taken (resumes a paused socket)."""
        chunks = self.chunks
        data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self.unread = 0
        if self.paused and self.transport is not None and not self.closed:
            self.paused = False
            self.transport.resume_reading()
        return data

    async def linger(self) -> None:
        """After a reader stopped at the stream's own end (``data: [DONE]``): the last bytes of the
        message (the chunked body's terminator) are usually a packet behind. Waiting a moment for
        them keeps the connection; otherwise ``finish`` closes it."""
        try:
            async with asyncio.timeout(LINGER):
                while not self.complete and not self.closed and self.error is None:
                    if self.chunks:
                        self.take()
                    await self.wait()
        except (TimeoutError, WireError):
            return
        if self.chunks:
            self.take()

    def finish(self) -> None:
        """After a response: back to the pool when it was read whole and may be kept alive."""
        self.waiter = None
        self.streaming = False
        self._cancel_timer()
        if self.complete and self.keep_alive and not self.closed and self.error is None:
            self.lane.release(self)
        else:
            self.close()

    def close(self) -> None:
        self._cancel_timer()
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()
        self.lane.forget(self)

    # -- internals -------------------------------------------------------------------------------

    def _framed(self) -> bool:
        headers = self.headers
        return "content-length" in headers or "chunked" in headers.get("transfer-encoding", "").lower()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: WireError, *, close: bool = False) -> None:
        if self.error is None:
            self.error = error
        self._wake()
        if close:
            self.close()

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _check_read(self) -> None:
        """The read timeout's timer: fires, or re-arms for what is left since the last byte."""
        self.timer = None
        limit = self.read_timeout
        if limit is None or self.complete or self.closed:
            return
        if self.paused:  # the reader is behind, not the server: wait for it
            self.timer = self.loop.call_later(limit, self._check_read)
            return
        quiet = time.monotonic() - self.last_io
        if quiet < limit:
            self.timer = self.loop.call_later(limit - quiet, self._check_read)
            return
        self._fail(WireError(WireKind.READ_TIMEOUT, "ReadTimeout", f"no data for {limit} s"), close=True)


def _header_block(path: str, host: str, headers: Mapping[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", f"User-Agent: {USER_AGENT}"]
    lines.append("Accept-Encoding: identity")
    for name, value in headers.items():
        if not name or any(c in name for c in " \t\r\n:\0") or any(c in value for c in "\r\n\0"):
            raise WireError(WireKind.OTHER, "InvalidHeader", f"header {name!r} cannot be sent")
        if name.lower() in ("host", "content-length", "transfer-encoding", "connection"):
            continue  # framing is this client's own
        lines.append(f"{name}: {value}")
    lines.append("Content-Length: ")
    try:
        return "\r\n".join(lines).encode("latin-1")
    except UnicodeEncodeError:
        raise WireError(WireKind.OTHER, "InvalidHeader", "a header value is not latin-1") from None


class H1Lane:
    """One base URL's connections on one loop and its admission gate (a ``WireLane``)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        base_url: str,
        gate: asyncio.Semaphore | None,
        *,
        max_idle: int,
        keepalive_expiry: float,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            what = f"not an http(s) URL: {parts.scheme!r}"
            raise WireError(WireKind.UNSUPPORTED, "UnsupportedProtocol", what)
        # Read once per lane (per loop and base URL), not per request. A proxy the client cannot
        # speak fails every request of this lane with the reason.
        self.proxy: Proxy | None = None
        self.proxy_error: WireError | None = None
        try:
            self.proxy = env_proxy(base_url)
        except WireError as exc:
            self.proxy_error = exc
        self.loop = loop
        self.gate = gate
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        default_port = self.port == (443 if self.tls else 80)
        name = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = name if default_port else f"{name}:{self.port}"
        self.max_idle = max_idle
        self.keepalive_expiry = keepalive_expiry
        self.idle: list[_Connection] = []
        self.busy: set[_Connection] = set()
        self.closed = False
        self._heads: dict[tuple[Any, ...], bytes] = {}

    # -- WireLane --------------------------------------------------------------------------------

    async def post(
        self,
        url: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        phases: Timeouts,
        limits: WireLimits = CHECK_LIMITS,
    ) -> Reply:
        conn = await self._send(url, body, headers, phases, limits, streaming=False)
        data = conn.take() if conn.chunks else b""
        status, raw, coding = conn.status, conn.raw_headers, conn.coding
        conn.finish()
        if coding is not None:
            data = decode_body(data, coding, limits)
        return H1Reply(status, raw, data)

    def stream(
        self,
        url: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        phases: Timeouts,
        limits: WireLimits = CHECK_LIMITS,
    ) -> _StreamContext:
        return _StreamContext(self, url, body, headers, phases, limits)

    # -- the pool --------------------------------------------------------------------------------

    async def _send(
        self,
        url: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        phases: Timeouts,
        limits: WireLimits,
        *,
        streaming: bool,
    ) -> _Connection:
        """Send the request and wait for the whole answer (for a stream: its head). Sent once more
        on a fresh connection when a reused one dies before any byte of the answer."""
        if self.proxy_error is not None:
            raise self.proxy_error
        key = (url, *headers.items())
        head = self._heads.get(key)
        if head is None:
            if len(self._heads) >= 256:  # per-request headers (trace ids...) must not grow it forever
                self._heads.clear()
            path = urlsplit(url)
            target = (path.path or "/") + (f"?{path.query}" if path.query else "")
            proxy = self.proxy
            if proxy is not None and not self.tls:
                # Through an HTTP proxy, a plain request names its whole URL (absolute form), and
                # the proxy's credentials go to the proxy alone.
                target = f"http://{self.host_header}{target}"
                if proxy.authorization is not None:
                    headers = {**headers, "Proxy-Authorization": proxy.authorization}
            head = self._heads[key] = _header_block(target, self.host_header, headers)
        payload = dumps_body(body)
        data = b"".join((head, str(len(payload)).encode(), b"\r\n\r\n", payload))
        while True:
            conn, reused = self._idle_connection()
            if conn is None:
                conn = await self._connect(phases.connect)
            self.busy.add(conn)
            waiter = conn.start(data, phases.read, streaming, limits)
            try:
                if streaming:
                    while not conn.head_done:
                        await conn.wait()
                else:
                    # The whole answer: ``conn.wait()`` inlined (its waiter is start's, not done:
                    # nothing has run since), one coroutine fewer per call.
                    await waiter
                    if conn.error is not None:
                        raise conn.error
            except WireError as exc:
                conn.close()
                if reused and exc.kind is WireKind.DROPPED and not conn.received:
                    # The server had closed it while idle (a timeout is not that: the server may
                    # still be working on the request): once more, on a new connection.
                    continue
                raise
            except BaseException:
                conn.close()  # cancelled: an answer still on its way must not meet the next request
                raise
            return conn

    def _idle_connection(self) -> tuple[_Connection | None, bool]:
        idle = self.idle
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.closed:
                continue
            if now - conn.idle_since > self.keepalive_expiry:
                conn.close()
                continue
            # Bytes (or the end) waiting unread on an idle connection are a response nobody asked
            # for (a server's 408 before it closes, a buggy proxy's second answer) that the event
            # loop has not delivered yet: reused, the connection would hand them to the next request
            # as its answer. One poll, no wait, on every reused call.
            poller = conn.poller
            try:
                stray = poller is not None and bool(poller.poll(0))  # readable, closed or failed
            except (OSError, ValueError):
                stray = True
            if stray:
                conn.close()
                continue
            return conn, True
        return None, False

    async def _connect(self, limit: float | None) -> _Connection:
        loop = self.loop
        context = shared_ssl_context() if self.tls else None
        proxy = self.proxy
        try:
            async with asyncio.timeout(limit):
                if proxy is None:
                    _, conn = await loop.create_connection(
                        lambda: _Connection(self),
                        self.host,
                        self.port,
                        ssl=context,
                        server_hostname=self.host if context is not None else None,
                    )
                elif context is None:  # plain http through the proxy
                    _, conn = await loop.create_connection(lambda: _Connection(self), proxy.host, proxy.port)
                else:  # https through a CONNECT tunnel, TLS end to end
                    raw = await open_tunnel(loop, proxy, self.host, self.port)
                    conn = _Connection(self)
                    try:
                        secure = await loop.start_tls(raw, conn, context, server_hostname=self.host)
                    except BaseException:
                        raw.close()
                        raise
                    if secure is None:
                        raise WireError(WireKind.DROPPED, "ProxyError", "the tunnel closed during TLS")
                    conn.connection_made(secure)
        except TimeoutError:
            raise WireError(
                WireKind.CONNECT_TIMEOUT, "ConnectTimeout", f"no connection within {limit} s"
            ) from None
        except ssl.SSLCertVerificationError as exc:  # a configuration error, not an outage
            raise WireError(WireKind.TLS_VERIFY, type(exc).__name__, str(exc)[:200]) from exc
        except (OSError, ssl.SSLError) as exc:  # refused, DNS, TLS handshake
            raise WireError(WireKind.CONNECT, type(exc).__name__, str(exc)[:200]) from exc
        if self.closed:
            conn.close()
            raise WireError(WireKind.OTHER, "PoolClosed", "the connection pool was closed")
        return conn

    def release(self, conn: _Connection) -> None:
        self.busy.discard(conn)
        if self.closed or len(self.idle) >= self.max_idle:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        self.idle.append(conn)

    def forget(self, conn: _Connection) -> None:
        self.busy.discard(conn)
        if conn in self.idle:
            self.idle.remove(conn)

    def close(self) -> None:
        """Close idle connections now and busy ones as their requests end."""
        self.closed = True
        for conn in [*self.idle, *self.busy]:
            if conn.waiter is None and not conn.streaming:
                conn.close()
        self.idle.clear()

    def abandon(self) -> None:
        """Forget connections whose loop is closed: nothing can be scheduled on it any more, and
        each transport closes its socket when it is collected."""
        self.idle.clear()
        self.busy.clear()


class _StreamContext:
    """``async with lane.stream(...) as reply``: the answer's head is in when the block starts."""

    __slots__ = ("args", "lane", "reply")

    def __init__(self, lane: H1Lane, *args: Any) -> None:
        self.lane = lane
        self.args = args
        self.reply: H1Stream | None = None

    async def __aenter__(self) -> H1Stream:
        conn = await self.lane._send(*self.args, streaming=True)
        self.reply = H1Stream(conn)
        return self.reply

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if self.reply is None:
            return
        conn = self.reply.conn
        if exc_type is None and not conn.complete:
            await conn.linger()
        conn.finish()


class H1Stream:
    """A streamed answer (implements :class:`~guardcache.llm.transport_contract.StreamReply`)."""

    __slots__ = ("conn",)

    def __init__(self, conn: _Connection) -> None:
        self.conn = conn

    @property
    def status_code(self) -> int:
        return self.conn.status

    @property
    def is_success(self) -> bool:
        return 200 <= self.conn.status < 300

    async def read(self) -> Reply:
        conn = self.conn
        parts: list[bytes] = []
        while True:
            if conn.chunks:
                parts.append(conn.take())
            if conn.complete:
                break
            await conn.wait()
        data = b"".join(parts)
        if conn.coding is not None:
            data = decode_body(data, conn.coding, conn.limits)
        return H1Reply(conn.status, conn.raw_headers, data)

    async def lines(self) -> AsyncIterator[str]:
        conn = self.conn
        limits = conn.limits
        decoder = BodyDecoder(conn.coding, limits) if conn.coding is not None else None
        splitter = LineSplitter(limits.max_line_bytes)
        while True:
            if conn.chunks:
                data = conn.take()
                if decoder is not None:
                    data = decoder.feed(data)  # a bomb is cut at the decoded limit
                for line in splitter.feed(data):
                    yield line
                continue
            if conn.error is not None:
                raise conn.error
            if conn.complete:
                break
            await conn.wait()
        if decoder is not None:
            decoder.end()
        for line in splitter.end():
            yield line


class H1Pool:
    """Lanes per (running loop, base URL) (a ``WirePool``); thread-safe as the other pools.

    ``max_connections`` sizes each lane's admission gate (None: no gate); ``max_idle`` bounds the
    idle connections kept per lane.
    """

    def __init__(
        self,
        *,
        max_connections: int | None = DEFAULT_LIMITS.max_connections,
        max_idle: int = DEFAULT_LIMITS.max_keepalive_connections or 32,
        keepalive_expiry: float = KEEPALIVE_EXPIRY,
    ) -> None:
        self.max_connections = max_connections
        self.max_idle = max_idle
        self.keepalive_expiry = keepalive_expiry
        self._lanes: LoopLanes[WireLane] = LoopLanes()

    def lane(self, base_url: str) -> WireLane:
        return self._lanes.get(base_url, self._new_lane)

    def _new_lane(self, loop: asyncio.AbstractEventLoop, base_url: str) -> WireLane:
        size = self.max_connections
        gate = asyncio.Semaphore(size) if size else None
        return H1Lane(loop, base_url, gate, max_idle=self.max_idle, keepalive_expiry=self.keepalive_expiry)

    def lanes_for_running_loop(self) -> dict[str, WireLane]:
        """A snapshot of the running loop's lanes by normalized base URL (tests and stats)."""
        return self._lanes.snapshot()

    async def aclose_all(self) -> None:
        """Close the running loop's connections; forget loops that are already closed."""
        lanes, stale = self._lanes.release()
        for lane in stale:
            if isinstance(lane, H1Lane):
                lane.abandon()
        for lane in lanes:
            if isinstance(lane, H1Lane):
                lane.close()


__all__ = ["KEEPALIVE_EXPIRY", "CaseInsensitiveHeaders", "H1Lane", "H1Pool", "H1Stream"]
