"""Expiry (``cache.ttl``): an entry that old is a miss wherever it is looked up, is dropped and is
counted; without a ttl nothing changes, down to the hot path's identity and the clock never read.

Time is a :class:`FakeClock` the test moves by hand: no test sleeps or measures time.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from guardcache.cache import PolicyCache, make_cache
from guardcache.cache.stats import CacheStats
from guardcache.server.metrics import ServerMetrics
from tests.clocks import FakeClock

POLICIES = ["lfu", "tinylfu"]
TTL = 60.0


def no_clock() -> float:
    raise AssertionError("a cache without a ttl read the expiry clock")


def cache_of(policy: str, clock: FakeClock, maxsize: int = 8, ttl: float = TTL) -> PolicyCache:
    return make_cache(policy, maxsize, track_stats=True, ttl=ttl, clock=clock)


@pytest.mark.parametrize("policy", POLICIES)
def test_get_serves_an_entry_until_its_ttl_then_misses_drops_and_counts_it(policy: str) -> None:
    clock = FakeClock()
    cache = cache_of(policy, clock)
    cache.put(b"k", "safe")
    clock.advance(TTL - 0.001)
    assert cache.get(b"k") == "safe"  # one millisecond to live: still served
    clock.advance(0.001)
    assert cache.get(b"k", "absent") == "absent"  # ttl seconds old: a miss
    stats = cache.get_stats()
    assert (stats.hits, stats.misses, stats.expirations) == (1, 1, 1)
    assert len(cache) == 0 and not cache.contains(b"k")  # removed, not just hidden
    assert stats.evictions == 0 and stats.puts == 1  # not an eviction; the one put still counted
    assert cache.get(b"k") is None  # gone: a plain miss now, no second expiration
    assert cache.get_stats().expirations == 1


@pytest.mark.parametrize("policy", POLICIES)
def test_get_or_compute_computes_again_for_an_expired_entry(policy: str) -> None:
    clock = FakeClock()
    cache = cache_of(policy, clock)
    calls: list[str] = []

    def judge() -> str:
        calls.append("judged")
        return f"verdict {len(calls)}"

    async def ask() -> str:
        value: str = await cache.get_or_compute(b"k", judge)
        return value

    assert asyncio.run(ask()) == "verdict 1"
    clock.advance(TTL / 2)
    assert asyncio.run(ask()) == "verdict 1"  # a hit: the single flight's lookup
    clock.advance(TTL / 2)
    assert asyncio.run(ask()) == "verdict 2"  # expired: judged again
    assert calls == ["judged", "judged"]
    stats = cache.get_stats()
    assert (stats.hits, stats.misses, stats.expirations, stats.load_success) == (1, 2, 1, 2)
    # The new verdict's life starts when it was judged: a full ttl again.
    clock.advance(TTL - 0.001)
    assert cache.get(b"k") == "verdict 2"
    assert cache.get_or_compute_sync(b"k", judge) == "verdict 2"
    clock.advance(0.001)
    assert cache.get_or_compute_sync(b"k", judge) == "verdict 3"
    assert cache.get_stats().expirations == 2


@pytest.mark.parametrize("policy", POLICIES)
def test_entry_and_contains_see_no_expired_entry_and_count_it(policy: str) -> None:
    clock = FakeClock()
    cache = cache_of(policy, clock)
    cache.put(b"a", 1)
    cache.put(b"b", 2)
    entry = cache.entry(b"a")
    assert entry is not None and entry.value == 1
    assert cache.contains(b"b") and b"b" in cache
    clock.advance(TTL)
    assert cache.entry(b"a") is None
    assert not cache.contains(b"b")
    assert b"b" not in cache
    stats = cache.get_stats()
    # entry() and contains() are not lookups: no hit or miss, but the expirations are counted.
    assert (stats.hits, stats.misses, stats.expirations, stats.current_size) == (0, 0, 2, 0)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_put_restarts_an_entrys_life(policy: str) -> None:
    clock = FakeClock()
    cache = cache_of(policy, clock)
    cache.put(b"k", "old")
    clock.advance(TTL - 1)
    cache.put(b"k", "new")  # an update: judged again now
    clock.advance(TTL - 1)
    assert cache.get(b"k") == "new"
    clock.advance(1)
    assert cache.get(b"k") is None
    assert cache.get_stats().updates == 1


@pytest.mark.parametrize("policy", POLICIES)
def test_a_verdict_judged_elsewhere_keeps_the_life_it_has_left(policy: str) -> None:
    """What a shared tier fills in: ``remaining`` seconds left, never more than the ttl."""
    clock = FakeClock()
    cache = cache_of(policy, clock)
    cache.put_expiring(b"short", "v", 10.0)
    cache.put_expiring(b"long", "v", 10 * TTL)  # the other tier's clock is no reason to live longer
    clock.advance(10.0 - 0.001)
    assert cache.get(b"short") == "v"
    clock.advance(0.001)
    assert cache.get(b"short") is None
    clock.advance(TTL - 10.0 - 0.001)
    assert cache.get(b"long") == "v"
    clock.advance(0.001)
    assert cache.get(b"long") is None

    async def load() -> str:
        cache.expire_load_after(b"loaded", 5.0)  # as the tier does on a Redis hit, before returning
        return "from redis"

    assert asyncio.run(cache.get_or_compute(b"loaded", load)) == "from redis"
    clock.advance(5.0 - 0.001)
    assert cache.get(b"loaded") == "from redis"
    clock.advance(0.001)
    assert cache.get(b"loaded") is None
    assert cache.get_stats().expirations == 3


@pytest.mark.parametrize("policy", POLICIES)
def test_the_stats_line_is_the_seeds_with_expiry_on(policy: str, caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    cache = cache_of(policy, clock)
    cache.put(b"k", 1)
    clock.advance(TTL)
    assert cache.get(b"k") is None
    with caplog.at_level(logging.INFO, logger="guardcache.cache.lfu"):
        cache.log_stats_now()
    name = "LFU" if policy == "lfu" else "TinyLFU"
    assert caplog.messages == [
        f"{name} Cache Statistics - Size: 0/8 | Hits: 0 | Misses: 1 | Hit Rate: 0.00% | "
        "Evictions: 0 | Puts: 1 | Updates: 0"
    ]
    assert cache.get_stats().expirations == 1  # counted, just not on the line


@pytest.mark.parametrize("policy", POLICIES)
def test_without_a_ttl_nothing_expires_and_no_clock_is_read(policy: str) -> None:
    cache = make_cache(policy, 8, track_stats=True, clock=no_clock)
    policy_hot = cache._s.hot
    # Today's hot path exactly: the policy's own closures, no wrapper around them.
    assert cache.hot is policy_hot and cache.get is policy_hot.get and cache.put is policy_hot.put
    assert cache.ttl is None
    cache.put(b"k", 1)
    cache.put(b"k", 2)
    cache.put_expiring(b"j", 3, remaining=0.0)  # no ttl: a plain put, nothing to expire
    assert cache.get(b"k") == 2 and cache.get(b"j") == 3
    assert asyncio.run(cache.get_or_compute(b"k", lambda: 99)) == 2
    assert asyncio.run(cache.get_or_compute(b"new", lambda: 4)) == 4
    assert cache.get_or_compute_sync(b"new", lambda: 99) == 4
    entry = cache.entry(b"k")
    assert entry is not None and entry.value == 2
    assert cache.contains(b"j") and b"j" in cache
    assert cache.get_stats().expirations == 0


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("ttl", [0, -1.0, math.nan])
def test_a_ttl_that_is_no_lifetime_is_refused(policy: str, ttl: float) -> None:
    with pytest.raises(ValueError, match=r"ttl must be > 0 seconds"):
        make_cache(policy, 8, ttl=ttl)


@pytest.mark.parametrize("policy", POLICIES)
def test_an_expiring_cache_orders_and_counts_live_entries_as_a_plain_one(policy: str) -> None:
    """The wrapped paths change nothing but expiry: the same operations on a cache whose entries
    never get old leave the same eviction order and the same counters as without a ttl."""
    clock = FakeClock()
    plain = make_cache(policy, 16, track_stats=True)
    expiring = cache_of(policy, clock, maxsize=16, ttl=1e9)
    for i in range(400):
        key = (i * 7919) % 53
        for cache in (plain, expiring):
            if i % 3:
                cache.get(key)
            else:
                cache.put(key, i)
        clock.advance(1.0)
    assert expiring.keys_in_eviction_order() == plain.keys_in_eviction_order()
    assert expiring.get_stats() == plain.get_stats()


def test_expirations_reach_metrics() -> None:
    clock = FakeClock()
    cache = cache_of("lfu", clock)
    metrics = ServerMetrics(lambda: {"c": {"content_safety": cache}})
    cache.put(b"k", 1)
    clock.advance(TTL)
    cache.get(b"k")
    text = generate_latest(metrics.registry).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    labels = (("config", "c"), ("model", "content_safety"))
    assert samples[("guardcache_cache_expirations_total", labels)] == 1


def test_stats_add_and_subtract_expirations() -> None:
    a = CacheStats(hits=1, expirations=2)
    b = CacheStats(hits=3, expirations=5)
    assert (b - a).expirations == 3 and (a + b).expirations == 7
    assert a["expirations"] == a.expirations == 2


@pytest.mark.parametrize("clocked", [True, False], ids=["test clock", "slots' clock"])
@pytest.mark.parametrize("policy", POLICIES)
def test_every_entry_keeps_its_deadline_through_puts_evictions_reuse_and_clear(
    policy: str, clocked: bool
) -> None:
    """The deadline column (what a hit reads) stays as long as the table and, for every entry, is
    its stamp plus the ttl: whichever way the policy grew its table (inline or through ``grow``),
    reused a slot, replaced a value or aged a load."""
    clock = FakeClock()
    cache = make_cache(policy, 16, ttl=TTL, clock=clock) if clocked else make_cache(policy, 16, ttl=TTL)
    s = cache._s  # the table under test
    rng = random.Random(7)
    for step in range(3000):
        key = rng.randrange(60)
        op = rng.random()
        if op < 0.5:
            cache.put(key, step)
        elif op < 0.8:
            cache.get(key)
        elif op < 0.9:
            cache.put_expiring(key, step, remaining=rng.uniform(0, TTL))
        elif op < 0.98:
            cache.delete(key)
        else:
            cache.clear()
        clock.advance(rng.uniform(0, 2))
        deadline = s.deadline
        assert deadline is not None and len(deadline) == len(s.keys)
        for i in s.index.values():
            assert deadline[i] == pytest.approx(s.created[i] + TTL, abs=1e-9)
