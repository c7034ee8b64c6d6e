"""Which transport ChatClients use by default, the process-wide pools, and closing them.

- :func:`default_pool`: the pool every ChatClient uses unless given a transport, a client or a
  pool: guardcache's own HTTP/1.1 client (:mod:`guardcache.llm.h1_pool`), the one network transport
  the project ships.
- :func:`get_http_client`: a shared ``httpx2.AsyncClient`` per base URL (:mod:`guardcache.llm.httpx_pool`,
  the transport behind a caller's own ``transport=`` / ``http_client=``).
- :func:`aclose_all`: closes both default pools' connections of the running loop.

The layers under it: :mod:`guardcache.llm.transport_contract` (what a transport is),
:mod:`guardcache.llm.lanes` (lanes per (loop, base URL), the limits, the TLS context: what every
transport shares), then each transport (:mod:`~guardcache.llm.h1_pool`,
:mod:`~guardcache.llm.httpx_pool`), then this module; a transport never imports the chooser. Why a
module of its own: the choice of the default and the process-wide state (one pool of each kind, made
on first use) live in one place that only the client and ``aclose_all``'s callers read.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from guardcache.llm.h1_pool import H1Pool
from guardcache.llm.transport_contract import WirePool

if TYPE_CHECKING:
    import httpx2

    from guardcache.llm.httpx_pool import ClientPool

_httpx_pool: ClientPool | None = None  # the process's httpx2 pool, made on first use
_default_wire: WirePool | None = None
_default_lock = threading.Lock()


def default_pool() -> WirePool:
    """The process-wide pool every ChatClient uses unless given a transport, a client or a pool:
    guardcache's own HTTP/1.1 client (:mod:`guardcache.llm.h1_pool`), the one network transport
    the project ships. Why one: it needs the least CPU per call (``benchmarks/bench_http_clients.py``)
    and passes the whole transport contract (tests/integration/test_transport_contract.py);
    httpx2's stack read neither a stream's end nor a dropped keep-alive connection as well, and
    aiohttp (gone) read a stray response on an idle connection as the next answer. httpx2 stays as
    the adapter for a caller's own ``transport=`` / ``http_client=``.
    """
    global _default_wire
    if _default_wire is None:
        with _default_lock:
            if _default_wire is None:
                _default_wire = H1Pool()
    return _default_wire


def get_http_client(base_url: str) -> httpx2.AsyncClient:
    """The shared httpx2 AsyncClient for ``base_url`` on the running loop (see :class:`ClientPool`);
    the process's httpx2 pool is made (and httpx2 imported) on the first call."""
    global _httpx_pool
    if _httpx_pool is None:
        from guardcache.llm.httpx_pool import ClientPool

        with _default_lock:
            if _httpx_pool is None:
                _httpx_pool = ClientPool()
    return _httpx_pool.get(base_url)


async def aclose_all() -> None:
    """Close the default pools' connections of the running loop; call it before the loop ends."""
    if _httpx_pool is not None:
        await _httpx_pool.aclose_all()
    if _default_wire is not None and _default_wire is not _httpx_pool:
        await _default_wire.aclose_all()


__all__ = ["aclose_all", "default_pool", "get_http_client"]
