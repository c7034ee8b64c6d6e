"""One pooled ``httpx2.AsyncClient`` per (event loop, base URL): the transport of ChatClients given
``transport=`` or ``http_client=`` (``httpx2.MockTransport`` in tests, custom network stacks) or a
``ClientPool``; and which transport
ChatClients use by default (:func:`default_pool`: guardcache's own HTTP/1.1 client,
:mod:`guardcache.llm.h1_pool`). All implement :class:`~guardcache.llm.wire.WireLane`; the reasons
below (pooling per loop, the admission gate, the idle bound) hold for all, and each module says where
it differs.

Why httpx2 (over httpx 0.28): it is httpx's successor from the same authors, API-identical, and
already installed with langchain-core (through langsmith). httpx 0.28's httpcore 1.x pool rescans
every connection several times per pool event, so a guard call cost the client 3 ms of CPU alone and
15-20 ms at 100-256 concurrent checks; httpx2's pool makes one pass (measured: the demo's no-cache
pass took 44.5 s with httpx and 9.9 s with httpx2, p50 turn latency 1582 ms vs 407 ms, same workload
and machine). That one pass still probes each IDLE connection's socket (a syscall each), which is
why the number of idle connections kept is bounded (see DEFAULT_LIMITS).

Why pool: a guard call is small and frequent; a fresh TCP (and TLS) connection per call can cost
more than the call itself on a fast backend, undoing the latency the server's KV-cache reuse saves.
All ChatClients that talk to one base URL therefore share one AsyncClient and
its keep-alive connections.

Why per loop: an AsyncClient's connections belong to the event loop that opened them; using them
from another loop fails ("Event loop is closed", hangs). The runtime's sync API calls
``asyncio.run`` once per request, a new loop each time, so the pool is keyed by the running loop
first (a ``WeakKeyDictionary``: a loop that is garbage-collected takes its entry with it) and a
client is never handed to a loop other than the one that created it.

Why an admission gate: a burst larger than ``max_connections`` used to queue inside httpx2's pool,
where every pool event (a request added, a response closed) walks the whole queue, so a burst of n
costs O(n^2), and the wait was bounded by a fixed pool timeout (5 s) unrelated to the caller's
deadline: 2,000 concurrent distinct checks failed 2-5% with "no free connection". So each (loop,
base URL) gets an ``asyncio.Semaphore`` in front of httpx2 (FIFO, O(1) per event), and the wait is
bounded by the caller's own deadline (the ``asyncio.timeout`` around the call), not by a separate
pool timeout. The gate admits TWICE ``max_connections``: with exactly ``max_connections``, a
finished request's connection goes back to httpx2 idle, with nobody queued, until the woken waiter
sends on it an event-loop iteration later, and every pool event in between probes it. Keeping up to
``max_connections`` requests queued inside httpx2 lets it hand a released connection straight to the
next one. Measured (2,000 concurrent calls to a canned-response server, 100 connections; counts are
deterministic, CPU times noisy on a shared 2-core VM): idle-socket probes 64,101 with a gate of 100,
4,674 with a gate of 200 or none; requests walked by the pool 321k / 584k / 4.39M; CPU in the pool's
assignment 1.8-2.6 s / 0.8-1.2 s / 1.3-1.5 s. At 5,000 calls: 1.49M vs 26.0M requests walked, 2.8 s vs
6.6 s in the pool, 2.2 vs 3.1 ms of client CPU per call (gate of 200 vs none).

Shutdown: :func:`aclose_all` closes the clients of the *running* loop (a client can only be closed
from its own loop). Code that runs ``asyncio.run`` per request should await it before the loop ends,
or the sockets are only reclaimed when the garbage collector finds them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

import httpx2

from guardcache.llm.wire import (
    CHECK_LIMITS,
    BodyDecoder,
    BodyReply,
    LineSplitter,
    Reply,
    WireError,
    WireKind,
    WireLimits,
    WirePool,
)

DEFAULT_LIMITS = httpx2.Limits(max_connections=100, max_keepalive_connections=32, keepalive_expiry=4.0)
"""Up to 100 concurrent requests per backend before requests queue (FIFO, in the pool's admission
gate, bounded by each call's deadline), and up to 32 of those connections kept alive when idle.

Why 32 and not all 100: every pool event probes each idle connection's socket, so idle connections
left over from a burst tax every later request (measured against the emulator on 2 vCPUs, after a
burst of 200: with 100 kept, 16 concurrent checks cost 4.6 ms of client CPU each and ran at 213/s;
with 32 kept, 1.5 ms and 631/s). Why not httpx2's default of 20: sustained concurrency above the
keep-alive count closes and reopens a connection per request (at 64 concurrent: 1.7 ms and 577/s
with 20 kept, 1.2 ms and 820/s with 32 or 100). Idle connections expire after 4 s, under the 5 s
keep-alive of common servers (uvicorn, many proxies), so the client rarely reuses a connection the
server is closing (a ReadError and a retry)."""

USER_AGENT = "guardcache"


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """One TLS context for every pooled client (honours SSL_CERT_FILE / SSL_CERT_DIR).

    Why: building one loads the CA bundle, ~30 ms of blocking CPU. Each new event loop needs new
    clients, and the sync API runs a loop per request, so without sharing every sync request would
    stall ~30 ms per backend before sending a byte. ``SSLContext`` is safe to share across threads.
    """
    return httpx2.create_ssl_context()


def normalize_base_url(base_url: str) -> str:
    """``http://h:8000/v1/`` and ``http://h:8000/v1`` are the same backend."""
    return base_url.strip().rstrip("/")


L = TypeVar("L")


class LoopLanes(Generic[L]):
    """Every transport's lanes by (event loop, base URL): a lane is never handed to another loop.

    Thread-safe: each loop runs in one thread and only touches its own inner dict; the outer map
    from loop (a ``WeakKeyDictionary``: a collected loop takes its lanes with it) to inner dict is
    guarded by a lock held for a dict operation only. A base URL as given is an alias of its
    normalized form, so the hot path is one dict lookup.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, L]] = (
            weakref.WeakKeyDictionary()
        )

    def get(self, base_url: str, make: Callable[[asyncio.AbstractEventLoop, str], L]) -> L:
        """The running loop's lane for ``base_url``; ``make(loop, normalized_url)`` on first use."""
        loop = asyncio.get_running_loop()
        lanes = self._by_loop.get(loop)
        if lanes is None:
            with self._lock:
                lanes = self._by_loop.setdefault(loop, {})
        lane = lanes.get(base_url)
        if lane is None:
            key = normalize_base_url(base_url)
            lane = lanes.get(key)
            if lane is None:
                # No await between the lookup and the store: no other task of this loop interleaves.
                lane = lanes[key] = make(loop, key)
            lanes[base_url] = lane
        return lane

    def snapshot(self) -> dict[str, L]:
        """The running loop's lanes by normalized base URL (tests and stats)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            lanes = dict(self._by_loop.get(loop, {}))
        return {url: lane for url, lane in lanes.items() if url == normalize_base_url(url)}

    def release(self) -> tuple[list[L], list[L]]:
        """Forget the running loop's lanes and those of loops already closed; returns each set once
        per lane (aliases removed): the running loop's, to close, and the closed loops', whose
        sockets died with their loop and can only be dropped."""
        loop = asyncio.get_running_loop()
        with self._lock:
            current = self._by_loop.pop(loop, {})
            stale = [self._by_loop.pop(other) for other in [lp for lp in self._by_loop if lp.is_closed()]]
        return _unique(current.values()), _unique(lane for lanes in stale for lane in lanes.values())


def _unique(lanes: Iterable[L]) -> list[L]:
    return list({id(lane): lane for lane in lanes}.values())


ADMISSION_FACTOR = 2
"""The admission gate lets ``ADMISSION_FACTOR * max_connections`` requests into httpx2 (see above)."""


class Lane:
    """The shared client of one base URL on one loop, and the gate that admits requests to it.

    ``gate`` is None when the limits set no ``max_connections`` (nothing to queue for). Implements
    :class:`~guardcache.llm.wire.WireLane`: httpx2's exceptions come out as ``WireError``.
    """

    __slots__ = ("client", "gate")

    def __init__(self, client: httpx2.AsyncClient, gate: asyncio.Semaphore | None) -> None:
        self.client = client
        self.gate = gate

    async def post(
        self,
        url: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        phases: httpx2.Timeout,
        limits: WireLimits = CHECK_LIMITS,
    ) -> Reply:
        response = await self._open(url, body, headers, phases)
        try:
            try:
                return await _read_limited(response, limits)
            finally:
                await response.aclose()
        except (httpx2.TransportError, httpx2.DecodingError) as exc:
            raise wire_error(exc) from exc

    @contextlib.asynccontextmanager
    async def stream(
        self,
        url: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        phases: httpx2.Timeout,
        limits: WireLimits = CHECK_LIMITS,
    ) -> AsyncIterator[_HttpxStream]:
        response = await self._open(url, body, headers, phases)
        try:
            _check_head(response, limits)
            yield _HttpxStream(response, limits)
        finally:
            await response.aclose()

    async def _open(
        self, url: str, body: Mapping[str, Any], headers: Mapping[str, str], phases: httpx2.Timeout
    ) -> httpx2.Response:
        """Send the POST and return the response with its body unread (the caller reads it
        within the limits and closes it); httpx2's failures as ``WireError``."""
        client = self.client
        try:
            request = client.build_request("POST", url, json=body, headers=headers, timeout=phases)
            return await client.send(request, stream=True)
        except (httpx2.TransportError, httpx2.DecodingError) as exc:
            raise wire_error(exc) from exc


def _check_head(response: httpx2.Response, limits: WireLimits) -> None:
    """httpx2 (h11) bounds the head at 100 KiB; one header field is held to ``max_header_bytes``."""
    limit = limits.max_header_bytes
    if any(len(name) + len(value) > limit for name, value in response.headers.raw):
        raise WireError(WireKind.TOO_LARGE, "HeaderTooLarge", f"over {limit} bytes")


async def _read_limited(response: httpx2.Response, limits: WireLimits) -> BodyReply:
    """The body, decoded by :class:`BodyDecoder` (httpx2's own decoder inflates a chunk whole, with
    no bound), within ``limits``; an error status's body is cut at a limit instead (it is read for
    an error code only: the status decides)."""
    _check_head(response, limits)
    try:
        content = response.content  # a response made in memory (httpx2.MockTransport) is read
    except httpx2.ResponseNotRead:
        pass
    else:
        if len(content) > limits.max_decoded_bytes and response.is_success:
            raise WireError(WireKind.TOO_LARGE, "BodyTooLarge", f"over {limits.max_decoded_bytes} bytes")
        return BodyReply(response.status_code, response.headers, content[: limits.max_decoded_bytes])
    decoder = BodyDecoder(response.headers.get("content-encoding"), limits)
    parts: list[bytes] = []
    async for chunk in response.aiter_raw():
        try:
            parts.append(decoder.feed(chunk))
        except WireError as exc:
            if response.is_success or exc.kind is not WireKind.TOO_LARGE:
                raise
            break
    else:
        if response.is_success:
            decoder.end()
    return BodyReply(response.status_code, response.headers, b"".join(parts))


class _HttpxStream:
    __slots__ = ("limits", "response")

    def __init__(self, response: httpx2.Response, limits: WireLimits) -> None:
        self.response = response
        self.limits = limits

    @property
    def status_code(self) -> int:
        return self.response.status_code

    @property
    def is_success(self) -> bool:
        return self.response.is_success

    async def read(self) -> Reply:
        try:
            return await _read_limited(self.response, self.limits)
        except (httpx2.TransportError, httpx2.DecodingError) as exc:
            raise wire_error(exc) from exc

    async def lines(self) -> AsyncIterator[str]:
        response = self.response
        limits = self.limits
        splitter = LineSplitter(limits.max_line_bytes)
        decoder = BodyDecoder(response.headers.get("content-encoding"), limits)
        try:
            async for chunk in response.aiter_raw():
                for line in splitter.feed(decoder.feed(chunk)):
                    yield line
            decoder.end()
        except (httpx2.TransportError, httpx2.DecodingError) as exc:
            raise wire_error(exc) from exc
        for line in splitter.end():
            yield line


def wire_error(exc: httpx2.TransportError | httpx2.DecodingError) -> WireError:
    """httpx2's exception as the client's classification (see :class:`WireKind`)."""
    name = type(exc).__name__
    # OS and timeout messages ("[Errno 111] Connection refused") say what happened; protocol
    # errors can quote bytes the server sent (h11's "illegal status line: ..."), so only their
    # class is kept.
    detail = str(exc)[:200] if isinstance(exc, httpx2.NetworkError | httpx2.TimeoutException) else ""
    if isinstance(exc, httpx2.DecodingError):
        kind = WireKind.DECODE
    elif isinstance(exc, httpx2.ConnectTimeout):
        kind = WireKind.CONNECT_TIMEOUT
    elif isinstance(exc, httpx2.PoolTimeout):
        kind = WireKind.POOL_TIMEOUT
    elif isinstance(exc, httpx2.WriteTimeout):
        kind = WireKind.WRITE_TIMEOUT
    elif isinstance(exc, httpx2.TimeoutException):
        kind = WireKind.READ_TIMEOUT
    elif isinstance(exc, httpx2.ConnectError):
        kind = WireKind.CONNECT
    elif isinstance(exc, httpx2.RemoteProtocolError | httpx2.ReadError | httpx2.WriteError):
        kind = WireKind.DROPPED
    elif isinstance(exc, httpx2.UnsupportedProtocol):
        kind = WireKind.UNSUPPORTED
    else:  # ProxyError, LocalProtocolError, CloseError...
        kind = WireKind.OTHER
    return WireError(kind, name, detail)


class ClientPool:
    """Shares one ``httpx2.AsyncClient`` per base URL within each event loop.

    Thread-safe: each loop runs in one thread and only touches its own inner dict; the outer map
    from loop to inner dict is guarded by a lock held for a dict operation only.

    ``transport`` makes every client of this pool send through it (tests: ``httpx2.MockTransport``);
    closing a client closes its transport, so a pool with a transport is meant to be private to
    one owner. ``limits`` configure httpx2's default transport when there is no ``transport``;
    their ``max_connections`` also sizes each base URL's admission gate (see :class:`Lane`), with or
    without a transport.
    """

    def __init__(
        self,
        *,
        limits: httpx2.Limits = DEFAULT_LIMITS,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self._limits = limits
        self._transport = transport
        self._lanes: LoopLanes[Lane] = LoopLanes()

    def lane(self, base_url: str) -> Lane:
        """The client and admission gate for ``base_url`` on the running loop; created on first use.

        Must be called from a coroutine (it needs the running loop). A client someone closed is
        replaced rather than handed out; its gate is kept, so requests already queued in it and
        new ones share one FIFO order and one bound.
        """
        lane = self._lanes.get(base_url, self._new_lane)
        if lane.client.is_closed:
            lane.client = self._new_client()
        return lane

    def _new_lane(self, loop: asyncio.AbstractEventLoop, base_url: str) -> Lane:
        size = self._limits.max_connections
        gate = asyncio.Semaphore(ADMISSION_FACTOR * size) if size else None
        return Lane(self._new_client(), gate)

    def get(self, base_url: str) -> httpx2.AsyncClient:
        """The shared client for ``base_url`` on the running loop (see :meth:`lane`).

        Requests sent on it directly bypass the admission gate, so they may queue in httpx2's pool.
        """
        return self.lane(base_url).client

    def _new_client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            limits=self._limits,
            transport=self._transport,
            verify=shared_ssl_context(),
            headers={"User-Agent": USER_AGENT},
            # Timeouts are passed per request by each ChatClient; this is only a fallback.
            timeout=httpx2.Timeout(10.0, connect=2.0),
        )

    def clients_for_running_loop(self) -> dict[str, httpx2.AsyncClient]:
        """A snapshot of the running loop's clients by normalized base URL (for tests and stats)."""
        return {url: lane.client for url, lane in self._lanes.snapshot().items()}

    async def aclose_all(self) -> None:
        """Close every client of the running loop and forget loops that are already closed.

        Clients of a loop that is closed cannot be closed any more (their sockets belong to it);
        dropping them lets the garbage collector reclaim the sockets.
        """
        lanes, _ = self._lanes.release()
        for lane in lanes:
            await lane.client.aclose()


_DEFAULT_POOL = ClientPool()

_default_wire: WirePool | None = None
_default_lock = threading.Lock()


def default_pool() -> WirePool:
    """The process-wide pool every ChatClient uses unless given a transport, a client or a pool:
    guardcache's own HTTP/1.1 client (:mod:`guardcache.llm.h1_pool`), the one network transport
    the project ships. Why one: it needs the least CPU per call (``benchmarks/bench_http_clients.py``)
    and passes the whole transport contract (tests/integration/test_transport_contract.py);
    httpx2's stack read neither a stream's end nor a dropped keep-alive connection as well, and
    aiohttp read a stray response on an idle connection as the next answer. httpx2 stays as the
    adapter for a caller's own ``transport=`` / ``http_client=``.
    """
    global _default_wire
    if _default_wire is None:
        with _default_lock:
            if _default_wire is None:
                from guardcache.llm.h1_pool import H1Pool

                _default_wire = H1Pool()
    return _default_wire


def get_http_client(base_url: str) -> httpx2.AsyncClient:
    """The shared httpx2 AsyncClient for ``base_url`` on the running loop (see :class:`ClientPool`)."""
    return _DEFAULT_POOL.get(base_url)


async def aclose_all() -> None:
    """Close the default pools' clients of the running loop; call it before the loop ends."""
    await _DEFAULT_POOL.aclose_all()
    if _default_wire is not None and _default_wire is not _DEFAULT_POOL:
        await _default_wire.aclose_all()


__all__ = [
    "ADMISSION_FACTOR",
    "DEFAULT_LIMITS",
    "ClientPool",
    "Lane",
    "LoopLanes",
    "WirePool",
    "aclose_all",
    "default_pool",
    "get_http_client",
    "normalize_base_url",
    "wire_error",
]
