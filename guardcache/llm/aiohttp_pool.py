"""One pooled ``aiohttp.ClientSession`` per (event loop, base URL): the transport for base URLs the
environment sends through a proxy, and for every call with ``GUARDCACHE_HTTP_CLIENT=aiohttp``.

It was the default until guardcache's own HTTP/1.1 client (:mod:`guardcache.llm.h1_pool`) measured
~2.5x less client CPU per call (``benchmarks/bench_http_clients.py``); it stays for what that client
does not speak (proxies) and as a second implementation of the same ``WireLane``.

Everything the httpx2 pool gives is kept (see :mod:`guardcache.llm.pool` for the reasons):
- one session per (loop, base URL), in a ``WeakKeyDictionary`` keyed by the loop; a session is never
  handed to another loop; :meth:`AiohttpPool.aclose_all` closes the running loop's sessions;
- a FIFO admission gate (``asyncio.Semaphore``) per lane, bounded by the caller's deadline. Its size
  is ``max_connections`` itself, the connector's limit: aiohttp's own queue for a connection is a
  FIFO too, but with the gate in front nobody waits inside aiohttp, so no separate pool timeout
  applies (httpx2 needed twice the connections admitted because a released connection sat idle
  until the next waiter ran; aiohttp hands it back to its pool at once);
- keep-alive connections expire after 4 s (under the 5 s of common servers);
- TLS verified with the one shared context (:func:`~guardcache.llm.pool.shared_ssl_context`,
  ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` honoured);
- proxies from the environment (``HTTPS_PROXY``, ``NO_PROXY``...), as httpx2 does, read once per lane
  rather than per request (aiohttp's ``trust_env`` reads the environment on every request);
- no redirects followed (a 3xx is a status error, as with httpx2), no cookies kept (a shared session
  must not carry one user's cookies into another user's request).

Phase timeouts: ``connect`` is aiohttp's ``sock_connect`` and ``read`` its ``sock_read`` (both per
phase, as httpx2's). aiohttp has no write timeout; the whole-call budget bounds writes (a request
is a few KB).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import httpx2
from aiohttp import http_exceptions
from yarl import URL

from guardcache.llm.pool import DEFAULT_LIMITS, USER_AGENT, LoopLanes, shared_ssl_context
from guardcache.llm.wire import BodyReply, Reply, WireError, WireKind, dumps_body

KEEPALIVE_EXPIRY = 4.0
"""Seconds an idle connection is kept (under the 5 s keep-alive of uvicorn and many proxies)."""


class AiohttpLane:
    """One base URL's session on one loop and its admission gate (a ``WireLane``)."""

    __slots__ = ("_timeouts", "_urls", "gate", "proxy", "proxy_auth", "session")

    def __init__(
        self, session: aiohttp.ClientSession, gate: asyncio.Semaphore | None, proxy: tuple[Any, Any]
    ) -> None:
        self.session = session
        self.gate = gate
        self.proxy, self.proxy_auth = proxy
        self._urls: dict[str, URL] = {}
        self._timeouts: dict[tuple[float | None, float | None], aiohttp.ClientTimeout] = {}

    def _url(self, url: str) -> URL:
        parsed = self._urls.get(url)
        if parsed is None:
            # Parsed once per URL (yarl parsing is a measurable part of a request's CPU).
            parsed = self._urls[url] = URL(url, encoded=False)
        return parsed

    def _timeout(self, timeout: httpx2.Timeout) -> aiohttp.ClientTimeout:
        key = (timeout.connect, timeout.read)
        found = self._timeouts.get(key)
        if found is None:
            found = self._timeouts[key] = aiohttp.ClientTimeout(
                total=None, connect=None, sock_connect=timeout.connect, sock_read=timeout.read
            )
        return found

    async def post(
        self, url: str, body: Mapping[str, Any], headers: Mapping[str, str], phases: httpx2.Timeout
    ) -> Reply:
        try:
            async with self.session.post(
                self._url(url),
                data=dumps_body(body),
                headers=headers,
                timeout=self._timeout(phases),
                allow_redirects=False,
                proxy=self.proxy,
                proxy_auth=self.proxy_auth,
            ) as response:
                data = await response.read()
                return BodyReply(response.status, response.headers, data)
        except (aiohttp.ClientError, http_exceptions.HttpProcessingError) as exc:
            raise wire_error(exc) from exc

    @contextlib.asynccontextmanager
    async def stream(
        self, url: str, body: Mapping[str, Any], headers: Mapping[str, str], phases: httpx2.Timeout
    ) -> AsyncIterator[_AiohttpStream]:
        try:
            response = await self.session.post(
                self._url(url),
                data=dumps_body(body),
                headers=headers,
                timeout=self._timeout(phases),
                allow_redirects=False,
                proxy=self.proxy,
                proxy_auth=self.proxy_auth,
            )
        except (aiohttp.ClientError, http_exceptions.HttpProcessingError) as exc:
            raise wire_error(exc) from exc
        try:
            yield _AiohttpStream(response)
        finally:
            # A response read to its end returns its connection to the pool; one abandoned early
            # (a block mid-stream cancels the main call) closes it.
            response.release()


