"""Reference cache-policy simulators for benchmarks/bench_policy.py (issue 23).

These are yardsticks, not caches: they hold keys only (no values, no locks, no stats), so what they
measure is the policy. Each is fed a demand-fill replay: every request is a lookup, and every miss
stores the key (the guard was called, its verdict is now cached), unless the policy refuses it.

Every simulator has the same face: ``Sim(capacity)``, then ``sim.run(keys) -> hits``, which may be
called on consecutive slices of one trace (the state carries over: that is how the benchmark counts
the hits of the last 100,000 requests apart), and ``len(sim)``, the keys held now.

- :class:`LRU`: least recently used (an ``OrderedDict``).
- :class:`LFUAging`: least frequently used, ties to the least recent, with every count halved each
  ``period`` accesses (``period=None``: plain LFU, which is what guardcache's ``LFUCache`` is).
- :class:`WTinyLFU`: Caffeine's W-TinyLFU with its window FIXED at 1% (Caffeine itself climbs
  the window size to the traffic; theine does too): the policy as published, so the benchmark
  shows what adaptation is worth on top of it.
- :class:`Belady`: the offline optimum for a demand-fill cache, the ceiling no policy can pass.

Pure Python, written for speed (locals bound once per ``run``, one loop per policy): ~0.3 us per
access for LRU, ~1-2 us for the others, so a million-request trace replays in seconds.
"""

from __future__ import annotations

import heapq
import random
from array import array
from collections import OrderedDict
from collections.abc import Sequence

_M64 = (1 << 64) - 1


class LRU:
    """Least recently used: a hit moves the key to the back, a miss evicts the front."""

    name = "lru"

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._data: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._data)

    def run(self, keys: Sequence[int]) -> int:
        data = self._data
        cap = self.capacity
        if cap <= 0:
            return 0
        move = data.move_to_end
        pop = data.popitem
        hits = 0
        for k in keys:
            if k in data:
                move(k)
                hits += 1
            else:
                data[k] = None
                if len(data) > cap:
                    pop(False)
        return hits


class LFUAging:
    """LFU, least recent among equal counts, counts halved every ``period`` accesses (O(1) buckets).

    Counts live only while the key is cached (an evicted key starts again at 1), as in guardcache's
    LFUCache. Aging is the classic fix for LFU's "never forgets": every ``period`` accesses (hits
    and misses) each count ``c`` becomes ``c >> 1``, so an entry not requested since the last halving
    drops to 0 and goes before a newcomer (which starts at 1). Within a halved count, entries
    that had the lower count go first. The default period, 10x the capacity, is the reset period of
    W-TinyLFU's sketch, so the two forget at the same pace. ``period=None`` never ages: plain LFU,
    the same eviction order as guardcache's ``LFUCache`` (the tests check that)."""

    name = "lfu-aging"

    def __init__(self, capacity: int, period: int | None = -1) -> None:
        self.capacity = capacity
        self.period = 10 * max(capacity, 1) if period == -1 else period
        self._count: dict[int, int] = {}
        self._buckets: dict[int, OrderedDict[int, None]] = {}
        self._min = 1
        self._until_aging = self.period or 0

    def __len__(self) -> int:
        return len(self._count)

    def _age(self) -> None:
        count = self._count
        new: dict[int, OrderedDict[int, None]] = {}
        for c in sorted(self._buckets):
            half = c >> 1
            bucket = new.get(half)
            if bucket is None:
                bucket = new[half] = OrderedDict()
            for k in self._buckets[c]:
                count[k] = half
                bucket[k] = None
        self._buckets = new
        self._min = min(new, default=1)

    def run(self, keys: Sequence[int]) -> int:
        cap = self.capacity
        if cap <= 0:
            return 0
        count = self._count
        buckets = self._buckets
        lo = self._min
        period = self.period
        until = self._until_aging
        hits = 0
        for k in keys:
            c = count.get(k)
            if c is not None:
                hits += 1
                b = buckets[c]
                del b[k]
                if not b:
                    del buckets[c]
                    if lo == c:
                        lo = c + 1
                c += 1
                count[k] = c
                nb = buckets.get(c)
                if nb is None:
                    nb = buckets[c] = OrderedDict()
                nb[k] = None
            else:
                if len(count) >= cap:
                    b = buckets[lo]
                    victim = b.popitem(False)[0]
                    del count[victim]
                    if not b:
                        del buckets[lo]
                count[k] = 1
                nb = buckets.get(1)
                if nb is None:
                    nb = buckets[1] = OrderedDict()
                nb[k] = None
                if lo != 0 or 0 not in buckets:
                    lo = 1
            if period:
                until -= 1
                if until == 0:
                    self._min = lo
                    self._age()
                    buckets = self._buckets
                    lo = self._min
                    until = period
        self._min = lo
        self._until_aging = until
        return hits


