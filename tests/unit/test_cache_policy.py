"""The cache suite: what every cache does the same whatever evicts, run under every policy of the
registry (``guardcache.cache.POLICY_NAMES``) and a toy FIFO written here (a second policy is this much
code), each policy's own invariants checked after the same workloads (``INVARIANTS``: a new policy
adds its checker); then what one policy alone does: TinyLFU's queues (window, probation, protected),
admission, aging, the window's climb, its sketch and its climber. The LFU's own order (exact eviction
order, the LRU tiebreak, what the seed and NeMo's tests expect of it) is tests/unit/test_cache_lfu.py
and tests/unit/test_cache_model.py."""

from __future__ import annotations

import asyncio
import functools
import heapq
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import guardcache
from guardcache import cache as cache_pkg
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
from guardcache.cache.climber import HillClimber
from guardcache.cache.policy import HotPaths, PolicyFactory
from guardcache.cache.sketch import CAP, FrequencySketch, spread
from guardcache.cache.slots import Slots, clock
from guardcache.cache.tinylfu import PROBATION, PROTECTED, WINDOW, TinyLFUPolicy
from tests.unit.cache_support import BusyCache

LOGGER = "guardcache.cache.lfu"
QUEUES = PROBATION + CAP + 1


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
                self.created[i] = self.accessed[i] = clock()  # created again, and accessed: one reading
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

    def touch(self, i: int, now: float | None = None) -> None:
        self.accessed[i] = clock() if now is None else now

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


CACHES: dict[str, type[PolicyCache]] = {
    **{name: cache_class(name) for name in POLICY_NAMES},
    "fifo": FIFOCache,
}
"""Every policy of the registry, by name, and the toy."""

BUSY: dict[type[PolicyCache], type[PolicyCache]] = {TinyLFUCache: BusyCache}
"""What the concurrency tests (and the property test, half the time) run instead of a policy's cache:
one that does its housekeeping (a TinyLFU's aging, climbing and resizing) every few operations."""


@pytest.fixture(params=list(CACHES))
def kind(request: pytest.FixtureRequest) -> type[PolicyCache]:
    return CACHES[request.param]


# -- each policy's invariants -----------------------------------------------------------------------


def tinylfu_policy(c: PolicyCache) -> TinyLFUPolicy:
    p = c._s
    assert isinstance(p, TinyLFUPolicy)
    return p


def lfu_invariants(c: PolicyCache, settled: bool = True) -> None:
    """The eviction order is by frequency (least first)."""
    freqs = [c.entry(k).frequency for k in c.keys_in_eviction_order()]  # type: ignore[union-attr]
    assert freqs == sorted(freqs)  # the list stays ordered by frequency


def fifo_invariants(c: PolicyCache, settled: bool = True) -> None:
    """The eviction order is the order of insertion."""
    p = c._s
    assert isinstance(p, FIFOPolicy)
    assert p.order == list(p.index)


def check_invariants(c: PolicyCache, settled: bool = True) -> None:
    """Every ring well linked; each entry in exactly one queue, probation's by its count; the sizes
    add up and (``settled``: no resize being worked off) stay within their limits."""
    p = tinylfu_policy(c)
    sizes = c.sizes()  # type: ignore[attr-defined]
    members: Counter[int] = Counter()
    seen: set[int] = set()
    for q in range(QUEUES):
        before, i = q, p.next[q]
        while i != q:
            assert p.prev[i] == before and p.queue[i] == q and i not in seen
            assert p.index[p.keys[i]] == i
            if q >= PROBATION:
                assert p.freq[i] == q - PROBATION  # probation is ordered by count
            seen.add(i)
            members[min(q, PROBATION)] += 1
            before, i = i, p.next[i]
        assert p.prev[q] == before
    assert len(seen) == len(p.index) == len(c) <= c.maxsize
    assert (members[WINDOW], members[PROBATION], members[PROTECTED]) == (
        sizes.window,
        sizes.probation,
        sizes.protected,
    )
    if c.maxsize > 1:
        assert 1 <= sizes.window_max <= c.maxsize - 1
        assert sizes.protected_max == int(0.8 * (c.maxsize - sizes.window_max))
    if settled:
        assert sizes.protected <= sizes.protected_max
        if len(c) == c.maxsize:
            assert sizes.window <= sizes.window_max
    assert all(f <= CAP for f in p.freq)


INVARIANTS: dict[str, Callable[..., None]] = {
    "LFU": lfu_invariants,
    "TinyLFU": check_invariants,
    "FIFO": fifo_invariants,
}
"""Each policy's own invariants, by its name (``cache.policy``)."""


