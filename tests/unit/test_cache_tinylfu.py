"""TinyLFU: the policy's invariants under random operations, admission, aging, the window's climb,
the sketch, and concurrency. (What every policy does alike is in test_cache_policy.py.)"""

from __future__ import annotations

import asyncio
import functools
import heapq
import random
import threading
from collections import Counter
from collections.abc import Hashable
from typing import ClassVar

from hypothesis import given, settings
from hypothesis import strategies as st

from guardcache.cache import TinyLFUCache
from guardcache.cache.climber import HillClimber
from guardcache.cache.policy import PolicyFactory
from guardcache.cache.sketch import CAP, FrequencySketch, spread
from guardcache.cache.tinylfu import PROBATION, PROTECTED, WINDOW, TinyLFUPolicy

QUEUES = PROBATION + CAP + 1


class BusyPolicy(TinyLFUPolicy):
    """Ages, climbs and checks on a small scale, so a few hundred operations go through all of it."""

    SAMPLE = 3.0
    MIN_PERIOD = 16
    CLIMB_PERIOD = 2.0
    STEP = 0.25
    MAINTAIN_EVERY = 1


class BusyCache(TinyLFUCache):
    policy_type: ClassVar[PolicyFactory] = BusyPolicy


def policy(c: TinyLFUCache) -> TinyLFUPolicy:
    p = c._s
    assert isinstance(p, TinyLFUPolicy)
    return p


def check_invariants(c: TinyLFUCache, *, settled: bool = True) -> None:
    """Every ring well linked; each entry in exactly one queue, probation's by its count; the sizes
    add up and (``settled``: no resize being worked off) stay within their limits."""
    p = policy(c)
    sizes = c.sizes()
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


ops = st.lists(
    st.tuples(
        st.sampled_from(["get", "get", "put", "put", "put", "load", "delete", "clear"]),
        st.integers(0, 40),
        st.integers(0, 99),
    ),
    min_size=30,  # long enough that a busy cache ages and climbs
    max_size=400,
)


@settings(max_examples=200, deadline=None)
@given(maxsize=st.integers(0, 12), busy=st.booleans(), operations=ops)
def test_invariants_hold_under_any_sequence_of_operations(
    maxsize: int, busy: bool, operations: list[tuple[str, int, int]]
) -> None:
    c = (BusyCache if busy else TinyLFUCache)(maxsize, track_stats=True)
    stored: dict[Hashable, int] = {}  # the last value put per key (the cache may hold fewer)
    deleted = cleared = 0
    for op, key, value in operations:
        if op == "get":
            got = c.get(key)
            assert got is None if key not in c else got == stored[key]
        elif op == "put":
            c.put(key, value)
            stored[key] = value
            assert maxsize == 0 or key in c  # a newcomer is in the window until the next one
        elif op == "load":
            expected = stored[key] if key in c else value
            assert c.get_or_compute_sync(key, functools.partial(int, value)) == expected
            stored[key] = expected
        elif op == "delete":
            deleted += c.delete(key)
        else:
            cleared += len(c)
            c.clear()
        check_invariants(c)
        for k in policy(c).index:
            entry = c.entry(k)
            assert entry is not None and entry.value == stored[k]
    s = c.get_stats()
    assert s.puts - s.evictions - deleted == len(c)  # clear() counts as evictions
    assert s.evictions >= cleared


def filled(maxsize: int) -> TinyLFUCache:
    c = TinyLFUCache(maxsize, track_stats=True)
    for i in range(maxsize):
        c.put(f"k{i}", i)
    return c


def test_a_one_off_key_does_not_displace_entries_asked_for_again() -> None:
    c = filled(10)  # window: k9; probation: k0..k8
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
    c = filled(10)
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
    c = filled(10)
    for i in range(9):
        for _ in range(i % 3):
            c.get(f"k{i}")
    check_invariants(c)
    order = c.keys_in_eviction_order()
    p = policy(c)
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


# -- the climber ------------------------------------------------------------------------------------


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


# -- the sketch -------------------------------------------------------------------------------------


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
    c = filled(64)  # sized once half full
    sketch = policy(c).sketch
    assert len(sketch.table) == 1024
    before = sketch.estimate(spread("new"))
    c.put("new", 1)
    assert sketch.estimate(spread("new")) == before + 1
    assert c.entry("new").frequency == before + 1  # type: ignore[union-attr]


def test_a_large_cache_that_stays_small_keeps_a_small_sketch() -> None:
    c = TinyLFUCache(1_000_000)
    for i in range(1000):
        c.put(i, i)
    assert len(policy(c).sketch.table) == 16


# -- concurrency --------------------------------------------------------------------------------------


def test_threads_of_mixed_operations_keep_the_invariants() -> None:
    maxsize, threads, ops_each = 100, 8, 4000
    c = BusyCache(maxsize, track_stats=True)
    lookups = [0] * threads
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        rnd = random.Random(n)
        barrier.wait()
        try:
            for _ in range(ops_each):
                key = int(rnd.paretovariate(1.2)) % 600
                r = rnd.random()
                if r < 0.6:
                    value = c.get(key)
                    lookups[n] += 1
                    assert value is None or value == key * 2
                elif r < 0.9:
                    c.put(key, key * 2)
                elif r < 0.97:
                    assert c.get_or_compute_sync(key, functools.partial(int, key * 2)) == key * 2
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
    check_invariants(c)
    s = c.get_stats()
    assert s.hits + s.misses >= sum(lookups)  # and the loads' own lookups


async def test_a_burst_of_tasks_over_many_keys_computes_each_key_once() -> None:
    c = TinyLFUCache(1000, track_stats=True)
    calls: Counter[int] = Counter()

    async def compute(key: int) -> int:
        calls[key] += 1
        await asyncio.sleep(0.001)
        return key

    keys = [random.Random(5).randrange(50) for _ in range(500)]
    results = await asyncio.gather(*(c.get_or_compute(k, functools.partial(compute, k)) for k in keys))
    assert results == keys
    assert set(calls.values()) == {1} and len(calls) == len(set(keys))
    assert c.get_stats().load_success == len(set(keys))
    check_invariants(c)
