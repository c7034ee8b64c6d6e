"""Expiry (a cache's ``ttl``): an entry older than ``ttl`` seconds is a miss, found and dropped lazily.

Why a module of its own, applied by wrapping the policy's hot paths (as
:func:`~guardcache.cache.reporting.with_line_check` does for the stats line) rather than written into
them: a cache without a ``ttl`` keeps its policy's bare ``get`` and ``put``, so its hit path reads no
clock and makes no extra call; only a cache with a ``ttl`` pays for the check (one frame, a clock
read, a dict lookup and a subtraction a ``get``). A second copy of each policy's hot path with the
check inlined would have to be kept in step with the first by hand, for both policies.

An entry's age is counted from its ``created`` stamp (:mod:`~guardcache.cache.slots`): when its
value was stored, i.e. when the guard gave the verdict (a verdict filled in from another tier is
stored backdated to when it was judged: ``PolicyCache.put_expiring``). A cache with a ttl stamps
its entries again with its own clock after the policy's ``put`` (a miss path: one clock read more),
so the stamp and the check always read the same clock, an injected one included. A ``put`` over an
expired entry replaces it (an update), which restarts its life like any update.

Lazy: an expired entry is found by a lookup (``get``, the single flight's lookup, ``entry()``,
``contains()``), removed then and counted as an expiration (and the lookup as a miss). Until a lookup
finds it, it keeps its slot and counts in ``size()``; nobody asks for it, so either policy evicts it
early anyway. No sweeper thread: a verdict nobody asks for costs memory, never a wrong answer.

The ``get`` check reads the index and the stamp without the lock (the cache's lock is taken only
when an entry is found expired, to remove it after checking again). That is safe because a stamp
only ever moves forward: a stale read can make a fresh entry look older (then the check under the
lock finds it fresh) but never an old one look fresh, except by a put that really did refresh it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Hashable
from typing import Any

from guardcache.cache.policy import EvictionPolicy, HotPaths

#: A monotonic clock in seconds, on the scale of :data:`guardcache.cache.slots.clock` (tests pass
#: ``lambda: time.monotonic() + offset`` to move time without sleeping).
Clock = Callable[[], float]


def check_ttl(ttl: float | None) -> float | None:
    """``ttl`` if it is a usable lifetime (None: no expiry); a ``ValueError`` naming it otherwise."""
    if ttl is not None and not (ttl > 0 and not math.isnan(ttl)):
        raise ValueError(f"ttl must be > 0 seconds, or None for no expiry (got {ttl!r})")
    return ttl


def with_expiry(
    hot: HotPaths,
    s: EvictionPolicy,
    lock: threading.RLock,
    ttl: float,
    clock: Clock,
    expire: Callable[[Hashable], None],
) -> HotPaths:
    """``hot`` whose ``get`` first calls ``expire(key)`` when the entry is ``ttl`` seconds old or
    older by ``clock``; ``expire`` (under the lock) checks again, removes and counts it, and the bare
    ``get`` then counts the miss. Its ``put`` stamps the stored entry with ``clock``."""
    get, put, counts = hot
    index, created = s.index, s.created
    acquire, release = lock.acquire, lock.release

    def expiring_get(key: Hashable, default: Any = None) -> Any:
        i = index.get(key)
        if i is not None:
            try:
                old = clock() - created[i] >= ttl
            except IndexError:  # cleared between the two reads: the bare get will miss
                old = False
            if old:
                expire(key)
        return get(key, default)

    def stamped_put(key: Hashable, value: Any) -> None:
        acquire()
        try:
            put(key, value)
            i = index.get(key)
            if i is not None:  # (an admission policy may have turned it away)
                created[i] = clock()
        finally:
            release()

    return HotPaths(expiring_get, stamped_put, counts)


__all__ = ["Clock", "check_ttl", "with_expiry"]
