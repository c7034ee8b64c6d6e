"""The cache's key index, two ways side by side: what a verdict's key costs in memory and per lookup.

    python benchmarks/bench_index.py                # 20,000 keys, best of 15 passes
    python benchmarks/bench_index.py --keys 200000

Why: issue 33 asked for <= 300 KiB of RSS per 1,000 distinct guarded turns (2 verdicts each, i.e.
<= ~150 B a verdict with the turns' own bytes), and the cache's entries retain ~209 B a verdict,
~148 B of it the index: the 32-byte key as a ``bytes`` object (80 B), its ``dict`` entry (~36 B)
and its slot number as an ``int`` (32 B). Any index of Python objects pays those. The candidate
that does not keeps the entries outside Python objects:

- ``dict``: what every policy uses (``Slots.index``: key -> slot, and the key by slot in a list).
- ``digest table``: an open-addressing table in flat arrays for 32-byte digest keys (linear
  probing on the key's ``hash()``, which is salted per process, so no one can aim keys at one
  chain; backward-shift deletion, so no tombstones pile up): the slot by table position in an
  ``array('q')``, each slot's key bytes in one ``bytearray``, its hash in an ``array('q')``. The
  key objects are not kept. Written here only to be measured: a hit reads it in Python where the
  ``dict`` is C.

Printed: a lookup (hit and miss, each with a fresh key object, as a request has), a put that
evicts, and the bytes each retains per entry (tracemalloc, the keys included as each keeps them;
not the slot's ``int``, which the policy's order links keep in either case).
The cache keeps the ``dict``: see docs/performance.md for the decision and its numbers.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import timeit
import tracemalloc
from array import array
from typing import Any, Protocol

KEY = 32


class Index(Protocol):
    def get(self, key: bytes) -> int | None: ...
    def put(self, key: bytes, slot: int) -> None: ...
    def pop_slot(self, slot: int) -> None: ...


class DictIndex:
    """The cache's own: a dict key -> slot, and the keys by slot (for eviction by slot)."""

    def __init__(self, capacity: int) -> None:
        self.index: dict[bytes, int] = {}
        self.keys: list[Any] = [None] * capacity
        self.get = self.index.get

    def put(self, key: bytes, slot: int) -> None:
        self.index[key] = slot
        self.keys[slot] = key

    def pop_slot(self, slot: int) -> None:
        del self.index[self.keys[slot]]
        self.keys[slot] = None


class DigestTable:
    """Open addressing over flat arrays; entries are slots ``0..capacity-1``."""

    def __init__(self, capacity: int) -> None:
        size = 8
        while size < capacity * 2:  # load <= 1/2: short probes
            size <<= 1
        self.mask = size - 1
        self.table = array("q", [-1]) * size  # slot at a position, -1 for none
        self.buf = bytearray(KEY * capacity)
        self.hashes = array("q", [0]) * capacity

    def get(self, key: bytes) -> int | None:
        h = hash(key)
        table, hashes, buf, mask = self.table, self.hashes, self.buf, self.mask
        pos = h & mask
        while True:
            s = table[pos]
            if s < 0:
                return None
            if hashes[s] == h and buf[s * KEY : s * KEY + KEY] == key:
                return s
            pos = (pos + 1) & mask

    def put(self, key: bytes, slot: int) -> None:
        h = hash(key)
        table, mask = self.table, self.mask
        pos = h & mask
        while table[pos] >= 0:
            pos = (pos + 1) & mask
        table[pos] = slot
        self.hashes[slot] = h
        self.buf[slot * KEY : slot * KEY + KEY] = key

    def pop_slot(self, slot: int) -> None:
        table, hashes, mask = self.table, self.hashes, self.mask
        pos = hashes[slot] & mask
        while table[pos] != slot:
            pos = (pos + 1) & mask
        # Backward shift: pull each later entry of the run into the hole when its home allows it.
        hole, nxt = pos, (pos + 1) & mask
        while (s := table[nxt]) >= 0:
            home = hashes[s] & mask
            if (nxt - home) & mask >= (nxt - hole) & mask:
                table[hole] = s
                hole = nxt
            nxt = (nxt + 1) & mask
        table[hole] = -1


CANDIDATES = {"dict": DictIndex, "digest table": DigestTable}


def digests(n: int) -> list[bytes]:
    return [hashlib.blake2b(os.urandom(16), digest_size=KEY).digest() for _ in range(n)]


def timings(name: str, n: int, repeat: int) -> dict[str, float]:
    keys = digests(n)
    index = CANDIDATES[name](n)
    for slot, key in enumerate(keys):
        index.put(key, slot)
    assert all(index.get(bytes(k)) == slot for slot, k in enumerate(keys)), name
    others = digests(n)
    assert all(index.get(k) is None for k in others), name

    def hits() -> None:
        get = index.get
        for key in [bytes(k) for k in keys]:  # a fresh object, its hash not cached, as a request's
            get(key)

    def copies() -> None:
        for _key in [bytes(k) for k in keys]:
            pass

    def misses() -> None:
        get = index.get
        for key in [bytes(k) for k in others]:
            get(key)

    def churn() -> None:  # evict slot s, put a new key in it (a full cache's put)
        put, pop = index.put, index.pop_slot
        for slot in range(n):
            pop(slot)
            put(others[slot], slot)
        others[:], keys[:] = keys[:], others[:]

    base = min(timeit.repeat(copies, number=1, repeat=repeat))
    per = {
        "lookup, hit": (min(timeit.repeat(hits, number=1, repeat=repeat)) - base) / n * 1e9,
        "lookup, miss": (min(timeit.repeat(misses, number=1, repeat=repeat)) - base) / n * 1e9,
        "evict + put": min(timeit.repeat(churn, number=1, repeat=repeat)) / n * 1e9,
    }
    assert all(index.get(k) == slot for slot, k in enumerate(keys)), name
    return per


def retained(name: str, n: int) -> float:
    """Bytes the index retains per entry: built from keys made as entries arrive (the caller's
    references dropped). The slot numbers are made before: in the cache the policy's order links
    hold each slot's ``int`` whatever the index is, so it is not the index's to save."""
    slots = list(range(n))
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    index = CANDIDATES[name](n)
    for slot in slots:
        index.put(hashlib.blake2b(slot.to_bytes(8, "little"), digest_size=KEY).digest(), slot)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del index
    return (after - before) / n


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    rows = {name: timings(name, args.keys, args.repeat) for name in CANDIDATES}
    memory = {name: retained(name, args.keys) for name in CANDIDATES}
    names = list(CANDIDATES)
    print(f"{args.keys:,} keys of {KEY} bytes; ns per operation (best of {args.repeat}), bytes per entry")
    print(f"   {'':<16}" + "".join(f"{n:>16}" for n in names) + f"{'ratio':>10}")
    for what in rows[names[0]]:
        a, b = rows[names[0]][what], rows[names[1]][what]
        print(f"   {what:<16}{a:>13.0f} ns{b:>13.0f} ns{b / a:>9.1f}x")
    a, b = memory[names[0]], memory[names[1]]
    print(f"   {'retained':<16}{a:>14.0f} B{b:>14.0f} B{b / a:>9.2f}x")


if __name__ == "__main__":
    main()