class _AiohttpStream:
    __slots__ = ("response",)

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response

    @property
    def status_code(self) -> int:
        return self.response.status

    @property
    def is_success(self) -> bool:
        return 200 <= self.response.status < 300

    async def read(self) -> Reply:
        response = self.response
        try:
            data = await response.read()
        except (aiohttp.ClientError, http_exceptions.HttpProcessingError) as exc:
            raise wire_error(exc) from exc
        return BodyReply(response.status, response.headers, data)

    async def lines(self) -> AsyncIterator[str]:
        content = self.response.content
        try:
            while True:
                line = await content.readline()
                if not line:
                    return
                yield line.decode().rstrip("\r\n")
        except (aiohttp.ClientError, http_exceptions.HttpProcessingError) as exc:
            raise wire_error(exc) from exc


def wire_error(exc: BaseException) -> WireError:
    """aiohttp's exception as the client's classification (see :class:`WireKind`).

    The detail (exception text) is kept only for OS errors and timeouts, whose text cannot quote
    the server; a parser error can.
    """
    name = type(exc).__name__
    detail = ""
    if isinstance(exc, aiohttp.ServerTimeoutError):
        detail = str(exc) or "timed out"
        kind = (
            WireKind.CONNECT_TIMEOUT
            if isinstance(exc, aiohttp.ConnectionTimeoutError)
            else WireKind.READ_TIMEOUT
        )
    elif isinstance(exc, aiohttp.ClientProxyConnectionError | aiohttp.ClientHttpProxyError):
        kind = WireKind.OTHER
    elif isinstance(exc, aiohttp.ClientConnectorError):
        detail = str(exc)
        kind = WireKind.CONNECT
    elif isinstance(exc, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
        kind = WireKind.UNSUPPORTED
    elif isinstance(exc, aiohttp.ClientPayloadError):
        cause = exc.__cause__
        kind = (
            WireKind.DECODE if isinstance(cause, http_exceptions.ContentEncodingError) else WireKind.DROPPED
        )
    elif isinstance(exc, aiohttp.ClientOSError):
        detail = str(exc)
        kind = WireKind.DROPPED
    elif isinstance(
        exc,
        aiohttp.ServerDisconnectedError | aiohttp.ClientConnectionError | http_exceptions.HttpProcessingError,
    ):
        kind = WireKind.DROPPED
    else:  # ClientResponseError outside a body read, TooManyRedirects...
        kind = WireKind.OTHER
    return WireError(kind, name, detail[:200])


class AiohttpPool:
    """Shares one ``aiohttp.ClientSession`` per base URL within each event loop (a ``WirePool``).

    Thread-safe as :class:`~guardcache.llm.pool.ClientPool`: each loop touches only its own inner
    dict; the outer map is guarded by a lock held for a dict operation only.

    ``max_connections`` bounds the connections per base URL and sizes its admission gate
    (None: no bound, no gate).
    """

    def __init__(self, *, max_connections: int | None = DEFAULT_LIMITS.max_connections) -> None:
        self.max_connections = max_connections
        self._lanes: LoopLanes[AiohttpLane] = LoopLanes()

    def lane(self, base_url: str) -> AiohttpLane:
        """The session and gate for ``base_url`` on the running loop; created on first use (a
        closed session is replaced, its gate kept)."""
        lane = self._lanes.get(base_url, self._new_lane)
        if lane.session.closed:
            lane.session = self._new_session()
        return lane

    def _new_lane(self, loop: asyncio.AbstractEventLoop, base_url: str) -> AiohttpLane:
        size = self.max_connections
        gate = asyncio.Semaphore(size) if size else None
        return AiohttpLane(self._new_session(), gate, _env_proxy(base_url))

    def _new_session(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=self.max_connections or 0,
            limit_per_host=0,
            keepalive_timeout=KEEPALIVE_EXPIRY,
            ssl=shared_ssl_context(),
        )
        return aiohttp.ClientSession(
            connector=connector,
            headers={"User-Agent": USER_AGENT},
            cookie_jar=aiohttp.DummyCookieJar(),
            # Timeouts are passed per request by each ChatClient; this is only a fallback.
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=2.0, sock_read=10.0),
            trust_env=False,  # the proxy is read once per lane instead (see the module docstring)
            auto_decompress=True,
        )

    def sessions_for_running_loop(self) -> dict[str, aiohttp.ClientSession]:
        """A snapshot of the running loop's sessions by normalized base URL (tests and stats)."""
        return {url: lane.session for url, lane in self._lanes.snapshot().items()}

    async def aclose_all(self) -> None:
        """Close every session of the running loop and forget loops that are already closed."""
        lanes, stale = self._lanes.release()
        for lane in stale:
            _forget(lane.session)
        for lane in lanes:
            await lane.session.close()


def _forget(session: aiohttp.ClientSession) -> None:
    """Drop a session whose loop is closed without aiohttp's "Unclosed client session" error: its
    sockets died with the loop, and it cannot be closed from another loop."""
    with contextlib.suppress(Exception):
        connector = session.connector
        if connector is not None:
            connector._close()  # closes the transports it holds; no await, no loop needed
        session._connector = None


def _env_proxy(base_url: str) -> tuple[Any, Any]:
    """The proxy (and its credentials) the environment names for ``base_url`` (``HTTPS_PROXY``,
    ``NO_PROXY``...), or (None, None)."""
    from aiohttp.helpers import get_env_proxy_for_url

    try:
        return get_env_proxy_for_url(URL(base_url))
    except LookupError:
        return None, None


__all__ = ["KEEPALIVE_EXPIRY", "AiohttpLane", "AiohttpPool", "BodyReply", "wire_error"]
