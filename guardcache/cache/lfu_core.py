"""The LFU policy: least frequently used goes first, the least recent among equal frequencies; O(1).

One module behind the policy seam (:mod:`guardcache.cache.policy`): the cache around it
(:class:`~guardcache.cache.policy_cache.PolicyCache`) does the locking, single flight, stats and
introspection; this is the order of the entries and the two hot paths over it.

The structure: one doubly linked list of all entries, grouped by frequency in ascending order, newest
first within a group. ``oldest`` maps each frequency present to its group's oldest entry (the group's
last node), which is both where that group is evicted from and where the next group begins. So:

- an access moves an entry from group f to the FRONT of group f+1, i.e. right after ``oldest[f]``
  (or nowhere at all, when the entry was itself the oldest of f): one dict read, nine list writes;
- the victim is ``oldest[f]`` of the first group; a new entry goes right after the sentinel;
- an emptied group leaves nothing behind (there are no per-frequency list objects to pile up).

The entries are the :class:`~guardcache.cache.slots.Slots` table's; this policy adds three per-slot
arrays (``freq``, ``prev``, ``next``). Slot 0 is the sentinel (frequency 0, which no entry has).

Why closures: ``get`` and ``put`` are the product's hot path. As closures over the containers, they
read cells instead of instance attributes and take the RLock with ``acquire``/``release`` rather than
``with`` (measured on CPython 3.11, get hit: a method reading the same containers from attributes
runs ~14% slower, ~11% more instructions). This is the technique of the pure-Python
``functools.lru_cache``. The policy keeps them as ``hot``; the cache binds them as its ``get`` and
``put``.

Counting: the closures count in ``nonlocal`` ints under the lock they hold anyway; the cache hands
them to its recorder as a source read at snapshot time (see :mod:`~guardcache.cache.recorder`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, MutableSequence
from typing import Any, ClassVar

from guardcache.cache.policy import GetPath, HotPaths, PolicyState
from guardcache.cache.policy_state import check_restorable, export_columns, keep_safest, store_entry
from guardcache.cache.slots import Slots
from guardcache.cache.slots import clock as _clock


class LFUPolicy(Slots):
    """The LFU order over the slot table. Every method expects the caller to hold the cache's lock."""

    name: ClassVar[str] = "LFU"

    def __init__(self, maxsize: int, lock: threading.RLock) -> None:
        super().__init__(sentinels=1)
        self.maxsize = maxsize
        self.freq: list[int] = [0]
        self.prev: list[int] = [0]
        self.next: list[int] = [0]
        self.oldest: dict[int, int] = {}  # frequency -> slot of that group's oldest entry
        #: This cache's ``get`` and ``put`` over these containers (see the module doc).
        self.hot: HotPaths = hot_paths(self, lock, maxsize)

    def columns(self) -> tuple[MutableSequence[Any], ...]:
        return (*super().columns(), self.freq, self.prev, self.next)

    def touch(self, i: int, now: float | None = None) -> None:
        """Count an access of slot ``i``: move it to the front of the next frequency group.
        ``now``: the clock already read (an expiring lookup reads it once, for the entry's age and
        its access stamp)."""
        freq, oldest, prv, nxt = self.freq, self.oldest, self.prev, self.next
        f = freq[i]
        t = oldest[f]
        if t == i:  # already at the boundary: the front of group f+1 is right here
            p = prv[i]
            if freq[p] == f:
                oldest[f] = p
            else:
                del oldest[f]
        else:
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
        self.accessed[i] = _clock() if now is None else now

    def remove(self, key: Hashable) -> bool:
        """Unlink ``key`` and free its slot (not an eviction)."""
        i = self.index.pop(key, None)
        if i is None:
            return False
        freq, prv, nxt, oldest = self.freq, self.prev, self.next, self.oldest
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
        self.release(i)
        return True

    def reset(self) -> None:
        """Empty every container in place (closures keep pointing at the same objects)."""
        self.reset_slots()
        self.prev[0] = self.next[0] = 0
        self.oldest.clear()

    def frequency(self, i: int) -> int:
        """Accesses of the entry since it was stored (its put included)."""
        return self.freq[i]

    def eviction_order(self) -> list[Hashable]:
        """Keys from the next victim to the safest (O(n))."""
        groups: list[list[Hashable]] = []
        last_freq = -1
        i = self.next[0]
        while i:
            if self.freq[i] != last_freq:
                last_freq = self.freq[i]
                groups.append([])
            groups[-1].append(self.keys[i])
            i = self.next[i]
        return [key for group in groups for key in reversed(group)]

    def export_state(self) -> PolicyState:
        """Every entry in eviction order with its frequency: all the LFU's order is (frequency
        groups ascending, least recent first within one), so a restore rebuilds it exactly."""
        slots: list[int] = []
        group: list[int] = []
        last_freq = -1
        freq, nxt = self.freq, self.next
        i = nxt[0]
        while i:  # the list holds each group newest first: reverse each group
            if freq[i] != last_freq:
                slots.extend(reversed(group))
                group = []
                last_freq = freq[i]
            group.append(i)
            i = nxt[i]
        slots.extend(reversed(group))
        return export_columns(self, slots, [freq[i] for i in slots], bytes(len(slots)), {})

    def restore_state(self, state: PolicyState) -> int:
        """Link ``state``'s entries as they were: the safest ``maxsize`` of them, grouped by
        frequency (a stable sort, which keeps an exported order as it is)."""
        check_restorable(self, state)
        keep = keep_safest(state, self.maxsize)
        order = sorted(keep, key=state.frequency.__getitem__)  # stable: recency within a group kept
        if any(state.frequency[k] < 1 for k in order):
            raise ValueError("an LFU entry's frequency is at least 1")
        freq, prv, nxt, oldest = self.freq, self.prev, self.next, self.oldest
        # The list runs groups ascending, newest first within a group; ``order`` is oldest first.
        linked: list[int] = []
        start = 0
        for end in range(1, len(order) + 1):
            if end == len(order) or state.frequency[order[end]] != state.frequency[order[start]]:
                linked.extend(reversed(order[start:end]))
                start = end
        last = 0
        for k in linked:
            i = self.grow()
            store_entry(self, i, k, state)
            f = state.frequency[k]
            freq[i] = f
            nxt[last] = i
            prv[i] = last
            oldest[f] = i  # the group's last node (the list reaches it after its newer entries)
            last = i
        nxt[last] = 0
        prv[0] = last
        return len(self.index)


