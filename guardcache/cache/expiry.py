"""Expiry (a cache's ``ttl``): an entry older than ``ttl`` seconds is a miss, found and dropped lazily.

Why a module of its own, whose paths stand in for the policy's (as
:func:`~guardcache.cache.reporting.with_line_check`'s do for the stats line) rather than written into
them: a cache without a ``ttl`` keeps its policy's bare ``get`` and ``put``, so its hit path reads no
clock and makes no extra call; only a cache with a ``ttl`` pays for the check (a subtraction, and the
call to the policy's ``touch_at`` a hit). One expiring ``get`` serves every policy: a copy of each
policy's hot path with the check inlined would have to be kept in step with it by hand.

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

The expiring ``get`` takes the cache's lock as the policy's own does, and makes the policy's moves
for a hit through ``touch_at`` with the clock it read for the age: the hit costs one call more than
a cache without a ttl, not a second lookup and a second clock read.
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

    The ``get`` is the policy's own expiring one when it has one (``hot.expiring``: the check
    inlined in its hit path, ~1.1x a hit without a ttl; both built-in policies do), else this
    module's: one lookup, one clock read, the policy's moves for a hit through ``touch_at``
    (~1.36x: the call and its attribute reads), counting its hits and misses here. A check in
    front of the bare ``get`` cost a second lookup and a second clock read on top.
    Measured in benchmarks/bench_cache_ttl.py.
    """
    _, put, counts, inlined = hot
    index, created, values, touch_at = s.index, s.created, s.values, s.touch_at
    acquire, release = lock.acquire, lock.release
    hits = misses = 0

    def expiring_get(key: Hashable, default: Any = None) -> Any:
        nonlocal hits, misses
        acquire()
        try:
            i = index.get(key)
            if i is not None:
                now = clock()
                if now - created[i] < ttl:
                    hits += 1
                    touch_at(i, now)
                    return values[i]
                expire(key)
            misses += 1
            return default
        finally:
            release()

    def stamped_put(key: Hashable, value: Any) -> None:
        acquire()
        try:
            put(key, value)
            i = index.get(key)
            if i is not None:  # (an admission policy may have turned it away)
                created[i] = clock()
        finally:
            release()

    def all_counts() -> tuple[int, int, int, int]:
        h, m, evictions, updates = counts()
        return h + hits, m + misses, evictions, updates

    # The policy's put stamps a new or replaced entry with the slots' clock: with that clock (every
    # cache but a test's) it is already stamped as the check reads it, and the put stays bare.
    store = put if clock is slot_clock else stamped_put
    if inlined is not None:  # the policy's own (counting in its cells)
        return HotPaths(inlined(ttl, clock, expire), store, counts)
    return HotPaths(expiring_get, store, all_counts)


__all__ = ["Clock", "check_ttl", "with_expiry"]
