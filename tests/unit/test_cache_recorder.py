"""The stats recorder: what each path counts, consistency under threads, loads, the disabled recorder,
and the ``loaded`` flag of ``get_or_load``."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Hashable
from typing import Any

import pytest

from guardcache.cache import LFUCache
from guardcache.cache.interface import CacheInterface, ComputeFn
from guardcache.cache.recorder import (
    DISABLED_RECORDER,
    ConcurrentStatsRecorder,
    StatsSnapshot,
)


def test_get_and_put_count_hits_misses_puts_updates_and_evictions() -> None:
    c = LFUCache(2)
    c.put("a", 1)
    c.put("a", 2)  # update
    c.put("b", 1)
    assert c.get("a") == 2 and c.get("zz") is None
    c.put("c", 1)  # evicts b (fewest accesses)
    s = c.recorder.snapshot()
    assert (s.hits, s.misses, s.puts, s.updates, s.evictions) == (1, 1, 3, 1, 1)
    assert (s.load_success, s.load_failure, s.coalesced) == (0, 0, 0)
    stats = c.get_stats()
    assert (stats.hits, stats.misses, stats.puts, stats.updates, stats.evictions) == (1, 1, 3, 1, 1)
    c.delete("a")
    c.clear()  # the one left counts as an eviction; puts stay what they were
    s = c.recorder.snapshot()
    assert (s.puts, s.evictions) == (3, 2)


async def test_a_load_counts_a_miss_a_success_and_its_time_and_then_a_hit() -> None:
    c = LFUCache(10)

    async def compute() -> str:
        await asyncio.sleep(0.02)
        return "v"

    assert await c.get_or_load("k", compute) == ("v", True)
    assert await c.get_or_load("k", compute) == ("v", False)
    assert await c.get_or_compute("k", compute) == "v"
    s = c.recorder.snapshot()
    assert (s.misses, s.hits, s.load_success, s.load_failure, s.puts) == (1, 2, 1, 0, 1)
    assert 0.015 <= s.total_load_time < 5.0
    assert s.average_load_penalty == s.total_load_time
    stats = c.get_stats()
    assert stats["load_success"] == 1 and stats["total_load_time"] == s.total_load_time


async def test_a_burst_of_askers_counts_one_load_and_the_rest_as_coalesced_hits() -> None:
    c = LFUCache(10)
    calls = 0
    gate = asyncio.Event()

    async def compute() -> str:
        nonlocal calls
        calls += 1
        await gate.wait()
        return "v"

    tasks = [asyncio.create_task(c.get_or_load("k", compute)) for _ in range(200)]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*tasks)
    assert calls == 1
    assert sorted(loaded for _, loaded in results) == [False] * 199 + [True]
    assert {value for value, _ in results} == {"v"}
    s = c.recorder.snapshot()
    assert (s.misses, s.load_success, s.hits, s.coalesced, s.load_failure) == (1, 1, 199, 199, 0)


def test_threads_computing_many_keys_count_one_load_per_key_and_every_lookup() -> None:
    c = LFUCache(1000)
    keys = [f"k{i}" for i in range(50)]
    computed: list[str] = []
    lock = threading.Lock()

    def compute_for(key: str) -> Any:
        def compute() -> str:
            with lock:
                computed.append(key)
            time.sleep(0.001)
            return key.upper()

        return compute

    per_thread = 400
    start = threading.Barrier(8)

    def worker(seed: int) -> None:
        rnd = random.Random(seed)
        start.wait()
        for _ in range(per_thread):
            key = rnd.choice(keys)
            assert c.get_or_compute_sync(key, compute_for(key)) == key.upper()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s = c.recorder.snapshot()
    assert sorted(computed) == sorted(set(computed))  # one computation per key
    assert s.load_success == s.misses == len(computed) == s.puts
    assert s.hits + s.misses == 8 * per_thread
    assert s.coalesced <= s.hits and s.load_failure == 0


def test_every_snapshot_is_consistent_while_threads_get_and_put() -> None:
    c = LFUCache(64)
    stop = threading.Event()
    done = [0, 0]  # lookups finished per worker (read only after join)

    def worker(i: int) -> None:
        rnd = random.Random(i)
        n = 0
        while not stop.is_set():
            key = rnd.randrange(200)
            if c.get(key) is None:
                c.put(key, key)
            n += 1
        done[i] = n

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    last = StatsSnapshot()
    try:
        for _ in range(300):
            stats = c.get_stats()
            # Taken under the cache's lock with the size: nothing is half-counted.
            assert stats.puts - stats.evictions == stats.current_size
            assert stats.hits >= last.hits and stats.misses >= last.misses
            last = StatsSnapshot(hits=stats.hits, misses=stats.misses)
    finally:
        stop.set()
        for t in threads:
            t.join()
    s = c.recorder.snapshot()
    assert s.hits + s.misses == sum(done)


async def test_a_failed_load_counts_a_failure_and_stores_nothing() -> None:
    c = LFUCache(10)

    async def boom() -> str:
        raise RuntimeError("backend down")

    with pytest.raises(RuntimeError):
        await c.get_or_compute("k", boom)
    assert await c.get_or_load("k", boom, default="d") == ("d", True)
    s = c.recorder.snapshot()
    assert (s.misses, s.load_failure, s.load_success, s.puts) == (2, 2, 0, 0)
    assert "k" not in c


def test_a_failed_sync_load_counts_a_failure() -> None:
    c = LFUCache(10)

    def boom() -> str:
        raise ValueError("no")

    with pytest.raises(ValueError):
        c.get_or_compute_sync("k", boom)
    assert c.get_or_load_sync("k", lambda: "v") == ("v", True)
    assert c.get_or_load_sync("k", lambda: "other") == ("v", False)
    s = c.recorder.snapshot()
    assert (s.load_failure, s.load_success, s.hits, s.misses) == (1, 1, 1, 2)


async def test_a_load_cancelled_by_its_only_asker_counts_a_failure() -> None:
    c = LFUCache(10)
    started = asyncio.Event()

    async def slow() -> str:
        started.set()
        await asyncio.sleep(10)
        return "never"

    task = asyncio.create_task(c.get_or_compute("k", slow))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):  # the shared computation is cancelled on the next loop turns
        if c.recorder.snapshot().load_failure:
            break
        await asyncio.sleep(0.001)
    s = c.recorder.snapshot()
    assert (s.misses, s.load_failure, s.load_success) == (1, 1, 0)
    assert c.in_flight() == 0 and "k" not in c


async def test_the_disabled_recorder_counts_nothing_and_the_cache_still_works() -> None:
    c = LFUCache(2, recorder=DISABLED_RECORDER)
    c.put("a", 1)
    c.put("a", 2)
    c.put("b", 1)
    c.put("c", 1)
    assert c.get("a") == 2 and c.get("zz") is None
    assert await c.get_or_load("k", lambda: "v") == ("v", True)
    assert await c.get_or_load("k", lambda: "w") == ("v", False)
    c.clear()
    assert c.recorder.snapshot() == StatsSnapshot()
    stats = c.get_stats()
    assert stats.hits == stats.misses == stats.puts == stats.evictions == stats.load_success == 0
    assert stats.maxsize == 2


def test_caches_with_and_without_a_recorder_behave_alike() -> None:
    """A disabled recorder changes what is reported, never what is stored: same results, same
    eviction order, on a random workload."""
    counted, uncounted = LFUCache(50), LFUCache(50, recorder=DISABLED_RECORDER)
    rnd = random.Random(3)
    for step in range(20_000):
        key = rnd.randrange(120)
        if rnd.random() < 0.6:
            assert counted.get(key, "-") == uncounted.get(key, "-")
        else:
            counted.put(key, step)
            uncounted.put(key, step)
    assert counted.keys_in_eviction_order() == uncounted.keys_in_eviction_order()
    assert [counted.entry(k).frequency for k in counted.keys_in_eviction_order()] == [  # type: ignore[union-attr]
        uncounted.entry(k).frequency  # type: ignore[union-attr]
        for k in uncounted.keys_in_eviction_order()
    ]


def test_reset_starts_from_zero_and_counting_goes_on() -> None:
    c = LFUCache(10)
    c.put("a", 1)
    c.get("a")
    c.reset_stats()
    assert c.recorder.snapshot() == StatsSnapshot()
    c.get("a")
    c.get("b")
    s = c.recorder.snapshot()
    assert (s.hits, s.misses, s.puts) == (1, 1, 0)


def test_a_recorder_counts_for_one_cache_only_and_snapshots_add_up() -> None:
    shared = ConcurrentStatsRecorder()
    a = LFUCache(4, recorder=shared)
    with pytest.raises(ValueError, match="own recorder"):
        LFUCache(4, recorder=shared)
    b = LFUCache(4)
    a.get("x")
    b.get("y")
    b.put("y", 1)
    total = a.recorder.snapshot() + b.recorder.snapshot()
    assert (total.misses, total.puts) == (2, 1)
    assert (total - b.recorder.snapshot()).misses == 1


def test_record_methods_are_counted_from_any_thread() -> None:
    r = ConcurrentStatsRecorder()

    def work() -> None:
        for _ in range(1000):
            r.record_l2_hit(previous=True)
            r.record_l2_miss()
            r.record_computation()
            r.record_load_success(0.001)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s = r.snapshot()
    assert (s.l2_hits, s.l2_previous_hits, s.l2_misses, s.computations, s.load_success) == (4000,) * 5
    assert s.total_load_time == pytest.approx(4.0)
    assert DISABLED_RECORDER.snapshot() == StatsSnapshot()
    DISABLED_RECORDER.record_l2_hit()
    assert DISABLED_RECORDER.snapshot() == StatsSnapshot()


class MinimalCache(CacheInterface):
    """A store that implements only the abstract methods: get_or_load comes from the interface."""

    def __init__(self) -> None:
        self.data: dict[Hashable, Any] = {}

    def get(self, key: Hashable, default: Any = None) -> Any:
        return self.data.get(key, default)

    def put(self, key: Hashable, value: Any) -> None:
        self.data[key] = value

    def size(self) -> int:
        return len(self.data)

    def is_empty(self) -> bool:
        return not self.data

    def clear(self) -> None:
        self.data.clear()

    @property
    def maxsize(self) -> int:
        return 100

    def contains(self, key: Hashable) -> bool:
        return key in self.data


async def test_the_interface_default_get_or_load_says_whether_compute_ran() -> None:
    c = MinimalCache()
    compute: ComputeFn = lambda: "v"  # noqa: E731
    assert await c.get_or_load("k", compute) == ("v", True)
    assert await c.get_or_load("k", compute) == ("v", False)
