"""benchmarks/policy_traces.py and benchmarks/policy_sims.py, the yardsticks of bench_policy.py.

The benchmark's verdict is only as good as its traces and reference simulators: the traces must be
reproducible per seed and have the shape their docstrings claim; the simulators must be right on
hand-computed cases, and Belady's optimum must never lose to a policy. Imported as
``benchmarks.*``: pytest puts the repository root on ``sys.path`` (``tests`` is a package), and the
two modules import nothing but the standard library. Kept small: well under two seconds.
"""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks import policy_traces as pt
from benchmarks.policy_sims import LRU, Belady, FrequencySketch, LFUAging, WTinyLFU, next_uses
from guardcache.cache import LFUCache

N = 20_000  # requests per generated trace here


# -- traces ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(pt.TRACES))
def test_a_trace_is_a_function_of_its_seed(name: str) -> None:
    a = pt.make(name, N, seed=7)
    assert a == pt.make(name, N, seed=7)
    assert a != pt.make(name, N, seed=8)
    assert len(a) == N and a.typecode == "q"


def test_zipf_has_a_head_and_a_long_tail() -> None:
    counts = Counter(pt.zipf(N, seed=1))
    assert counts.most_common(1)[0][0] == 0  # rank 0 is the most popular key
    top = sum(c for _, c in counts.most_common(1_000))
    assert 0.30 < top / N < 0.40  # ~35% of requests on the top 1,000 (s = 0.9, 1M prompts)
    assert sum(1 for c in counts.values() if c == 1) / N > 0.2  # and many prompts seen once


