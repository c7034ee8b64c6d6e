"""Property-based: LFUCache behaves exactly like a simple reference model of LFU with an LRU tiebreak."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from guardcache.cache import LFUCache


class ReferenceLFU:
    """O(n) and obviously right: evict min (frequency, last access tick)."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self.data: dict[int, list[int]] = {}  # key -> [value, freq, last_tick]
        self.tick = itertools.count()
        self.hits = self.misses = self.evictions = self.puts = self.updates = 0

    def get(self, key: int) -> int | None:
        if key not in self.data:
            self.misses += 1
            return None
        self.hits += 1
        entry = self.data[key]
        entry[1] += 1
        entry[2] = next(self.tick)
        return entry[0]

    def put(self, key: int, value: int) -> None:
        if key in self.data:
            entry = self.data[key]
            entry[0] = value
            entry[1] += 1
            entry[2] = next(self.tick)
            self.updates += 1
            return
        if self.maxsize == 0:
            return
        if len(self.data) >= self.maxsize:
            victim = min(self.data, key=lambda k: (self.data[k][1], self.data[k][2]))
            del self.data[victim]
            self.evictions += 1
        self.data[key] = [value, 1, next(self.tick)]
        self.puts += 1

    def delete(self, key: int) -> None:
        self.data.pop(key, None)

    def clear(self) -> None:
        self.evictions += len(self.data)
        self.data.clear()

    def reset_stats(self) -> None:
        self.hits = self.misses = self.evictions = self.puts = self.updates = 0

    def order(self) -> list[int]:
        return sorted(self.data, key=lambda k: (self.data[k][1], self.data[k][2]))


ops = st.lists(
    st.tuples(
        st.sampled_from(["get", "get", "put", "put", "put", "delete", "clear", "reset_stats"]),
        st.integers(0, 12),
        st.integers(0, 99),
    ),
    max_size=300,
)


@settings(max_examples=300, deadline=None)
@given(maxsize=st.integers(0, 8), operations=ops)
def test_matches_the_reference_model(maxsize: int, operations: list[tuple[str, int, int]]) -> None:
    real, model = LFUCache(maxsize, track_stats=True), ReferenceLFU(maxsize)
    for op, key, value in operations:
        if op == "get":
            assert real.get(key) == model.get(key)
        elif op == "put":
            real.put(key, value)
            model.put(key, value)
        elif op == "delete":
            real.delete(key)
            model.delete(key)
        else:
            getattr(real, op)()
            getattr(model, op)()
        assert real.keys_in_eviction_order() == model.order()
    s = real.get_stats()
    assert (s.hits, s.misses, s.evictions, s.puts, s.updates) == (
        model.hits,
        model.misses,
        model.evictions,
        model.puts,
        model.updates,
    )
    for key in model.data:
        entry = real.entry(key)
        assert entry is not None and entry.frequency == model.data[key][1]


@settings(max_examples=200, deadline=None)
@given(
    maxsize=st.integers(1, 8),
    puts=st.lists(st.integers(0, 12), max_size=40),
    reads=st.lists(st.integers(0, 12), max_size=80),
)
def test_get_hit_path_moves_entries_exactly_like_structure_touch(
    maxsize: int, puts: list[int], reads: list[int]
) -> None:
    """``get`` inlines ``Structure.touch`` (the hottest path); ``get_or_compute_sync`` hits go through
    ``touch`` itself. The same reads through either must leave identical linked structures."""
    inlined, called = LFUCache(maxsize), LFUCache(maxsize)
    for key in puts:
        inlined.put(key, key)
        called.put(key, key)
    for key in reads:
        if inlined.contains(key):
            assert inlined.get(key) == called.get_or_compute_sync(key, lambda: -1) == key
    a, b = inlined._s, called._s
    assert (a.freq, a.prev, a.next, a.oldest, a.index) == (b.freq, b.prev, b.next, b.oldest, b.index)
