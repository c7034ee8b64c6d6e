"""What every transport of the client shares: lanes per (event loop, base URL), the connection
limits, the one TLS context and the User-Agent. Both transports (:mod:`guardcache.llm.h1_pool`,
the default, and :mod:`guardcache.llm.httpx_pool`, for a caller's ``transport=`` /
``http_client=``) build on it; it imports nothing else of guardcache.

Why pool: a guard call is small and frequent; a fresh TCP (and TLS) connection per call can cost
more than the call itself on a fast backend, undoing the latency the server's KV-cache reuse saves.
All ChatClients that talk to one base URL therefore share one lane (its keep-alive connections and
its admission gate).

Why per loop: a connection belongs to the event loop that opened it; using it from another loop
fails ("Event loop is closed", hangs). The runtime's sync API calls ``asyncio.run`` once per
request, a new loop each time, so lanes are keyed by the running loop first (a
``WeakKeyDictionary``: a loop that is garbage-collected takes its entry with it) and a lane is never
handed to a loop other than the one that created it.

Shutdown: a pool's ``aclose_all`` closes the lanes of the *running* loop (a connection can only be
closed from its own loop). Code that runs ``asyncio.run`` per request should await
:func:`guardcache.llm.aclose_all` before the loop ends, or the sockets are only reclaimed when the
garbage collector finds them.
"""

from __future__ import annotations

import asyncio
import functools
import os
import platform
import re
import ssl
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar


@dataclass(frozen=True, slots=True)
class PoolLimits:
    """How many connections a lane opens and keeps: what every transport reads (the names are
    httpx2's, whose ``httpx2.Limits`` :mod:`guardcache.llm.httpx_pool` makes of it), guardcache's own
    type so the default transport needs no httpx2.

    Attributes:
        max_connections: requests in flight per lane before they queue (None: unbounded).
        max_keepalive_connections: idle connections kept per lane.
        keepalive_expiry: seconds an idle connection is kept.
    """

    max_connections: int | None = None
    max_keepalive_connections: int | None = None
    keepalive_expiry: float | None = 5.0


DEFAULT_LIMITS = PoolLimits(max_connections=100, max_keepalive_connections=32, keepalive_expiry=4.0)
"""Up to 100 concurrent requests per backend before requests queue (FIFO, in the lane's admission
gate, bounded by each call's deadline), and up to 32 of those connections kept alive when idle.

Why 32 and not all 100: every pool event of httpx2 probes each idle connection's socket, so idle
connections left over from a burst tax every later request (measured against the emulator on 2
vCPUs, after a burst of 200: with 100 kept, 16 concurrent checks cost 4.6 ms of client CPU each and
ran at 213/s; with 32 kept, 1.5 ms and 631/s). Why not httpx2's default of 20: sustained concurrency
above the keep-alive count closes and reopens a connection per request (at 64 concurrent: 1.7 ms and
577/s with 20 kept, 1.2 ms and 820/s with 32 or 100). Idle connections expire after 4 s, under the
5 s keep-alive of common servers (uvicorn, many proxies), so the client rarely reuses a connection
the server is closing (a ReadError and a retry)."""

USER_AGENT = "guardcache"


CA_FILE_CANDIDATES = (
    "/etc/ssl/cert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/pki/tls/cert.pem",
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/ssl/ca-bundle.pem",
)
"""Where Linux distributions keep the CA bundle, for an OpenSSL whose compiled-in paths are unusable
(truststore's and httpcore2's fallbacks, in their order)."""

_HASHED_CERT = re.compile(r"[0-9a-fA-F]{8}\.\d")


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """One TLS context for every transport (honours SSL_CERT_FILE / SSL_CERT_DIR).

    Why one: building one loads the CA bundle, ~30 ms of blocking CPU. Each new event loop needs new
    connections, and the sync API runs a loop per request, so without sharing every sync request
    would stall ~30 ms per backend before sending a byte. ``SSLContext`` is safe to share across
    threads.

    Why built here: it trusts what httpx2's default context trusts (``httpcore2``'s
    ``default_ssl_context``: SSL_CERT_FILE, else SSL_CERT_DIR, else the system store through
    truststore on Windows and macOS, else OpenSSL's compiled-in paths, else a distribution's
    bundle), step for step; asking httpx2 for it imported httpx2 and httpcore2 (~90 ms) into every
    process, the default transport's (h1) included. tests/unit/test_llm_lanes.py compares the two.
    """
    if cafile := os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=cafile)
    if capath := os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=capath)
    if platform.system() in ("Windows", "Darwin"):  # pragma: no cover - not on the test machines
        import truststore  # installed with httpx2 (through httpcore2); only these systems need it

        return truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    # Not set_default_verify_paths(): it would read SSL_CERT_* again (see above: already decided).
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    paths = ssl.get_default_verify_paths()
    cafile = paths.openssl_cafile if os.path.isfile(paths.openssl_cafile) else None
    capath = paths.openssl_capath if os.path.isdir(paths.openssl_capath) else None
    if capath and not cafile and not any(_HASHED_CERT.fullmatch(f) for f in os.listdir(capath)):
        capath = None  # pragma: no cover - a directory OpenSSL cannot look certificates up in
    if not cafile and not capath:  # pragma: no cover
        cafile = next(filter(os.path.isfile, CA_FILE_CANDIDATES), None)
    if cafile or capath:
        context.load_verify_locations(cafile, capath)
    return context


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


__all__ = [
    "CA_FILE_CANDIDATES",
    "DEFAULT_LIMITS",
    "USER_AGENT",
    "LoopLanes",
    "PoolLimits",
    "normalize_base_url",
    "shared_ssl_context",
]