def test_shift_moves_every_request_to_new_keys_halfway() -> None:
    trace = pt.shift(N, seed=1)
    first, second = trace[: N // 2], trace[N // 2 :]
    assert all(k < pt.UNIVERSE for k in first)
    assert all(pt.SHIFTED <= k < pt.SHIFTED + pt.UNIVERSE for k in second)
    assert not set(first) & set(second)


def test_scan_makes_30_percent_of_requests_one_off_prompts() -> None:
    trace = pt.scan(N, seed=1)
    scans = [k for k in trace if k >= pt.FRESH]
    assert len(scans) == int(0.3 * N)
    assert len(set(scans)) == len(scans)  # each once
    once = sum(1 for c in Counter(trace).values() if c == 1)
    assert once / N >= 0.3


def test_campaign_prompts_come_in_bursts_and_vanish() -> None:
    trace = pt.campaign(N, seed=1)
    fresh = [i for i, k in enumerate(trace) if k >= pt.FRESH]
    span = int(N * 0.08)
    assert 0.25 < len(fresh) / (5 * span) < 0.35  # 30% of the campaigns' requests
    by_campaign: dict[int, list[int]] = {}
    for i in fresh:
        by_campaign.setdefault((trace[i] - pt.FRESH) // 5_000, []).append(i)
    assert sorted(by_campaign) == [0, 1, 2, 3, 4]
    windows = [(min(pos), max(pos)) for _, pos in sorted(by_campaign.items())]
    for (_, end), (start, _) in pairwise(windows):
        assert end < start  # one campaign's prompts are gone before the next starts
    assert all(end - start < span for start, end in windows)


def test_drift_replaces_the_popular_prompts_over_time() -> None:
    trace = pt.drift(N, seed=1)
    tenth = N // 10
    early, late = trace[:tenth], trace[-tenth:]
    original_head = sum(1 for k in early if k < 50_000), sum(1 for k in late if k < 50_000)
    assert original_head[1] < 0.2 * original_head[0]  # ~95% of the head is replaced by the end
    assert not any(k >= pt.FRESH for k in early[: N // 100])  # the first epoch is the original
    assert sum(1 for k in late if k >= pt.FRESH) > 0.5 * tenth  # new prompts took over the head


def test_make_rejects_an_unknown_trace() -> None:
    with pytest.raises(ValueError, match="unknown trace"):
        pt.make("nope", 10)


# -- simulators: hand-computed cases ----------------------------------------------------------------


def test_lru_by_hand() -> None:
    # capacity 2: 1 2 miss; 1 hit; 3 evicts 2; 2 evicts 1; 1 evicts 3
    assert LRU(2).run([1, 2, 1, 3, 2, 1]) == 1


def test_lfu_by_hand_keeps_the_frequent_key() -> None:
    # capacity 2: 1 counts 3; 2 and 3 then fight over the other place, 1 always hits
    assert LFUAging(2, period=None).run([1, 1, 1, 2, 3, 2, 3, 1]) == 3


def test_aging_forgets_what_plain_lfu_never_does() -> None:
    trace = [1] * 10 + [2, 3] * 50  # key 1 was popular once; then 2 and 3 alternate
    plain, aging = LFUAging(2, period=None), LFUAging(2, period=8)
    assert plain.run(trace) == 9  # 2 and 3 evict each other forever behind 1's count
    assert aging.run(trace) > 80  # 1's count halves to 0, it goes, 2 and 3 both stay
    assert len(aging) == 2


def test_belady_by_hand() -> None:
    # capacity 2: 3 is never used again, so it is not kept; 1 and 2 then hit
    assert Belady(2, [1, 2, 3, 1, 2]).run([1, 2, 3, 1, 2]) == 2
    assert LRU(2).run([1, 2, 3, 1, 2]) == 0
    # evict the farthest next use: at 3, 1 is next used at 5 and 2 at 4, so 1 goes
    trace = [1, 2, 3, 2, 3, 1]
    assert Belady(2, trace).run(trace) == 2


def test_next_uses_by_hand() -> None:
    assert list(next_uses([5, 6, 5, 5, 7])) == [2, 5, 3, 5, 5]


def test_wtinylfu_keeps_its_working_set_through_a_scan() -> None:
    hot = list(range(50)) * 10
    trace = hot + list(range(1_000, 3_000)) + list(range(50))
    w, lru = WTinyLFU(100), LRU(100)
    w.run(trace[:-50]), lru.run(trace[:-50])
    assert w.run(trace[-50:]) >= 49  # the one-offs lost every duel (the window holds one)
    assert lru.run(trace[-50:]) == 0  # LRU let the scan flush them
    assert len(w) == 100


def test_sketch_counts_saturate_at_15_and_halve() -> None:
    sk = FrequencySketch(64)
    for _ in range(20):
        sk.increment(42)
    assert sk.frequency(42) == 15
    assert sk.frequency(43) <= 15  # a collision may count, never above 15
    sk.reset()
    assert sk.frequency(42) == 7
    other = FrequencySketch(64)  # aging: after 10x capacity increments the table halves
    for _ in range(10):
        other.increment(-1)
    for k in range(other.sample_size - 10):
        other.increment(k)
    assert other.frequency(-1) < 10
    assert other.size < other.sample_size // 2 + 10


# -- simulators: properties -----------------------------------------------------------------------

traces = st.lists(st.integers(0, 30), min_size=0, max_size=300)
capacities = st.integers(1, 12)


@settings(max_examples=40, deadline=None)
@given(traces, capacities)
def test_belady_is_never_beaten(trace: list[int], cap: int) -> None:
    best = Belady(cap, trace).run(trace)
    for sim in (LRU(cap), LFUAging(cap, period=None), LFUAging(cap, period=5), WTinyLFU(cap)):
        assert sim.run(trace) <= best


@settings(max_examples=40, deadline=None)
@given(traces, capacities)
def test_no_simulator_exceeds_its_capacity(trace: list[int], cap: int) -> None:
    sims = [LRU(cap), LFUAging(cap), WTinyLFU(cap), Belady(cap, trace)]
    for i in range(0, len(trace), 7):
        for sim in sims:
            sim.run(trace[i : i + 7])
            assert len(sim) <= cap


@settings(max_examples=40, deadline=None)
@given(traces, capacities, st.integers(0, 300))
def test_replaying_in_slices_is_replaying_at_once(trace: list[int], cap: int, cut: int) -> None:
    # bench_policy counts the last 100,000 requests apart by replaying two slices
    for make in (LRU, LFUAging, WTinyLFU, lambda c: Belady(c, trace)):
        whole, parts = make(cap), make(cap)
        assert whole.run(trace) == parts.run(trace[:cut]) + parts.run(trace[cut:])


@settings(max_examples=40, deadline=None)
@given(traces, capacities)
def test_plain_lfu_is_guardcaches_lfu(trace: list[int], cap: int) -> None:
    cache = LFUCache(cap)
    hits = 0
    for k in trace:
        if cache.get(k) is None:
            cache.put(k, True)
        else:
            hits += 1
    assert LFUAging(cap, period=None).run(trace) == hits
