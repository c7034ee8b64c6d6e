"""Expiry (a cache's ``ttl``): an entry older than ``ttl`` seconds is a miss, found and dropped lazily.

Why paths that stand in for the policy's (as :func:`~guardcache.cache.reporting.with_line_check`'s
do for the stats line) rather than a check written into them: a cache without a ``ttl`` keeps its
policy's bare ``get`` and ``put``, so its hit path reads no clock and makes no extra call. A cache
with a ``ttl`` gets the policy's expiring ``get`` (``hot.expiring``: the same hit path with the check
inlined, sharing the clock read the hit makes anyway; a second copy, kept in step with the first by
the policy suite, because a check in front of it cost a hit 1.28-1.53x and this 1.06-1.12x,
benchmarks/bench_cache_ttl.py), or, for a policy without one, this module's ``get`` on ``touch``.

Each entry's deadline (``created`` + ``ttl``) is kept in a list of its own, ``Slots.deadline``, by
caches with a ttl only: a hit reads it with a specialized list subscript and compares two floats,
where reading the stamp out of ``created`` (an ``array('d')``, for memory) made a float and cost ~40
ns more. The put path (this module's ``put``) keeps it: the deadline of every new or replaced entry.

An entry's age is counted from its ``created`` stamp (:mod:`~guardcache.cache.slots`): when its
value was stored, i.e. when the guard gave the verdict (a verdict filled in from another tier is
stored backdated to when it was judged: ``PolicyCache.put_expiring``). A cache with a ttl stamps
its entries again with its own clock after the policy's ``put`` when that clock is not the slots'
(a test's), so the stamp and the check always read the same clock. A ``put`` over an
expired entry replaces it (an update), which restarts its life like any update.

Lazy: an expired entry is found by a lookup (``get``, the single flight's lookup, ``entry()``,
``contains()``), removed then and counted as an expiration (and the lookup as a miss). Until a lookup
finds it, it keeps its slot and counts in ``size()``; nobody asks for it, so either policy evicts it
early anyway. No sweeper thread: a verdict nobody asks for costs memory, never a wrong answer.

The expiring ``get`` takes the cache's lock as the policy's own does.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Hashable
from typing import Any

from guardcache.cache.policy import EvictionPolicy, HotPaths
from guardcache.cache.slots import clock as slot_clock

#: A monotonic clock in seconds, on the scale of :data:`guardcache.cache.slots.clock` (tests pass
#: ``lambda: time.monotonic() + offset`` to move time without sleeping).
Clock = Callable[[], float]


def check_ttl(ttl: float | None) -> float | None:
    """``ttl`` as a float if it is a usable lifetime (None: no expiry); a ``ValueError`` naming it
    otherwise. A float because a hit compares it with a float age: against an int that compare
    takes CPython's mixed-type path, ~40 ns more a hit (1.29x a hit without a ttl, not 1.15x)."""
    if ttl is not None and not (ttl > 0 and not math.isnan(ttl)):
        raise ValueError(f"ttl must be > 0 seconds, or None for no expiry (got {ttl!r})")
    return None if ttl is None else float(ttl)


def with_expiry(
    hot: HotPaths,
    s: EvictionPolicy,
    lock: threading.RLock,
    ttl: float,
    clock: Clock,
    expire: Callable[[Hashable], None],
) -> HotPaths:
    """``hot`` with a ``get`` that serves an entry younger than ``ttl`` by ``clock`` and calls
    ``expire(key)`` (under the lock: it removes the entry and counts the expiration) for an older
    one, a miss; and a ``put`` that stamps the stored entry with ``clock``.

    The ``get`` is the policy's own expiring one when it has one (``hot.expiring``; both built-in
    policies do), else this module's: one lookup, one clock read, the policy's moves for a hit
    through ``touch`` with that clock read, counting its hits and misses here. The ``put`` sets
    the deadline of what it stored.
    """
    _, put, counts, inlined = hot
    index, created, values, touch = s.index, s.created, s.values, s.touch
    deadline = s.keep_deadlines()
    acquire, release = lock.acquire, lock.release
    hits = misses = 0

    def expiring_get(key: Hashable, default: Any = None) -> Any:
        nonlocal hits, misses
        acquire()
        try:
            i = index.get(key)
            if i is not None:
                now = clock()
                if now < deadline[i]:
                    hits += 1
                    touch(i, now)
                    return values[i]
                expire(key)
            misses += 1
            return default
        finally:
            release()

    restamp = clock is not slot_clock  # a test's clock: the stamp must be on it

    def stamped_put(key: Hashable, value: Any) -> None:
        acquire()
        try:
            put(key, value)
            i = index.get(key)
            if i is not None:  # (an admission policy may have turned it away)
                if restamp:
                    created[i] = clock()
                if i < len(deadline):
                    deadline[i] = created[i] + ttl
                else:  # a new slot (the LFU's put grows its columns inline, this one here)
                    deadline.append(created[i] + ttl)
        finally:
            release()

    def all_counts() -> tuple[int, int, int, int]:
        h, m, evictions, updates = counts()
        return h + hits, m + misses, evictions, updates

    if inlined is not None:  # the policy's own (counting in its cells)
        return HotPaths(inlined(ttl, clock, expire), stamped_put, counts)
    return HotPaths(expiring_get, stamped_put, all_counts)


__all__ = ["Clock", "check_ttl", "with_expiry"]
