"""The httpx2 transport: one pooled ``httpx2.AsyncClient`` per (event loop, base URL), behind an
admission gate. What ChatClients given ``transport=`` or ``http_client=`` (``httpx2.MockTransport``
in tests, custom network stacks) or a :class:`ClientPool` send through; the default transport is
guardcache's own HTTP/1.1 client (:mod:`guardcache.llm.h1_pool`, chosen in
:mod:`guardcache.llm.default_pools`). Implements
:class:`~guardcache.llm.transport_contract.WireLane`: httpx2's exceptions come out as ``WireError``
(:func:`wire_error`, the one map). Pooling per loop and the shared limits and TLS context are
:mod:`guardcache.llm.lanes`'.

Why httpx2 (over httpx 0.28): it is httpx's successor from the same authors, API-identical, and
already installed with langchain-core (through langsmith). httpx 0.28's httpcore 1.x pool rescans
every connection several times per pool event, so a guard call cost the client 3 ms of CPU alone and
15-20 ms at 100-256 concurrent checks; httpx2's pool makes one pass (measured: the demo's no-cache
pass took 44.5 s with httpx and 9.9 s with httpx2, p50 turn latency 1582 ms vs 407 ms, same workload
and machine). That one pass still probes each IDLE connection's socket (a syscall each), which is
why the number of idle connections kept is bounded (see ``DEFAULT_LIMITS``).

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
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx2

from guardcache.llm.lanes import DEFAULT_LIMITS, USER_AGENT, LoopLanes, PoolLimits, shared_ssl_context
from guardcache.llm.transport_contract import (
    CHECK_LIMITS,
    Reply,
    Timeouts,
    WireError,
    WireKind,
    WireLimits,
)
from guardcache.llm.wire import BodyDecoder, BodyReply, LineSplitter

ADMISSION_FACTOR = 2
"""The admission gate lets ``ADMISSION_FACTOR * max_connections`` requests into httpx2 (see above)."""


class Lane:
    """The shared client of one base URL on one loop, and the gate that admits requests to it.

    ``gate`` is None when the limits set no ``max_connections`` (nothing to queue for). Implements
    :class:`~guardcache.llm.transport_contract.WireLane`: httpx2's exceptions come out as ``WireError``.
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
        phases: Timeouts,
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
        phases: Timeouts,
        limits: WireLimits = CHECK_LIMITS,
    ) -> AsyncIterator[_HttpxStream]:
        response = await self._open(url, body, headers, phases)
        try:
            _check_head(response, limits)
            yield _HttpxStream(response, limits)
        finally:
            await response.aclose()

    async def _open(
        self, url: str, body: Mapping[str, Any], headers: Mapping[str, str], phases: Timeouts
    ) -> httpx2.Response:
        """Send the POST and return the response with its body unread (the caller reads it
        within the limits and closes it); httpx2's failures as ``WireError``."""
        client = self.client
        try:
            timeout = httpx_timeout(phases)
            request = client.build_request("POST", url, json=body, headers=headers, timeout=timeout)
            return await client.send(request, stream=True)
        except (httpx2.TransportError, httpx2.DecodingError) as exc:
            raise wire_error(exc) from exc


def httpx_timeout(phases: Timeouts | httpx2.Timeout) -> httpx2.Timeout:
    """The lane's phase timeouts as httpx2's: the one place the seam's :class:`Timeouts` become an
    ``httpx2.Timeout`` (an ``httpx2.Timeout`` a caller hands a lane directly passes as it is)."""
    if isinstance(phases, httpx2.Timeout):
        return phases
    return _converted(phases)


@functools.lru_cache(maxsize=64)
def _converted(phases: Timeouts) -> httpx2.Timeout:
    # A client sends the same Timeouts with every request: convert each once.
    return httpx2.Timeout(connect=phases.connect, read=phases.read, write=phases.write, pool=phases.pool)


def httpx_limits(limits: PoolLimits | httpx2.Limits) -> httpx2.Limits:
    """The lanes' :class:`~guardcache.llm.lanes.PoolLimits` as httpx2's (an ``httpx2.Limits``
    passes as it is)."""
    if isinstance(limits, httpx2.Limits):
        return limits
    return httpx2.Limits(
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
    )


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
        limits: PoolLimits | httpx2.Limits = DEFAULT_LIMITS,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self._limits = httpx_limits(limits)
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


__all__ = ["ADMISSION_FACTOR", "ClientPool", "Lane", "httpx_limits", "httpx_timeout", "wire_error"]