def hot_paths(s: LFUPolicy, lock: threading.RLock, maxsize: int) -> HotPaths:
    """``get`` and ``put`` over the structure, under ``lock``, counting in closure cells.

    They count whether or not the cache's recorder is enabled: a disabled recorder simply never
    reads the cells. Two cell increments cost a hit ~30 ns of ~700; a second, uncounted copy of the
    hot path, kept in step with this one by hand, cost more than it saved.

    The counters are ``nonlocal`` ints, not a list the recorder could read directly: a cell
    increment costs a hit ~17 ns, a list item increment ~37 ns (CPython 3.11). There is no ``puts``
    counter: every stored entry is still there, or was evicted, deleted or cleared, so the cache
    derives puts from those (one increment less on the put path).
    """
    acquire, release = lock.acquire, lock.release
    index, keys, values, freq, prv, nxt = s.index, s.keys, s.values, s.freq, s.prev, s.next
    created, accessed, oldest, free, touch = s.created, s.accessed, s.oldest, s.free, s.touch
    hits = misses = evictions = updates = 0  # totals since creation

    def get(key: Hashable, default: Any = None) -> Any:
        nonlocal hits, misses
        acquire()
        try:
            i = index.get(key)
            if i is None:
                misses += 1
                return default
            hits += 1
            # touch(i), inlined
            f = freq[i]
            t = oldest[f]
            if t == i:
                p = prv[i]
                if freq[p] == f:
                    oldest[f] = p
                else:
                    del oldest[f]
            else:
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
            accessed[i] = _clock()
            return values[i]
        finally:
            release()

    def expiring(ttl: float, clock: Callable[[], float], expire: Callable[[Hashable], None]) -> GetPath:
        """``get`` for a cache with a ``ttl`` (:mod:`~guardcache.cache.expiry`): the same, with the
        entry's age read from the clock read it makes anyway; ``expire(key)`` (under the lock)
        drops an entry that is ``ttl`` old, a miss. A second copy of the hit path, kept in step
        with ``get`` by the policy suite (a ttl that never expires: identical order and stats):
        checked in front of ``get`` instead, a hit cost 1.36x one without a ttl (a second lookup,
        a second clock read, a frame); here ~1.1x (benchmarks/bench_cache_ttl.py)."""

        deadline = s.keep_deadlines()

        def expiring_get(key: Hashable, default: Any = None) -> Any:
            nonlocal hits, misses
            acquire()
            try:
                i = index.get(key)
                if i is None:
                    misses += 1
                    return default
                now = clock()
                if now >= deadline[i]:
                    expire(key)
                    misses += 1
                    return default
                hits += 1
                f = freq[i]
                t = oldest[f]
                if t == i:
                    p = prv[i]
                    if freq[p] == f:
                        oldest[f] = p
                    else:
                        del oldest[f]
                else:
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
                accessed[i] = now
                return values[i]
            finally:
                release()

        return expiring_get

    def put(key: Hashable, value: Any) -> None:
        nonlocal evictions, updates
        acquire()
        try:
            i = index.get(key)
            if i is not None:
                values[i] = value
                updates += 1
                touch(i)
                created[i] = accessed[i]  # type: ignore[assignment]  # touch() just set it
                return
            now = _clock()
            if len(index) >= maxsize:
                # The victim is the oldest entry of the lowest frequency group; its slot takes the
                # new entry, which belongs at the front of group 1 (the front of the list).
                f = freq[nxt[0]]
                i = oldest[f]
                del index[keys[i]]
                evictions += 1
                keys[i] = key
                values[i] = value
                index[key] = i
                created[i] = now
                accessed[i] = None
                if f == 1:  # the common case: move the slot from group 1's end to its front
                    p = prv[i]
                    if p:  # (a lone entry of group 1 is already where the new one belongs)
                        n = nxt[i]
                        nxt[p] = n
                        prv[n] = p
                        oldest[1] = p
                        n = nxt[0]
                        nxt[0] = i
                        prv[i] = 0
                        nxt[i] = n
                        prv[n] = i
                    return
                p = prv[i]  # group 1 is empty: unlink from group f, link below as group 1
                n = nxt[i]
                nxt[p] = n
                prv[n] = p
                if freq[p] == f:
                    oldest[f] = p
                else:
                    del oldest[f]
                freq[i] = 1
            else:
                if free:
                    i = free.pop()
                    freq[i] = 1
                    created[i] = now
                    accessed[i] = None
                else:
                    i = len(keys)
                    keys.append(None)
                    values.append(None)
                    freq.append(1)
                    prv.append(0)
                    nxt.append(0)
                    created.append(now)
                    accessed.append(None)
                keys[i] = key
                values[i] = value
                index[key] = i
            n = nxt[0]
            nxt[0] = i
            prv[i] = 0
            nxt[i] = n
            prv[n] = i
            if 1 not in oldest:
                oldest[1] = i
        finally:
            release()

    def put_nothing(key: Hashable, value: Any) -> None:
        """``put`` of a cache with maxsize 0: nothing is stored (or counted), so nothing can be
        updated either."""

    def counts() -> tuple[int, int, int, int]:
        return hits, misses, evictions, updates

    return HotPaths(get, put if maxsize else put_nothing, counts, expiring)


__all__ = ["LFUPolicy", "hot_paths"]