# Caffeine's FrequencySketch, in one byte per 4-bit counter: halving is then one bytes.translate.
_HALVE = bytes(i >> 1 for i in range(256))
_ODD = bytes(i & 1 for i in range(256))


class FrequencySketch:
    """Caffeine's count-min sketch of access frequencies (``FrequencySketch``, Caffeine 3.x).

    Per key, four 4-bit counters (saturating at 15) in one 64-byte block of the table; the estimate
    is their minimum. The table is ``max(ceil_pow2(capacity), 8)`` 64-bit words of 16 counters
    (here one byte per counter, same values). After ``10 * capacity`` increments that changed a
    counter, every counter is halved ("reset"): this aging is what lets W-TinyLFU forget, and
    the size carried over is Caffeine's ``(size - odd / 4) / 2``. The key's hash is a 64-bit
    multiply-xorshift mix of the int key (Caffeine spreads ``hashCode()``; any good mix will do).
    """

    def __init__(self, capacity: int) -> None:
        words = 8
        while words < capacity:
            words <<= 1
        self.table = bytearray(words * 16)
        self.block_mask = (words >> 3) - 1  # blocks of 8 words = 128 counters
        self.sample_size = 10 * max(capacity, 1)
        self.size = 0

    @staticmethod
    def _mix(k: int) -> int:
        h = (k * 0x9E3779B97F4A7C15) & _M64
        h ^= h >> 29
        h = (h * 0xBF58476D1CE4E5B9) & _M64
        return h ^ (h >> 32)

    def _slots(self, k: int) -> tuple[int, int, int, int]:
        h = self._mix(k)
        block = ((h >> 32) & self.block_mask) << 7
        # counter i: in words 2i and 2i+1 of the block (32 counters), 5 bits of the hash pick one
        return (
            block + (h & 31),
            block + 32 + ((h >> 5) & 31),
            block + 64 + ((h >> 10) & 31),
            block + 96 + ((h >> 15) & 31),
        )

    def frequency(self, k: int) -> int:
        t = self.table
        a, b, c, d = self._slots(k)
        return min(t[a], t[b], t[c], t[d])

    def increment(self, k: int) -> None:
        t = self.table
        added = False
        for s in self._slots(k):
            if t[s] < 15:
                t[s] += 1
                added = True
        if added:
            self.size += 1
            if self.size == self.sample_size:
                self.reset()

    def reset(self) -> None:
        t = self.table
        odd = t.translate(_ODD).count(1)
        t[:] = t.translate(_HALVE)
        self.size = (self.size - (odd >> 2)) >> 1