def invariants_hold(c: PolicyCache, *, settled: bool = True) -> None:
    """What every cache keeps (each entry once in the eviction order, which lists them all, within
    maxsize) and what its policy keeps (``INVARIANTS``)."""
    order = c.keys_in_eviction_order()
    assert len(order) == len(set(order)) == len(c) <= max(c.maxsize, 0)
    assert all(c.entry(k) is not None for k in order)
    INVARIANTS[c.policy](c, settled=settled)


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


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_each_policys_cache_is_exported_by_its_class_name(name: str) -> None:
    cls = cache_class(name)
    assert getattr(guardcache, cls.__name__) is cls is getattr(cache_pkg, cls.__name__)
    assert issubclass(cls, PolicyCache) and issubclass(cls, cache_pkg.CacheInterface)
    assert cls(5).maxsize == 5 == cls(5).capacity
    assert cls is LFUCache or not issubclass(cls, LFUCache)  # a policy of its own, not an LFU's subclass


def test_every_policy_has_its_invariants_checked() -> None:
    assert {cache_class(name)(1).policy for name in POLICY_NAMES} <= set(INVARIANTS)
    assert set(CACHES) == {*POLICY_NAMES, "fifo"}


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
    c.put("b", 2)
    before, order = c.get_stats(), c.keys_in_eviction_order()
    assert c.contains("a") and "a" in c and not c.contains("z")
    entry = c.entry("a")
    assert entry is not None and entry.value == 1 and entry.key == "a"
    assert c.get_stats() == before and c.entry("z") is None
    assert c.keys_in_eviction_order() == order  # a peek moves nothing


def test_entry_timestamps_are_wall_clock_and_track_access(kind: type[PolicyCache]) -> None:
    t0 = time.time()
    c = kind(3)
    c.put("a", 1)
    e1 = c.entry("a")
    assert e1 is not None and t0 <= e1.created_at == e1.accessed_at <= time.time()
    time.sleep(0.01)  # the clock moves on (not a wait)
    c.get("a")
    e2 = c.entry("a")
    assert e2 is not None and e2.created_at == e1.created_at and e2.accessed_at > e1.accessed_at
    time.sleep(0.01)
    c.put("a", "again")  # a new value: created again
    e3 = c.entry("a")
    assert e3 is not None and e3.created_at == e3.accessed_at > e2.accessed_at
    assert c.entry("missing") is None


def test_the_entry_view_is_immutable(kind: type[PolicyCache]) -> None:
    c = kind(1)
    c.put("a", "A")
    e = c.entry("a")
    with pytest.raises(AttributeError):
        e.value = "x"  # type: ignore[misc, union-attr]
    assert c.get("a") == "A"


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
    assert c.size() == 0 and c.is_empty() and c.get("a", "none") == "none" and c.get_stats().puts == 0
    assert bool(c) is True
    with pytest.raises(ValueError, match="maxsize"):
        kind(-1)


def test_none_is_a_storable_value(kind: type[PolicyCache]) -> None:
    c = kind(2, track_stats=True)
    c.put("k", None)
    assert c.contains("k")
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


# -- under contention, every policy ---------------------------------------------------------------


def test_threads_of_mixed_operations_keep_the_invariants(kind: type[PolicyCache]) -> None:
    """Gets, puts, peeks, loads and deletes from 16 threads, half of them over a skewed key space (a
    head asked for often: admission and aging at work) and half uniformly: no size over maxsize at
    any time, every lookup counted once, each value the one put, and the policy's invariants after."""
    maxsize, threads, ops = 100, 16, 10_000
    c = BUSY.get(kind, kind)(maxsize, track_stats=True)
    lookups = [0] * threads
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        rnd = random.Random(n)
        barrier.wait()
        try:
            for _ in range(ops):
                key = int(rnd.paretovariate(1.2)) % 1000 if n % 2 else rnd.randrange(1000)
                r = rnd.random()
                if r < 0.6:
                    value = c.get(key)
                    lookups[n] += 1
                    assert value is None or value == key * 2
                elif r < 0.85:
                    c.put(key, key * 2)
                elif r < 0.92:
                    entry = c.entry(key)
                    assert entry is None or entry.value == key * 2
                    c.contains(key)
                elif r < 0.97:
                    assert c.get_or_compute_sync(key, functools.partial(int, key * 2)) == key * 2
                    lookups[n] += 1
                else:
                    c.delete(key)
                assert len(c) <= maxsize
        except BaseException as exc:  # surfaced below: a thread's assert must fail the test
            errors.append(exc)

    ts = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    s = c.get_stats()
    assert s.current_size <= maxsize
    assert s.hits + s.misses == sum(lookups)  # a load is one lookup, as a get is
    invariants_hold(c)


