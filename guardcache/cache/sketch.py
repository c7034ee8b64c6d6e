"""How often keys were asked for recently, in a fixed table of small counters: TinyLFU's memory of
keys it no longer (or never) holds, after Caffeine's ``FrequencySketch``.

Why a sketch: an admission policy must know the popularity of a key it has not stored (a newcomer,
a key it evicted a while ago) without keeping the key. Counters indexed by the key's hash, a fixed
table for any number of keys: a few bytes per cache entry. Counters saturate at :data:`CAP` and
the whole table is halved every sample period (:meth:`halve`), which is how TinyLFU forgets traffic
that moved on.

Where it differs from Caffeine's, and why: one counter a key instead of four (the minimum of four
counters is Caffeine's defence against collisions), one byte a counter instead of four bits, and no
cache-line blocks. The cache keeps exact counts of the entries it holds
(:mod:`~guardcache.cache.tinylfu`), so the sketch only gives a newcomer its starting count; each
index is a few big-integer operations in Python: four counters cost a miss ~300 ns more than one,
two ~70 ns more, and on ``benchmarks/bench_policy.py`` one counter moved no cell by more than 0.3
point against two (mean 42.23% against 42.28%), four no more than a few tenths. The table has 16
counters per entry of the capacity (rounded up to a power of two): as wide as Caffeine's four rows
together, so a key shares its counter with another about as often as a Caffeine key shares all
four. One byte a counter makes a halving one ``bytes.translate`` in C.

Keys are spread by :func:`spread` (Python's ``hash`` times a 64-bit odd constant; the index is taken
from the product's upper bits, where every bit of the hash has mixed in): guardcache's keys are
digests whose ``hash`` is already random (and salted per process, so an outsider cannot aim
collisions at a key); the multiply is for int keys, whose ``hash`` is the number itself.
"""

from __future__ import annotations

from collections.abc import Hashable

#: A counter's ceiling (Caffeine's 4-bit counters stop at 15).
CAP = 15
#: The multiplier of :func:`spread` (2**64 / golden ratio, odd), and the shift that takes the index
#: from the product's upper bits. ``TinyLFUPolicy`` inlines :meth:`FrequencySketch.increment`; the
#: two must read the same bits (a test holds them together).
GOLDEN = 0x9E3779B97F4A7C15
SHIFT = 40
_HALVE = bytes(i >> 1 for i in range(256))


def spread(key: Hashable) -> int:
    """The key's hash, multiplied so that the bits the sketch reads depend on all of it."""
    return hash(key) * GOLDEN >> SHIFT


def table_size(capacity: int) -> int:
    """Counters for a cache of ``capacity`` entries: 16 an entry, a power of two (at least 16)."""
    size = 16
    while size < 16 * capacity:
        size <<= 1
    return size


class FrequencySketch:
    """Counts of recent requests per key, approximate (never under the truth before a halving)."""

    __slots__ = ("mask", "table")

    def __init__(self, capacity: int) -> None:
        self.table = bytearray(table_size(capacity))
        self.mask = len(self.table) - 1

    def resize(self, capacity: int) -> None:
        """Grow the table for ``capacity`` entries (counts start again from zero, as Caffeine's do
        when it sizes its sketch lazily, once the cache is half full)."""
        self.table = bytearray(table_size(capacity))
        self.mask = len(self.table) - 1

    def estimate(self, h: int) -> int:
        """The key's count (``h`` is :func:`spread` of it)."""
        return self.table[h & self.mask]

    def increment(self, h: int) -> int:
        """Count one request of the key; returns its new estimate."""
        t = self.table
        a = h & self.mask
        count = t[a]
        if count < CAP:
            count += 1
            t[a] = count
        return count

    def raise_to(self, h: int, count: int) -> None:
        """Make the key's estimate at least ``count`` (a counter only ever rises here, so no other
        key's estimate can fall): how a cached entry's own count returns to the sketch when the
        entry leaves."""
        t = self.table
        a = h & self.mask
        if t[a] < count:
            t[a] = min(count, CAP)

    def halve(self) -> None:
        """Halve every counter: the sketch's aging."""
        t = self.table
        t[:] = t.translate(_HALVE)


__all__ = ["CAP", "GOLDEN", "SHIFT", "FrequencySketch", "spread", "table_size"]
