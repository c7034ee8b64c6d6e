"""LFUCache: least-frequently-used eviction, least-recently-used among equal frequencies, O(1).

The structure: one doubly linked list of all entries, grouped by frequency in ascending order, newest
first within a group. ``_oldest`` maps each frequency present to its group's oldest entry (the group's
last node), which is both where that group is evicted from and where the next group begins. So:

- an access moves an entry from group f to the FRONT of group f+1, i.e. right after ``_oldest[f]``
  (or nowhere at all, when the entry was itself the oldest of f): one dict read, nine list writes;
- the victim is ``_oldest[f]`` of the first group; a new entry goes right after the sentinel;
- an emptied group leaves nothing behind (there are no per-frequency list objects to pile up).

Entries live in parallel arrays indexed by a slot number (struct of arrays), not in one object per
entry: ~140 bytes an entry instead of ~210 for node objects, no objects for the garbage collector to
track, and an evicted slot is reused by the put that evicted it. Slot 0 is the sentinel (frequency 0,
which no entry has).

One ``threading.RLock`` guards the structure; only list and dict updates run under it.
"""

from __future__ import annotations

import threading
import time
import weakref
from array import array
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from guardcache.cache.interface import MISSING, CacheInterface, ComputeFn
from guardcache.cache.singleflight import SingleFlight
from guardcache.cache.stats import CacheStats, StatsReporter, default_reporter, log

_now = time.time  # wall clock for created_at/accessed_at (a global: read on every hit)


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """A read-only view of one entry; reading it is not an access."""

    key: Hashable
    value: Any
    frequency: int
    created_at: float  # time.time() when the value was stored (or last replaced)
    accessed_at: float  # time.time() of the last get hit or put