async def test_a_burst_of_tasks_over_many_keys_computes_each_key_once(kind: type[PolicyCache]) -> None:
    c = kind(1000, track_stats=True)
    calls: Counter[int] = Counter()

    async def compute(k: int) -> int:
        calls[k] += 1
        await asyncio.sleep(0.001 * (k % 5))  # computations of different lengths, not a wait
        return k * 10

    keys = [k for k in range(50) for _ in range(40)]
    random.Random(3).shuffle(keys)
    results = await asyncio.gather(*(c.get_or_compute(k, functools.partial(compute, k)) for k in keys))
    assert results == [k * 10 for k in keys]
    assert set(calls.values()) == {1} and len(calls) == 50
    s = c.get_stats()
    assert s.misses == 50 and s.hits + s.misses == len(keys)
    assert s.load_success == 50
    invariants_hold(c)


def test_threads_with_their_own_loops_share_computations(kind: type[PolicyCache]) -> None:
    c = kind(100, track_stats=True)
    calls: Counter[int] = Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    async def compute(k: int) -> int:
        with lock:
            calls[k] += 1
        await asyncio.sleep(0.05)  # long enough that the other loops ask while it runs
        return -k

    results: list[object] = []  # per thread: its answers, or the exception it raised

    def worker() -> None:
        async def main() -> list[int]:
            barrier.wait()
            return await asyncio.gather(
                *(c.get_or_compute(k, functools.partial(compute, k)) for k in range(10))
            )

        try:
            results.append(asyncio.run(main()))
        except Exception as exc:  # reported below: an assert in a thread would only warn
            results.append(exc)

    ts = [threading.Thread(target=worker) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert results == [[-k for k in range(10)]] * 8
    assert set(calls.values()) == {1} and len(calls) == 10
    invariants_hold(c)


# -- any sequence of operations, every policy of the registry ------------------------------------------

ops = st.lists(
    st.tuples(
        st.sampled_from(["get", "get", "put", "put", "put", "load", "delete", "clear"]),
        st.integers(0, 40),
        st.integers(0, 99),
    ),
    min_size=30,  # long enough that a busy TinyLFU ages and climbs
    max_size=400,
)


@pytest.mark.parametrize("name", POLICY_NAMES)
@settings(max_examples=200, deadline=None)
@given(maxsize=st.integers(0, 12), busy=st.booleans(), operations=ops)
def test_invariants_hold_under_any_sequence_of_operations(
    name: str, maxsize: int, busy: bool, operations: list[tuple[str, int, int]]
) -> None:
    cls = cache_class(name)
    c = (BUSY.get(cls, cls) if busy else cls)(maxsize, track_stats=True)
    stored: dict[Hashable, int] = {}  # the last value put per key (the cache may hold fewer)
    deleted = cleared = 0
    for op, key, value in operations:
        if op == "get":
            got = c.get(key)
            assert got is None if key not in c else got == stored[key]
        elif op == "put":
            c.put(key, value)
            stored[key] = value
            assert maxsize == 0 or key in c  # a newcomer is in the cache until the next one
        elif op == "load":
            expected = stored[key] if key in c else value
            assert c.get_or_compute_sync(key, functools.partial(int, value)) == expected
            stored[key] = expected
        elif op == "delete":
            deleted += c.delete(key)
        else:
            cleared += len(c)
            c.clear()
        invariants_hold(c)
        for k in c.keys_in_eviction_order():
            entry = c.entry(k)
            assert entry is not None and entry.value == stored[k]
    s = c.get_stats()
    assert s.puts - s.evictions - deleted == len(c)  # clear() counts as evictions
    assert s.evictions >= cleared


# -- TinyLFU only: admission, aging, the window's climb ---------------------------------------------


def tinylfu_filled(maxsize: int) -> TinyLFUCache:
    c = TinyLFUCache(maxsize, track_stats=True)
    for i in range(maxsize):
        c.put(f"k{i}", i)
    return c


def test_a_one_off_key_does_not_displace_entries_asked_for_again() -> None:
    c = tinylfu_filled(10)  # window: k9; probation: k0..k8
    for _ in range(3):
        for i in range(9):
            assert c.get(f"k{i}") == i
    c.put("x", "x")  # the candidate k9 (asked for once) loses to main's victim (asked for 4 times)
    assert "k9" not in c and "x" in c
    c.put("y", "y")
    assert "x" not in c and "y" in c
    assert all(f"k{i}" in c for i in range(9))
    assert c.get_stats().evictions == 2 and len(c) == 10


def test_a_candidate_as_popular_as_the_victim_is_admitted() -> None:
    c = tinylfu_filled(10)
    for _ in range(3):
        for i in range(9):
            c.get(f"k{i}")
    c.put("z", "z")
    victim = c.keys_in_eviction_order()[0]  # probation's least asked-for entry

    def count(key: str) -> int:
        entry = c.entry(key)
        assert entry is not None
        return entry.frequency

    assert count("z") < count(victim)  # z starts from the sketch's estimate
    while count("z") < count(victim):
        c.get("z")
    assert count("z") == count(victim) == 4
    c.put("w", "w")  # z leaves the window on a tie: it is admitted, the victim goes
    assert "z" in c and victim not in c and "w" in c


def test_the_victim_is_the_least_asked_for_entry_of_probation() -> None:
    c = tinylfu_filled(10)
    for i in range(9):
        for _ in range(i % 3):
            c.get(f"k{i}")
    check_invariants(c)
    order = c.keys_in_eviction_order()
    p = tinylfu_policy(c)
    counts = [p.freq[p.index[k]] for k in order[: c.sizes().probation]]
    assert counts == sorted(counts)  # probation's victims come lowest count first


def test_counts_are_halved_every_sample_period_and_probation_stays_ordered() -> None:
    class Aging(TinyLFUPolicy):
        SAMPLE = 4.0  # 200 requests at 50 entries
        STEP = 0.0
        MAINTAIN_EVERY = 1

    class AgingCache(TinyLFUCache):
        policy_type: ClassVar[PolicyFactory] = Aging

    c = AgingCache(50)
    for i in range(50):
        c.put(i, i)
    for _ in range(12):
        c.get(7)
    assert c.entry(7).frequency == 13  # type: ignore[union-attr]
    for i in range(1000, 1200):  # one-off keys: 200 requests, one halving at least
        c.put(i, i)
        check_invariants(c)
    frequency = c.entry(7).frequency  # type: ignore[union-attr]
    assert 7 in c and frequency <= 6


def test_the_window_grows_for_traffic_that_repeats_within_a_short_while() -> None:
    class Quick(TinyLFUPolicy):
        MIN_PERIOD = 2000

    class QuickCache(TinyLFUCache):
        policy_type: ClassVar[PolicyFactory] = Quick

    rng = random.Random(1)
    c = QuickCache(200)
    first = c.sizes().window_max
    pending: list[tuple[int, int]] = []
    fresh = 10**9
    largest = 0
    for i in range(60_000):  # 30%: a new key asked for 4 times within a few hundred requests
        if pending and pending[0][0] <= i:
            key = heapq.heappop(pending)[1]
        elif rng.random() < 0.3:
            key = fresh
            fresh += 1
            at = i
            for _ in range(3):
                at += 1 + int(rng.expovariate(1 / 300))
                heapq.heappush(pending, (at, key))
        else:
            key = rng.randrange(100_000)
        if c.get(key) is None:
            c.put(key, True)
        largest = max(largest, c.sizes().window_max)
    check_invariants(c)
    assert first == 2 and largest > 200 // 4


def test_a_resize_moves_a_bounded_number_of_entries_at_a_time() -> None:
    class Shrinking(TinyLFUPolicy):
        WINDOW = 0.5  # 50 of 100
        STEP = 0.4  # the climber's first move: 40 entries smaller
        MIN_PERIOD = 100
        MAINTAIN_EVERY = 1
        TRANSFER = 5

    class ShrinkingCache(TinyLFUCache):
        policy_type: ClassVar[PolicyFactory] = Shrinking

    c = ShrinkingCache(100)
    for i in range(100):
        c.put(i, i)
    assert c.sizes()[::3] == (50, 50)  # (window, window_max)
    windows = []
    for i in range(100, 112):
        c.put(i, i)
        check_invariants(c, settled=False)
        windows.append(c.sizes().window)
    assert c.sizes().window_max == 10
    assert windows == [45, 40, 35, 30, 25, 20, 15, 10, 10, 10, 10, 10]  # 5 moves a check
    check_invariants(c)


# -- TinyLFU only: the climber ---------------------------------------------------------------------


def test_the_climber_keeps_going_while_it_pays_and_turns_round_when_it_does_not() -> None:
    climb = HillClimber(1000)  # first step: 62.5 entries
    assert climb.adjust(300, 700) == -62  # from nothing to 30%: a restart; the first move shrinks
    assert climb.adjust(310, 690) == 0  # the period after a move is not measured
    assert climb.adjust(320, 680) == -62  # 2 points better: the same way again...
    assert climb.adjust(0, 0) == 0
    assert climb.adjust(330, 670) == -93  # ...each step 1.5 times the last while it pays
    assert climb.adjust(1, 0) == 0
    assert climb.adjust(310, 690) == 140  # 2 points worse: turn round
    assert climb.adjust(1, 0) == 0
    assert climb.adjust(900, 100) == 137  # 59 points better: the traffic changed...
    assert climb.adjust(1, 0) == 0
    assert climb.adjust(905, 95) == 62  # ...so the climb restarts from the first step
    rate, moves = 905, []
    for _ in range(6):  # always better: the step grows to a quarter of the capacity, no more
        climb.adjust(1, 0)
        rate += 1
        moves.append(climb.adjust(rate, 1000 - rate))
    assert moves == [93, 140, 210, 250, 250, 250]


def test_the_first_period_may_be_empty() -> None:
    assert HillClimber(100).adjust(0, 0) == 0


# -- TinyLFU only: the sketch ----------------------------------------------------------------------


def test_sketch_counts_saturate_never_undercount_and_halve() -> None:
    sketch = FrequencySketch(64)
    rng = random.Random(3)
    truth: Counter[int] = Counter()
    for _ in range(3000):
        key = int(rng.paretovariate(1.1)) % 500
        truth[key] += 1
        sketch.increment(spread(key))
    for key, n in truth.items():
        assert min(n, CAP) <= sketch.estimate(spread(key)) <= CAP
    before = [sketch.estimate(spread(k)) for k in truth]
    sketch.halve()
    assert [sketch.estimate(spread(k)) for k in truth] == [b >> 1 for b in before]


def test_raise_to_lifts_a_keys_estimate_and_lowers_nothing() -> None:
    # int keys: their hashes are the same in every process (a str's is salted per process, and two
    # salted keys could share every counter of this small sketch in some runs)
    A, B, C = 1001, 1002, 1003
    sketch = FrequencySketch(16)
    for _ in range(5):
        sketch.increment(spread(A))
    others = {k: sketch.estimate(spread(k)) for k in range(100)}
    sketch.raise_to(spread(B), 9)
    assert sketch.estimate(spread(B)) == 9
    sketch.raise_to(spread(A), 2)
    assert sketch.estimate(spread(A)) == 5
    assert all(sketch.estimate(spread(k)) >= n for k, n in others.items())
    sketch.raise_to(spread(C), 99)
    assert sketch.estimate(spread(C)) == CAP


def test_the_caches_inlined_increment_counts_in_its_sketch() -> None:
    c = tinylfu_filled(64)  # sized once half full
    sketch = tinylfu_policy(c).sketch
    assert len(sketch.table) == 1024
    before = sketch.estimate(spread("new"))
    c.put("new", 1)
    assert sketch.estimate(spread("new")) == before + 1
    assert c.entry("new").frequency == before + 1  # type: ignore[union-attr]


def test_a_large_cache_that_stays_small_keeps_a_small_sketch() -> None:
    c = TinyLFUCache(1_000_000)
    for i in range(1000):
        c.put(i, i)
    assert len(tinylfu_policy(c).sketch.table) == 16


def test_a_policy_without_its_own_expiring_get_expires_through_the_generic_one() -> None:
    """The toy has no ``hot.expiring``: a ttl runs on guardcache.cache.expiry's ``get`` and the
    lookup of the single flight, on the policy's ``touch(i, now)``. Hits, misses, expirations and
    the deadlines are what the built-in policies' inlined paths give (tests/unit/test_cache_ttl.py)."""
    now = [1000.0]
    c = FIFOCache(8, ttl=60, clock=lambda: now[0])
    assert c.hot.get.__name__ == "expiring_get" and FIFOPolicy(8, threading.RLock()).hot.expiring is None
    c.put("k", "safe")
    now[0] += 59.999
    assert c.get("k") == "safe"
    assert asyncio.run(c.get_or_compute("k", lambda: "computed")) == "safe"  # the single flight's hit
    now[0] += 0.001
    assert c.get("k", "absent") == "absent"
    stats = c.get_stats()
    assert (stats.hits, stats.misses, stats.expirations) == (2, 1, 1) and len(c) == 0
    assert asyncio.run(c.get_or_compute("k", lambda: "judged again")) == "judged again"
    assert c._s.deadline is not None and c._s.deadline[c._s.index["k"]] == pytest.approx(now[0] + 60)
