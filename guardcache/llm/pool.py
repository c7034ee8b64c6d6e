"""One pooled ``httpx2.AsyncClient`` per (event loop, base URL).

Why httpx2: it is httpx's successor from the same authors, API-identical, and already installed with
langchain-core (through langsmith). httpx 0.28's httpcore 1.x pool rescans every connection several
times per pool event, so a guard call cost the client 3 ms of CPU alone and 15-20 ms at 100-256
concurrent checks; httpx2's pool makes one pass (measured: the demo's no-cache pass took 44.5 s with
httpx and 9.9 s with httpx2, p50 turn latency 1582 ms vs 407 ms, same workload and machine). That one
pass still probes each IDLE connection's socket (a syscall each), which is why the number of idle
connections kept is bounded (see DEFAULT_LIMITS).

Why pool: a guard call is small and frequent; a fresh TCP (and TLS) connection per call can cost
more than the call itself on a fast backend, undoing the latency the server's KV-cache reuse saves.
All ChatClients that talk to one base URL therefore share one AsyncClient and
its keep-alive connections.

Why per loop: an AsyncClient's connections belong to the event loop that opened them; using them
from another loop fails ("Event loop is closed", hangs). The runtime's sync API calls
``asyncio.run`` once per request, a new loop each time, so the pool is keyed by the running loop
first (a ``WeakKeyDictionary``: a loop that is garbage-collected takes its entry with it) and a
client is never handed to a loop other than the one that created it.

Shutdown: :func:`aclose_all` closes the clients of the *running* loop (a client can only be closed
from its own loop). Code that runs ``asyncio.run`` per request should await it before the loop ends,
or the sockets are only reclaimed when the garbage collector finds them.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import threading
import weakref

import httpx2 as httpx

DEFAULT_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=32, keepalive_expiry=4.0)
"""Up to 100 concurrent requests per backend before requests queue for a connection (bounded by the
pool timeout), and up to 32 of those connections kept alive when idle.

Why 32 and not all 100: every pool event probes each idle connection's socket, so idle connections
left over from a burst tax every later request (measured against the emulator on 2 vCPUs, after a
burst of 200: with 100 kept, 16 concurrent checks cost 4.6 ms of client CPU each and ran at 213/s;
with 32 kept, 1.5 ms and 631/s). Why not httpx's default of 20: sustained concurrency above the
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
    return httpx.create_ssl_context()


def normalize_base_url(base_url: str) -> str:
    """``http://h:8000/v1/`` and ``http://h:8000/v1`` are the same backend."""
    return base_url.strip().rstrip("/")


class ClientPool:
    """Shares one ``httpx.AsyncClient`` per base URL within each event loop.

    Thread-safe: each loop runs in one thread and only touches its own inner dict; the outer map
    from loop to inner dict is guarded by a lock held for a dict operation only.

    ``transport`` makes every client of this pool send through it (tests: ``httpx.MockTransport``);
    closing a client closes its transport, so a pool with a transport is meant to be private to
    one owner. ``limits`` apply only without a transport (they configure httpx's default one).
    """

    def __init__(
        self,
        *,
        limits: httpx.Limits = DEFAULT_LIMITS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._limits = limits
        self._transport = transport
        self._lock = threading.Lock()
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, httpx.AsyncClient]] = (
            weakref.WeakKeyDictionary()
        )

    def get(self, base_url: str) -> httpx.AsyncClient:
        """The shared client for ``base_url`` on the running loop; created on first use.

        Must be called from a coroutine (it needs the running loop). A client someone closed is
        replaced rather than handed out.
        """
        loop = asyncio.get_running_loop()
        key = normalize_base_url(base_url)
        with self._lock:
            clients = self._by_loop.get(loop)
            if clients is None:
                clients = self._by_loop[loop] = {}
        client = clients.get(key)
        if client is None or client.is_closed:
            # No await between the lookup and the store: no other task of this loop can interleave.
            client = httpx.AsyncClient(
                limits=self._limits,
                transport=self._transport,
                verify=shared_ssl_context(),
                headers={"User-Agent": USER_AGENT},
                # Timeouts are passed per request by each ChatClient; this is only a fallback.
                timeout=httpx.Timeout(10.0, connect=2.0),
            )
            clients[key] = client
        return client

    def clients_for_running_loop(self) -> dict[str, httpx.AsyncClient]:
        """A snapshot of the running loop's clients by normalized base URL (for tests and stats)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            return dict(self._by_loop.get(loop, {}))

    async def aclose_all(self) -> None:
        """Close every client of the running loop and forget loops that are already closed.

        Clients of a loop that is closed cannot be closed any more (their sockets belong to it);
        dropping them lets the garbage collector reclaim the sockets.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            clients = self._by_loop.pop(loop, {})
            for other in [lp for lp in self._by_loop if lp.is_closed()]:
                del self._by_loop[other]
        for client in clients.values():
            await client.aclose()


_DEFAULT_POOL = ClientPool()


def default_pool() -> ClientPool:
    """The process-wide pool every ChatClient uses unless given a transport or a client."""
    return _DEFAULT_POOL


def get_http_client(base_url: str) -> httpx.AsyncClient:
    """The shared AsyncClient for ``base_url`` on the running loop (see :class:`ClientPool`)."""
    return _DEFAULT_POOL.get(base_url)


async def aclose_all() -> None:
    """Close the default pool's clients of the running loop; call it before the loop ends."""
    await _DEFAULT_POOL.aclose_all()


__all__ = [
    "DEFAULT_LIMITS",
    "ClientPool",
    "aclose_all",
    "default_pool",
    "get_http_client",
    "normalize_base_url",
]