class LFUCache(CacheInterface):
    """A bounded cache evicting the least frequently used entry, the least recent among ties.

    - A ``get`` hit and a ``put`` of an existing key each count as one access (frequency + 1).
    - ``put`` of an existing key replaces the value, counts as an update, and keeps the entry.
    - ``maxsize == 0`` stores nothing; ``maxsize < 0`` is a ``ValueError``.
    - Counters are always kept (a few integer increments under the lock). ``track_stats`` turns
      on reporting: with ``stats_logging_interval`` the stats line is logged every interval by the
      process's one reporter thread, also while the cache is idle, until :meth:`close` or garbage
      collection.
    """

    def __init__(
        self,
        maxsize: int,
        track_stats: bool = False,
        stats_logging_interval: float | None = None,
        *,
        reporter: StatsReporter | None = None,
    ) -> None:
        if maxsize < 0:
            raise ValueError(f"maxsize must be >= 0 (got {maxsize})")
        if stats_logging_interval is not None and stats_logging_interval <= 0:
            raise ValueError(f"stats_logging_interval must be > 0 (got {stats_logging_interval})")
        self._maxsize = maxsize
        self.track_stats = track_stats
        self.stats_logging_interval = stats_logging_interval
        self._lock = threading.RLock()
        self._acquire = self._lock.acquire
        self._release = self._lock.release
        self._reset_structure()
        self._hits = self._misses = self._evictions = 0
        self._puts = self._updates = self._coalesced = 0
        self._flight = SingleFlight(
            self._lock, self._lookup, self.put, self._count_miss, self._count_coalesced
        )
        self._reporter: StatsReporter | None = None
        self._report_handle: int | None = None
        if track_stats and stats_logging_interval is not None:
            self._reporter = reporter or default_reporter()
            self._report_handle = self._reporter.register(self, stats_logging_interval)
            weakref.finalize(self, self._reporter.unregister, self._report_handle)

    def _reset_structure(self) -> None:
        self._index: dict[Hashable, int] = {}
        self._keys: list[Any] = [None]
        self._values: list[Any] = [None]
        self._freq: list[int] = [0]
        self._prev: list[int] = [0]
        self._next: list[int] = [0]
        self._created = array("d", [0.0])
        # None until the first access after the put: a float object (24 B) is only kept for entries
        # that were read again, and a list store is ~50 ns cheaper than an array store on a hit.
        self._accessed: list[float | None] = [None]
        self._oldest: dict[int, int] = {}  # frequency -> slot of that group's oldest entry
        self._free: list[int] = []

    # -- the structure (callers hold the lock) -------------------------------------------------

    def _touch(self, i: int) -> None:
        """Count an access of slot ``i``: move it to the front of the next frequency group."""
        freq, oldest = self._freq, self._oldest
        f = freq[i]
        t = oldest[f]
        if t == i:  # already at the boundary: the front of group f+1 is right here
            p = self._prev[i]
            if freq[p] == f:
                oldest[f] = p
            else:
                del oldest[f]
        else:
            prv, nxt = self._prev, self._next
            p = prv[i]
            n = nxt[i]
            nxt[p] = n
            prv[n] = p
            n = nxt[t]
            nxt[t] = i
            prv[i] = t
            nxt[i] = n
            prv[n] = i
        g = f + 1
        if g not in oldest:
            oldest[g] = i
        freq[i] = g
        self._accessed[i] = _now()

    def _unlink(self, i: int) -> None:
        freq, prv, nxt, oldest = self._freq, self._prev, self._next, self._oldest
        f = freq[i]
        p = prv[i]
        n = nxt[i]
        if oldest[f] == i:
            if freq[p] == f:
                oldest[f] = p
            else:
                del oldest[f]
        nxt[p] = n
        prv[n] = p

    def _lookup(self, key: Hashable) -> Any:
        """A hit (counted) returns the value; a miss returns MISSING and counts nothing."""
        i = self._index.get(key)
        if i is None:
            return MISSING
        self._hits += 1
        self._touch(i)
        return self._values[i]

    def _count_miss(self) -> None:
        self._misses += 1

    def _count_coalesced(self) -> None:
        self._coalesced += 1
        self._hits += 1

    # -- the public face -------------------------------------------------------------------------

    def get(self, key: Hashable, default: Any = None) -> Any:
        # _touch is inlined and the lock taken with acquire/release rather than `with` (~140 ns
        # less per call on CPython 3.11): a get hit is the hot path of the whole product.
        self._acquire()
        try:
            i = self._index.get(key)
            if i is None:
                self._misses += 1
                return default
            self._hits += 1
            freq, oldest = self._freq, self._oldest
            f = freq[i]
            t = oldest[f]
            if t == i:
                p = self._prev[i]
                if freq[p] == f:
                    oldest[f] = p
                else:
                    del oldest[f]
            else:
                prv, nxt = self._prev, self._next
                p = prv[i]
                n = nxt[i]
                nxt[p] = n
                prv[n] = p
                n = nxt[t]
                nxt[t] = i
                prv[i] = t
                nxt[i] = n
                prv[n] = i
            g = f + 1
            if g not in oldest:  # cheaper than setdefault: it is a plain bytecode, not a call
                oldest[g] = i
            freq[i] = g
            self._accessed[i] = _now()
            return self._values[i]
        finally:
            self._release()

    def put(self, key: Hashable, value: Any) -> None:
        self._acquire()
        try:
            i = self._index.get(key)
            if i is not None:
                self._values[i] = value
                self._updates += 1
                self._touch(i)
                self._created[i] = self._accessed[i]  # type: ignore[assignment]
                return
            if self._maxsize == 0:
                return
            now = _now()
            nxt, prv, freq, oldest = self._next, self._prev, self._freq, self._oldest
            if len(self._index) >= self._maxsize:
                # Evict the oldest entry of the lowest frequency group (_unlink inlined: hot).
                f = freq[nxt[0]]
                i = oldest[f]
                p = prv[i]
                n = nxt[i]
                nxt[p] = n
                prv[n] = p
                if freq[p] == f:
                    oldest[f] = p
                else:
                    del oldest[f]
                del self._index[self._keys[i]]
                self._evictions += 1
                freq[i] = 1
                self._created[i] = now
                self._accessed[i] = None
            elif self._free:
                i = self._free.pop()
                freq[i] = 1
                self._created[i] = now
                self._accessed[i] = None
            else:
                i = len(self._keys)
                self._keys.append(None)
                self._values.append(None)
                self._freq.append(1)
                self._prev.append(0)
                self._next.append(0)
                self._created.append(now)
                self._accessed.append(None)
            self._keys[i] = key
            self._values[i] = value
            self._index[key] = i
            # New entries go to the front of group 1, which is the front of the list.
            n = nxt[0]
            nxt[0] = i
            prv[i] = 0
            nxt[i] = n
            prv[n] = i
            if 1 not in oldest:
                oldest[1] = i
            self._puts += 1
        finally:
            self._release()

    def delete(self, key: Hashable) -> bool:
        """Remove ``key`` (not an eviction); returns whether it was there."""
        with self._lock:
            i = self._index.pop(key, None)
            if i is None:
                return False
            self._unlink(i)
            self._keys[i] = self._values[i] = None
            self._free.append(i)
            return True

    def contains(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._index

    __contains__ = contains

    def entry(self, key: Hashable) -> CacheEntry | None:
        """The entry's value and metadata, without counting an access; None when absent."""
        with self._lock:
            i = self._index.get(key)
            if i is None:
                return None
            created = self._created[i]
            accessed = self._accessed[i]
            return CacheEntry(
                key, self._values[i], self._freq[i], created, created if accessed is None else accessed
            )

    def size(self) -> int:
        return len(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def is_empty(self) -> bool:
        return not self._index

    def clear(self) -> None:
        with self._lock:
            self._evictions += len(self._index)
            self._reset_structure()

    @property
    def maxsize(self) -> int:
        return self._maxsize

    @property
    def capacity(self) -> int:
        """NeMo Guardrails' name for :attr:`maxsize`."""
        return self._maxsize

    def keys_in_eviction_order(self) -> list[Hashable]:
        """Keys from the next victim to the safest; O(n), for tests and debugging."""
        with self._lock:
            groups: list[list[Hashable]] = []
            last_freq = -1
            i = self._next[0]
            while i:
                if self._freq[i] != last_freq:
                    last_freq = self._freq[i]
                    groups.append([])
                groups[-1].append(self._keys[i])
                i = self._next[i]
            return [key for group in groups for key in reversed(group)]

    # -- stats -----------------------------------------------------------------------------------

    def get_stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                hits=self._hits,
                misses=self._misses,
                evictions=self._evictions,
                puts=self._puts,
                updates=self._updates,
                coalesced=self._coalesced,
                current_size=len(self._index),
                maxsize=self._maxsize,
            )

    def reset_stats(self) -> None:
        with self._lock:
            self._hits = self._misses = self._evictions = 0
            self._puts = self._updates = self._coalesced = 0

    def log_stats_now(self) -> None:
        line = self.get_stats().format_line()  # snapshot under the lock, log outside it
        log.info(line)

    def supports_stats_logging(self) -> bool:
        return self.track_stats and self.stats_logging_interval is not None

    def close(self) -> None:
        """Stop periodic reporting (entries and stats stay readable)."""
        if self._reporter is not None and self._report_handle is not None:
            self._reporter.unregister(self._report_handle)
            self._report_handle = None

    # -- loading ---------------------------------------------------------------------------------

    async def get_or_compute(self, key: Hashable, compute_fn: ComputeFn, default: Any = MISSING) -> Any:
        return await self._flight.get_or_compute(key, compute_fn, default)

    def get_or_compute_sync(
        self, key: Hashable, compute_fn: Callable[[], Any], default: Any = MISSING
    ) -> Any:
        """Like :meth:`get_or_compute`, for threads: blocks until the shared result is ready."""
        return self._flight.get_or_compute_sync(key, compute_fn, default)

    def in_flight(self) -> int:
        """How many computations are running now (0 when the cache is idle)."""
        return self._flight.in_flight()

    def __repr__(self) -> str:
        return f"LFUCache(maxsize={self._maxsize}, size={len(self._index)})"


__all__ = ["CacheEntry", "LFUCache"]
