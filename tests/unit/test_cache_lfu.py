"""The LFU alone: its exact eviction order, the LRU tiebreak, what the seed's tests and NeMo's
tests/test_cache_lfu.py expect of it (capacity one, update vs put, frequencies). What every policy
does alike (capacity zero, None values, entries and their timestamps, delete and clear, the exports)
is tests/unit/test_cache_policy.py, run under the LFU too."""

from __future__ import annotations

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


def test_capacity_one_keeps_the_newest() -> None:
    c = filled(1, "a")
    c.get("a")
    c.put("b", "B")
    assert c.keys_in_eviction_order() == ["b"]


def test_put_of_existing_key_is_an_update_and_an_access() -> None:
    c = filled(2, "a", "b")
    c.put("a", "new")
    s = c.get_stats()
    assert (s.puts, s.updates, s.current_size) == (2, 1, 2)
    assert c.get("a") == "new"
    c.put("c", "C")  # b (freq 1) goes, a (freq 3) stays
    assert c.contains("a") and not c.contains("b")


def test_a_peeked_at_entry_stays_the_least_recently_used() -> None:
    c = filled(2, "a", "b")
    assert c.contains("a") and "a" in c
    entry = c.entry("a")
    assert entry is not None and entry.frequency == 1
    c.put("c", "C")  # a was only peeked at: still the LRU at frequency 1
    assert not c.contains("a")


def test_delete_frees_the_slot_without_counting_an_eviction() -> None:
    c = filled(3, "a", "b", "c")
    assert c.delete("b") and not c.delete("b")
    c.put("d", "D")
    assert c.keys_in_eviction_order() == ["a", "c", "d"]
    assert c.get_stats().evictions == 0
