"""LFUCache policy: eviction order, the LRU tiebreak, capacity edge cases, update vs put, metadata."""

from __future__ import annotations

import time

import pytest

from guardcache import cache as cache_pkg
from guardcache.cache import LFUCache


def filled(maxsize: int, *keys: str) -> LFUCache:
    c = LFUCache(maxsize, track_stats=True)
    for k in keys:
        c.put(k, k.upper())
    return c


def test_evicts_least_frequently_used_first() -> None:
    c = filled(3, "a", "b", "c")
    c.get("a")
    c.get("a")
    c.get("b")
    c.put("d", "D")  # c has frequency 1: it goes
    assert not c.contains("c")
    assert [c.contains(k) for k in "abd"] == [True, True, True]


def test_ties_are_broken_by_least_recent_use() -> None:
    c = filled(3, "a", "b", "c")  # all at frequency 1; a is the oldest
    c.put("d", "D")
    assert not c.contains("a")
    c.get("b")
    c.get("c")  # b and c at 2, d at 1
    c.put("e", "E")
    assert not c.contains("d")


def test_tiebreak_uses_recency_of_access_not_insertion() -> None:
    c = filled(3, "a", "b", "c")
    c.get("b")
    c.get("a")  # a and b at 2; b reached 2 before a did -> b is less recent
    c.get("c")  # c at 2 too, most recent
    assert c.keys_in_eviction_order() == ["b", "a", "c"]
    c.put("d", "D")  # full: b (least recent among the lowest frequency) makes room for d
    assert c.keys_in_eviction_order() == ["d", "a", "c"]


def test_new_entry_is_evicted_before_older_frequent_ones() -> None:
    c = filled(2, "a", "b")
    c.get("a")
    c.get("b")
    c.put("c", "C")  # evicts the LFU among a(2), b(2): a (least recent)
    assert c.keys_in_eviction_order() == ["c", "b"]
    c.put("d", "D")  # c has frequency 1
    assert c.keys_in_eviction_order() == ["d", "b"]


def test_groups_stay_ordered_through_mixed_accesses() -> None:
    c = filled(5, "a", "b", "c", "d", "e")
    for k, n in {"a": 3, "b": 1, "c": 2, "d": 0, "e": 1}.items():
        for _ in range(n):
            c.get(k)
    # frequencies: a4, b2, c3, d1, e2 -> order d, b, e, c, a
    assert c.keys_in_eviction_order() == ["d", "b", "e", "c", "a"]
    entry = c.entry("a")
    assert entry is not None and entry.frequency == 4


def test_empty_frequency_groups_do_not_pile_up() -> None:
    c = filled(4, "a", "b", "c", "d")
    for _ in range(1000):
        c.get("a")
    assert len(c._s.oldest) <= c.size()  # one group per distinct frequency present, at most


def test_capacity_zero_stores_nothing() -> None:
    c = LFUCache(0, track_stats=True)
    c.put("a", 1)
    assert c.size() == 0 and c.is_empty()
    assert c.get("a", "none") == "none"
    assert c.get_stats().puts == 0


def test_negative_capacity_is_an_error() -> None:
    with pytest.raises(ValueError, match="maxsize"):
        LFUCache(-1)


def test_capacity_one_keeps_the_newest() -> None:
    c = filled(1, "a")
    c.get("a")
    c.put("b", "B")
    assert c.keys_in_eviction_order() == ["b"]


def test_none_is_a_storable_value() -> None:
    c = LFUCache(2, track_stats=True)
    c.put("k", None)
    assert c.contains("k")
    assert c.get("k", "default") is None
    assert c.get_stats().hits == 1


def test_put_of_existing_key_is_an_update_and_an_access() -> None:
    c = filled(2, "a", "b")
    c.put("a", "new")
    s = c.get_stats()
    assert (s.puts, s.updates, s.current_size) == (2, 1, 2)
    assert c.get("a") == "new"
    c.put("c", "C")  # b (freq 1) goes, a (freq 3) stays
    assert c.contains("a") and not c.contains("b")


def test_contains_and_entry_are_not_accesses() -> None:
    c = filled(2, "a", "b")
    before = c.get_stats()
    assert c.contains("a") and "a" in c
    entry = c.entry("a")
    assert entry is not None and entry.frequency == 1
    assert c.get_stats() == before
    c.put("c", "C")  # a was only peeked at: still the LRU at frequency 1
    assert not c.contains("a")


def test_entry_timestamps_are_wall_clock_and_track_access() -> None:
    t0 = time.time()
    c = filled(2, "a")
    e1 = c.entry("a")
    assert e1 is not None and t0 <= e1.created_at == e1.accessed_at <= time.time()
    time.sleep(0.01)
    c.get("a")
    e2 = c.entry("a")
    assert e2 is not None and e2.created_at == e1.created_at and e2.accessed_at > e1.accessed_at
    time.sleep(0.01)
    c.put("a", "again")
    e3 = c.entry("a")
    assert e3 is not None and e3.created_at == e3.accessed_at > e2.accessed_at
    assert c.entry("missing") is None


def test_entry_view_is_immutable() -> None:
    c = filled(1, "a")
    e = c.entry("a")
    with pytest.raises(AttributeError):
        e.value = "x"  # type: ignore[misc, union-attr]


def test_delete_frees_the_slot_without_counting_an_eviction() -> None:
    c = filled(3, "a", "b", "c")
    assert c.delete("b") and not c.delete("b")
    c.put("d", "D")
    assert c.keys_in_eviction_order() == ["a", "c", "d"]
    assert c.get_stats().evictions == 0


def test_clear_counts_entries_as_evictions_and_the_cache_works_after() -> None:
    c = filled(3, "a", "b", "c")
    c.clear()
    assert c.is_empty() and c.get_stats().evictions == 3
    c.put("x", 1)
    assert c.get("x") == 1


def test_public_names_are_exported() -> None:
    import guardcache

    assert guardcache.LFUCache is LFUCache is cache_pkg.LFUCache
    assert issubclass(LFUCache, cache_pkg.CacheInterface)
    assert LFUCache(5).maxsize == 5 == LFUCache(5).capacity
