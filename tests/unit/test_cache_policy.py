"""The policy seam: what every cache does the same whatever evicts (LFU, TinyLFU, a toy FIFO written
here), and the registry that builds caches by policy name."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Hashable
from typing import Any, ClassVar

import pytest

import guardcache
from guardcache.cache import (
    DISABLED_RECORDER,
    POLICY_NAMES,
    CacheInterface,
    LFUCache,
    PolicyCache,
    StatsReporter,
    TinyLFUCache,
    cache_class,
    make_cache,
)
from guardcache.cache.policy import HotPaths, PolicyFactory
from guardcache.cache.slots import Slots, clock

LOGGER = "guardcache.cache.lfu"


class FIFOPolicy(Slots):
    """First in, first out, as plainly as possible: a second policy is this much code."""

    name: ClassVar[str] = "FIFO"

    def __init__(self, maxsize: int, lock: threading.RLock) -> None:
        super().__init__(sentinels=0)
        self.maxsize = maxsize
        self.lock = lock
        self.order: list[Hashable] = []
        self.tally = [0, 0, 0, 0]  # hits, misses, evictions, updates
        t = self.tally
        self.hot = HotPaths(self.get, self.put, lambda: (t[0], t[1], t[2], t[3]))

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self.lock:
            i = self.index.get(key)
            if i is None:
                self.tally[1] += 1
                return default
            self.tally[0] += 1
            self.touch(i)
            return self.values[i]

    def put(self, key: Hashable, value: Any) -> None:
        with self.lock:
            i = self.index.get(key)
            if i is not None:
                self.values[i] = value
                self.tally[3] += 1
                self.touch(i)
                self.created[i] = clock()
                return
            if not self.maxsize:
                return
            if len(self.index) >= self.maxsize:
                j = self.index.pop(self.order.pop(0))
                self.keys[j] = self.values[j] = None
                self.free.append(j)
                self.tally[2] += 1
            i = self.free.pop() if self.free else self.grow()
            self.keys[i], self.values[i], self.index[key] = key, value, i
            self.created[i], self.accessed[i] = clock(), None
            self.order.append(key)

    def touch(self, i: int) -> None:
        self.accessed[i] = clock()

    def remove(self, key: Hashable) -> bool:
        i = self.index.pop(key, None)
        if i is None:
            return False
        self.order.remove(key)
        self.release(i)
        return True

    def reset(self) -> None:
        self.reset_slots()
        self.order.clear()

    def frequency(self, i: int) -> int:
        return 0

    def eviction_order(self) -> list[Hashable]:
        return list(self.order)


class FIFOCache(PolicyCache):
    policy_type: ClassVar[PolicyFactory] = FIFOPolicy


CACHES: dict[str, type[PolicyCache]] = {"lfu": LFUCache, "tinylfu": TinyLFUCache, "fifo": FIFOCache}


@pytest.fixture(params=list(CACHES))
def kind(request: pytest.FixtureRequest) -> type[PolicyCache]:
    return CACHES[request.param]


# -- the registry ---------------------------------------------------------------------------------


def test_the_registry_builds_each_policy_by_name() -> None:
    assert POLICY_NAMES == ("lfu", "tinylfu")
    for name, cls in (("lfu", LFUCache), ("tinylfu", TinyLFUCache)):
        cache = make_cache(name, 7, track_stats=True)
        assert type(cache) is cls is cache_class(name)
        assert cache.maxsize == 7 and cache.track_stats
        assert isinstance(cache, CacheInterface)
    assert make_cache("tinylfu", 3).policy == "TinyLFU" and LFUCache(3).policy == "LFU"


def test_an_unknown_policy_is_an_error_naming_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown cache policy 'arc'; choose one of: lfu, tinylfu"):
        make_cache("arc", 10)


def test_tinylfu_is_exported_beside_the_lfu() -> None:
    assert guardcache.TinyLFUCache is TinyLFUCache
    assert issubclass(TinyLFUCache, PolicyCache) and not issubclass(TinyLFUCache, LFUCache)


# -- written once: the same behaviour under every policy --------------------------------------------


def test_get_put_update_and_counts(kind: type[PolicyCache]) -> None:
    c = kind(4, track_stats=True)
    c.put("a", 1)
    c.put("a", 2)
    assert c.get("a") == 2 and c.get("b", "none") == "none"
    s = c.get_stats()
    assert (s.hits, s.misses, s.puts, s.updates, s.current_size, s.maxsize) == (1, 1, 1, 1, 1, 4)


def test_size_never_exceeds_maxsize_and_puts_minus_evictions_is_the_size(kind: type[PolicyCache]) -> None:
    c = kind(5, track_stats=True)
    for i in range(40):
        c.put(i % 13, i)
        c.get((i * 7) % 13)
        assert len(c) <= 5
    c.delete(next(iter(c.keys_in_eviction_order())))
    s = c.get_stats()
    assert s.puts - s.evictions - 1 == s.current_size == len(c)  # one deleted


def test_contains_and_entry_are_not_accesses(kind: type[PolicyCache]) -> None:
    c = kind(3, track_stats=True)
    c.put("a", 1)
    before = c.get_stats()
    assert c.contains("a") and "a" in c and not c.contains("z")
    entry = c.entry("a")
    assert entry is not None and entry.value == 1 and entry.key == "a"
    assert c.get_stats() == before and c.entry("z") is None


def test_entry_timestamps_are_wall_clock_and_track_access(kind: type[PolicyCache]) -> None:
    t0 = time.time()
    c = kind(3)
    c.put("a", 1)
    e1 = c.entry("a")
    assert e1 is not None and t0 <= e1.created_at == e1.accessed_at <= time.time()
    time.sleep(0.01)
    c.get("a")
    e2 = c.entry("a")
    assert e2 is not None and e2.created_at == e1.created_at and e2.accessed_at > e1.accessed_at


def test_delete_is_not_an_eviction_and_clear_counts_evictions(kind: type[PolicyCache]) -> None:
    c = kind(4, track_stats=True)
    for k in "abc":
        c.put(k, k)
    assert c.delete("b") and not c.delete("b")
    assert c.get_stats().evictions == 0
    c.clear()
    assert c.is_empty() and c.get_stats().evictions == 2
    c.put("x", 1)
    assert c.get("x") == 1 and c.get_stats().puts == 4


def test_capacity_zero_stores_nothing_and_negative_is_an_error(kind: type[PolicyCache]) -> None:
    c = kind(0, track_stats=True)
    c.put("a", 1)
    assert c.size() == 0 and c.get("a", "none") == "none" and c.get_stats().puts == 0
    assert bool(c) is True
    with pytest.raises(ValueError, match="maxsize"):
        kind(-1)


def test_none_is_a_storable_value(kind: type[PolicyCache]) -> None:
    c = kind(2, track_stats=True)
    c.put("k", None)
    assert c.get("k", "default") is None and c.get_stats().hits == 1


def test_the_stats_line_has_the_seeds_form_with_the_policy_in_front(
    kind: type[PolicyCache], caplog: pytest.LogCaptureFixture
) -> None:
    c = kind(4, track_stats=True)
    c.put("a", 1)
    c.get("a")
    c.get("b")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        c.log_stats_now()
    assert caplog.records[-1].getMessage() == (
        f"{c.policy} Cache Statistics - Size: 1/4 | Hits: 1 | Misses: 1 | Hit Rate: 50.00% | "
        "Evictions: 0 | Puts: 1 | Updates: 0"
    )
    assert repr(c) == f"{kind.__name__}(maxsize=4, size=1)"


def test_the_line_is_written_on_access_or_by_a_reporter(
    kind: type[PolicyCache], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1_000_000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    c = kind(5, track_stats=True, stats_logging_interval=10.0)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        c.put("a", 1)
        now[0] += 10.0
        c.get("a")
    assert [r.getMessage().split(" - ")[0] for r in caplog.records] == [f"{c.policy} Cache Statistics"]
    reporter = StatsReporter(start_thread=False)
    reported = kind(5, track_stats=True, stats_logging_interval=1.0, reporter=reporter)
    assert reporter.scheduled() == 1
    reported.close()
    assert reporter.scheduled() == 0


def test_a_disabled_recorder_counts_nothing_and_the_cache_still_works(kind: type[PolicyCache]) -> None:
    c = kind(3, recorder=DISABLED_RECORDER)
    c.put("a", 1)
    assert c.get("a") == 1 and c.get_or_compute_sync("b", lambda: 2) == 2
    assert c.get_stats().hits == 0 and c.get_stats().current_size == 2


async def test_concurrent_askers_share_one_computation(kind: type[PolicyCache]) -> None:
    c = kind(10, track_stats=True)
    calls = 0
    gate = asyncio.Event()

    async def compute() -> str:
        nonlocal calls
        calls += 1
        await gate.wait()
        return "v"

    tasks = [asyncio.create_task(c.get_or_load("k", compute)) for _ in range(5)]
    await asyncio.sleep(0)
    assert c.in_flight() == 1
    gate.set()
    results = await asyncio.gather(*tasks)
    assert calls == 1 and [v for v, _ in results] == ["v"] * 5
    assert sum(loaded for _, loaded in results) == 1
    s = c.get_stats()
    assert (s.misses, s.hits, s.coalesced, s.load_success) == (1, 4, 4, 1)
    assert await c.get_or_compute("k", compute) == "v" and calls == 1


def test_threads_share_one_computation_and_a_failure_stores_nothing(kind: type[PolicyCache]) -> None:
    c = kind(10, track_stats=True)
    calls = 0
    started = threading.Event()
    release = threading.Event()

    def compute() -> int:
        nonlocal calls
        calls += 1
        started.set()
        release.wait(5)
        return 42

    out: list[int] = []
    threads = [threading.Thread(target=lambda: out.append(c.get_or_compute_sync("k", compute)))]
    threads[0].start()
    started.wait(5)
    threads += [threading.Thread(target=lambda: out.append(c.get_or_compute_sync("k", compute)))]
    threads[1].start()
    release.set()
    for t in threads:
        t.join(5)
    assert out == [42, 42] and calls == 1

    def boom() -> int:
        raise RuntimeError("backend down")

    with pytest.raises(RuntimeError):
        c.get_or_compute_sync("bad", boom)
    assert "bad" not in c and c.get_or_compute_sync("bad", boom, default=-1) == -1
    assert c.get_stats().load_failure == 2


def test_caches_without_an_interval_keep_their_policys_bare_hot_paths(kind: type[PolicyCache]) -> None:
    bare = kind(3)
    assert bare.get is bare.hot.get and bare.put is bare.hot.put
    logged = kind(3, track_stats=True, stats_logging_interval=60.0)
    assert logged.get.__qualname__ == "with_line_check.<locals>.checked_get"