class WTinyLFU:
    """W-TinyLFU after Caffeine (``WindowTinyLfuPolicy`` in its simulator), window FIXED at 1%.

    - A miss enters the window, an LRU of ``window`` (1%) of the capacity.
    - The window's overflow (its LRU entry, the *candidate*) moves to the main SLRU's probation
      segment. Once the cache is full, the candidate duels probation's LRU entry (the *victim*)
      on the sketch's estimate: the candidate is admitted only if its estimate is higher
      (Caffeine's hash-flooding guard admits a candidate of estimate >= 6 that lost anyway with
      probability 1/128, seeded here), else the candidate itself goes.
    - A probation hit promotes to protected (80% of the main space); protected's overflow is demoted
      to probation's MRU end. Hits in window or protected move to their MRU end.
    - Every access (hit or miss) is recorded in the :class:`FrequencySketch` first.

    No doorkeeper (Caffeine's cache has none; it halves the sketch's memory, not its decisions).
    The fixed 1% is Caffeine's initial window: good for frequency-skewed traffic, too small
    for recency-skewed traffic, which is what Caffeine's hill climber (and theine's) adjusts."""

    name = "wtinylfu-1%"

    def __init__(self, capacity: int, window: float = 0.01, protected: float = 0.8, seed: int = 0) -> None:
        self.capacity = capacity
        self.window_max = capacity - int((1.0 - window) * capacity)
        if capacity > 0 and self.window_max == 0:
            self.window_max = 1
        self.protected_max = int(protected * (capacity - self.window_max))
        self.sketch = FrequencySketch(capacity)
        self._window: OrderedDict[int, None] = OrderedDict()
        self._probation: OrderedDict[int, None] = OrderedDict()
        self._protected: OrderedDict[int, None] = OrderedDict()
        self._rng = random.Random(seed)

    def __len__(self) -> int:
        return len(self._window) + len(self._probation) + len(self._protected)

    def run(self, keys: Sequence[int]) -> int:
        cap = self.capacity
        if cap <= 0:
            return 0
        window, probation, protected = self._window, self._probation, self._protected
        window_max, protected_max = self.window_max, self.protected_max
        sk = self.sketch
        table = sk.table
        block_mask = sk.block_mask
        sample_size = sk.sample_size
        size = sk.size
        randbits = self._rng.getrandbits
        hits = 0
        for k in keys:
            # -- record the access in the sketch (FrequencySketch.increment, inlined)
            h = (k * 0x9E3779B97F4A7C15) & _M64
            h ^= h >> 29
            h = (h * 0xBF58476D1CE4E5B9) & _M64
            h ^= h >> 32
            block = ((h >> 32) & block_mask) << 7
            s0 = block + (h & 31)
            s1 = block + 32 + ((h >> 5) & 31)
            s2 = block + 64 + ((h >> 10) & 31)
            s3 = block + 96 + ((h >> 15) & 31)
            a, b, c, d = table[s0], table[s1], table[s2], table[s3]
            if a < 15 or b < 15 or c < 15 or d < 15:
                if a < 15:
                    table[s0] = a + 1
                if b < 15:
                    table[s1] = b + 1
                if c < 15:
                    table[s2] = c + 1
                if d < 15:
                    table[s3] = d + 1
                size += 1
                if size == sample_size:
                    sk.size = size
                    sk.reset()
                    size = sk.size
            # -- the policy
            if k in protected:
                protected.move_to_end(k)
                hits += 1
            elif k in probation:
                hits += 1
                del probation[k]
                protected[k] = None
                if len(protected) > protected_max:
                    probation[protected.popitem(False)[0]] = None
            elif k in window:
                window.move_to_end(k)
                hits += 1
            else:
                window[k] = None
                if len(window) > window_max:
                    candidate = window.popitem(False)[0]
                    if len(window) + len(probation) + len(protected) < cap:
                        probation[candidate] = None
                    else:
                        # the duel; an empty probation (all of main protected) takes from protected;
                        # with no main at all (capacity 1) the candidate just goes
                        if probation:
                            victim = next(iter(probation))
                        elif protected:
                            victim = next(iter(protected))
                        else:
                            continue
                        # the two estimates (FrequencySketch.frequency, inlined)
                        h = (candidate * 0x9E3779B97F4A7C15) & _M64
                        h ^= h >> 29
                        h = (h * 0xBF58476D1CE4E5B9) & _M64
                        h ^= h >> 32
                        block = ((h >> 32) & block_mask) << 7
                        cf = min(
                            table[block + (h & 31)],
                            table[block + 32 + ((h >> 5) & 31)],
                            table[block + 64 + ((h >> 10) & 31)],
                            table[block + 96 + ((h >> 15) & 31)],
                        )
                        h = (victim * 0x9E3779B97F4A7C15) & _M64
                        h ^= h >> 29
                        h = (h * 0xBF58476D1CE4E5B9) & _M64
                        h ^= h >> 32
                        block = ((h >> 32) & block_mask) << 7
                        vf = min(
                            table[block + (h & 31)],
                            table[block + 32 + ((h >> 5) & 31)],
                            table[block + 64 + ((h >> 10) & 31)],
                            table[block + 96 + ((h >> 15) & 31)],
                        )
                        if cf > vf or (cf >= 6 and randbits(7) == 0):
                            if victim in probation:
                                del probation[victim]
                            else:
                                del protected[victim]
                            probation[candidate] = None
                        # else: the candidate is evicted (it was never put in main)
        sk.size = size
        return hits


