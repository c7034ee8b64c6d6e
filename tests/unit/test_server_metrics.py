"""The /metrics numbers of caches are read from ``get_stats()`` at scrape time: the same numbers as
the stats line, however the cache was used."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from guardcache.cache import LFUCache, TinyLFUCache
from guardcache.checks.verdict import RailResult
from guardcache.llm.records import ExplainInfo, LLMCallInfo
from guardcache.rails.turn import CheckResult, TurnInfo
from guardcache.server.metrics import ServerMetrics


def scrape(metrics: ServerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.parametrize("policy", [LFUCache, TinyLFUCache], ids=["lfu", "tinylfu"])
def test_cache_numbers_are_the_caches_own_at_scrape_time(policy: type[LFUCache] | type[TinyLFUCache]) -> None:
    cache = policy(2, track_stats=True)
    metrics = ServerMetrics(lambda: {"c": {"content_safety": cache}})
    labels = (("config", "c"), ("model", "content_safety"))
    assert scrape(metrics)[("guardcache_cache_hits_total", labels)] == 0
    cache.put(b"a", 1)
    cache.get(b"a")
    cache.get(b"b")
    cache.put(b"b", 2)
    cache.put(b"c", 3)  # evicts

    async def coalesce() -> None:
        gate = asyncio.Event()

        async def compute() -> int:
            await gate.wait()
            return 4

        waiters = [asyncio.create_task(cache.get_or_compute(b"d", compute)) for _ in range(3)]
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(*waiters)

    asyncio.run(coalesce())
    stats = cache.get_stats()
    got = scrape(metrics)
    for name in ("hits", "misses", "coalesced", "evictions", "puts", "updates"):
        assert got[(f"guardcache_cache_{name}_total", labels)] == stats[name], name
    assert got[("guardcache_cache_current_size", labels)] == stats["current_size"]
    assert got[("guardcache_cache_maxsize", labels)] == 2
    assert got[("guardcache_cache_hit_rate", labels)] == stats["hit_rate"]
    assert stats["coalesced"] == 2
    assert got[("guardcache_cache_load_success_total", labels)] == stats["load_success"] == 1
    assert got[("guardcache_cache_load_failure_total", labels)] == stats["load_failure"] == 0
    assert got[("guardcache_cache_load_seconds_total", labels)] == stats["total_load_time"] > 0

    async def fail() -> None:
        async def boom() -> int:
            raise RuntimeError("backend down")

        assert await cache.get_or_compute(b"e", boom, default=None) is None

    asyncio.run(fail())
    assert scrape(metrics)[("guardcache_cache_load_failure_total", labels)] == 1


def test_a_turn_is_counted_from_its_record() -> None:
    metrics = ServerMetrics(dict)
    explain = ExplainInfo()
    explain.add(LLMCallInfo("check_in", 0.0001, 1, 1, 2, 0, True))
    explain.add(LLMCallInfo("general", 0.2, 1, 1, 2, 0, False))
    explain.add(LLMCallInfo("general", 0.1, 0, 0, 0, 0, False, cancelled=True))
    turn = TurnInfo(
        explain,
        CheckResult(
            (RailResult("in", True, from_cache=True),),
            (RailResult("out", False, error="BackendTimeoutError: no answer"),),
        ),
    )
    metrics.observe_turn("c", turn, mode="plain", outcome="blocked_output", seconds=0.3)
    got = scrape(metrics)

    def one(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted(labels.items())))]

    assert (
        one(
            "guardcache_checks_total",
            config="c",
            rail="in",
            direction="input",
            verdict="allowed",
            cached="true",
            kind="message",
        )
        == 1
    )
    assert (
        one(
            "guardcache_checks_total",
            config="c",
            rail="out",
            direction="output",
            verdict="blocked",
            cached="false",
            kind="message",
        )
        == 1
    )
    assert one("guardcache_check_errors_total", config="c", rail="out", kind="BackendTimeoutError") == 1
    assert one("guardcache_backend_errors_total", config="c", target="out", kind="BackendTimeoutError") == 1
    assert (
        one("guardcache_backend_call_seconds_count", config="c", task="general", source="backend") == 1
    )  # not the cancelled one
    assert one("guardcache_backend_call_seconds_count", config="c", task="check_in", source="cache") == 1
    assert one("guardcache_turn_seconds_count", config="c", mode="plain", outcome="blocked_output") == 1


def test_turn_histograms_expose_what_prometheus_clients_histogram_would() -> None:
    """The tallies replace prometheus_client's Histogram (a lock and a label child per update):
    the same observations must give the same exposition, boundaries included (``le`` is
    inclusive)."""
    from prometheus_client import CollectorRegistry, Histogram

    from guardcache.server.metrics import LATENCY_BUCKETS

    reference = CollectorRegistry()
    histogram = Histogram(
        "guardcache_turn_seconds",
        "x",
        ["config", "mode", "outcome"],
        buckets=LATENCY_BUCKETS,
        registry=reference,
    )
    metrics = ServerMetrics(dict)
    seconds = [0.0005, 0.0007, 0.001, 0.3, 0.3, 2.5, 45.0, 0.0]
    for value in seconds:
        metrics.observe_failed_turn("c", "plain", "error", value)
        histogram.labels("c", "plain", "error").observe(value)
    mine = {k: v for k, v in scrape(metrics).items() if k[0].startswith("guardcache_turn_seconds")}
    text = generate_latest(reference).decode()
    theirs = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.name.endswith("_created")
    }
    assert mine == theirs
    assert (
        mine[("guardcache_turn_seconds_count", (("config", "c"), ("mode", "plain"), ("outcome", "error")))]
        == 8
    )


def test_requests_in_flight_is_the_servers_own_count_at_scrape_time() -> None:
    in_flight = [3]
    metrics = ServerMetrics(dict, lambda: in_flight[0])
    assert scrape(metrics)[("guardcache_requests_in_flight", ())] == 3
    in_flight[0] = 0
    assert scrape(metrics)[("guardcache_requests_in_flight", ())] == 0