def next_uses(trace: Sequence[int]) -> array[int]:
    """For each position i, the next position j > i with the same key, or ``len(trace)`` if none:
    Belady's whole input, one backward pass (~0.3 s for a million requests)."""
    n = len(trace)
    out = array("q", bytes(8 * n))
    last: dict[int, int] = {}
    get = last.get
    for i in range(n - 1, -1, -1):
        k = trace[i]
        out[i] = get(k, n)
        last[k] = i
    return out


class Belady:
    """The offline optimum for a demand-fill cache (Belady's MIN, with bypass).

    On a miss the key is admitted and, when the cache is over capacity, the key whose next request
    is farthest away goes, which may be the newcomer itself (so a key never requested again is not
    stored at all). A key is dropped at its last request: it would be the first victim anyway. A
    max-heap of next-use positions with lazy deletion finds the victim: next-use positions are
    unique (each is one request of the trace), so ``trace[pos]`` names the key a heap entry was
    for, and the entry is live iff that key is cached with that next use.

    ``next_use`` is :func:`next_uses` of the whole trace (compute it once, share it across sizes);
    ``run`` is fed the trace's consecutive slices from the start."""

    name = "belady"

    def __init__(self, capacity: int, trace: Sequence[int], next_use: Sequence[int] | None = None) -> None:
        self.capacity = capacity
        self._trace = trace
        self._next = next_uses(trace) if next_use is None else next_use
        self._cached: dict[int, int] = {}  # key -> its next use
        self._heap: list[int] = []  # -next_use
        self._pos = 0

    def __len__(self) -> int:
        return len(self._cached)

    def run(self, keys: Sequence[int]) -> int:
        cap = self.capacity
        pos = self._pos
        self._pos += len(keys)
        if cap <= 0:
            return 0
        trace, nxt, cached, heap = self._trace, self._next, self._cached, self._heap
        never = len(trace)
        push, pop, replace = heapq.heappush, heapq.heappop, heapq.heapreplace
        hits = 0
        for i, k in enumerate(keys, pos):
            nu = nxt[i]
            if k in cached:
                hits += 1
                if nu == never:
                    del cached[k]
                else:
                    cached[k] = nu
                    push(heap, -nu)
            elif nu != never:
                if len(cached) < cap:
                    cached[k] = nu
                    push(heap, -nu)
                    continue
                # the farthest live entry; stale entries are dropped on the way
                while True:
                    far = -heap[0]
                    if cached.get(trace[far]) == far:
                        break
                    pop(heap)
                if far > nu:
                    del cached[trace[far]]
                    cached[k] = nu
                    replace(heap, -nu)
        if len(heap) > 4 * cap + 1024:  # keep the stale entries bounded
            self._heap = [-v for v in cached.values()]
            heapq.heapify(self._heap)
        return hits


__all__ = ["LRU", "Belady", "FrequencySketch", "LFUAging", "WTinyLFU", "next_uses"]
