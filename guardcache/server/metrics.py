"""Prometheus metrics of ``guardcache serve`` (``GET /metrics``).

Two sources, never a second bookkeeping of the same thing:

- **Caches** are read at scrape time by :class:`CacheCollector`: ``get_stats()`` of every model cache
  (the numbers of the ``LFU Cache Statistics`` log line) and ``tier_stats()`` of a Redis tier (the
  ``Redis Tier Statistics`` line). Nothing is counted twice, so nothing can drift.
- **Turns** are observed once each, when the turn ends, from its own record (the ``TurnInfo`` a
  ``GuardedStream`` holds): checks by rail and verdict, backend-call latency by task, check errors
  by kind, the turn's latency and outcome. Requests in flight are a gauge the middleware moves.

Metrics are per process: with ``--workers N`` each worker answers a scrape with its own numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from guardcache.cache import CacheInterface

#: metric name (``guardcache_cache_<name>_total``) -> (key of ``get_stats()``, help)
CACHE_COUNTERS = {
    "hits": ("hits", "Lookups served without a backend call of their own (coalesced askers included)."),
    "misses": ("misses", "Lookups that computed the value (a backend call)."),
    "coalesced": ("coalesced", "Askers that joined an in-flight computation (also counted as hits)."),
    "evictions": ("evictions", "Entries evicted to make room."),
    "puts": ("puts", "Entries stored."),
    "updates": ("updates", "Stored entries replaced."),
    "load_success": ("load_success", "Computations on a miss that produced a value (stored)."),
    "load_failure": (
        "load_failure",
        "Computations on a miss that failed or were cancelled (nothing stored).",
    ),
    "load_seconds": (
        "total_load_time",
        "Seconds spent in computations on a miss, successful or not (with a Redis tier: the "
        "Redis lookup, lease and backend call of each in-process miss).",
    ),
}
CACHE_GAUGES = {
    "current_size": "Entries in the cache.",
    "maxsize": "The cache's capacity (entries).",
    "hit_rate": "hits / (hits + misses) since start (or the last reset).",
}
NOT_TIER_COUNTERS = frozenset({"circuit_open", "global_stats", "fetched_at"})

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BACKEND_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)


class CacheCollector(Collector):
    """Reads every model cache of every config at scrape time."""

    def __init__(self, caches: Callable[[], Mapping[str, Mapping[str, CacheInterface]]]) -> None:
        self._caches = caches  # config id -> model type -> cache

    def collect(self) -> Iterator[Metric]:
        labels = ["config", "model"]
        counters = {
            key: CounterMetricFamily(f"guardcache_cache_{name}", text, labels=labels)
            for name, (key, text) in CACHE_COUNTERS.items()
        }
        gauges = {
            name: GaugeMetricFamily(f"guardcache_cache_{name}", text, labels=labels)
            for name, text in CACHE_GAUGES.items()
        }
        tier: dict[str, CounterMetricFamily] = {}
        circuit = GaugeMetricFamily(
            "guardcache_redis_circuit_open",
            "1 while the Redis tier's circuit breaker skips Redis.",
            labels=labels,
        )
        for config_id, caches in self._caches().items():
            for model, cache in caches.items():
                values = [config_id, model]
                stats = cache.get_stats()
                for name, family in counters.items():
                    if isinstance(stats.get(name), int | float):
                        family.add_metric(values, stats[name])
                for name, gauge in gauges.items():
                    if isinstance(stats.get(name), int | float):
                        gauge.add_metric(values, stats[name])
                tier_stats = getattr(cache, "tier_stats", None)
                if tier_stats is None:
                    continue
                for name, value in _fields(tier_stats()).items():
                    if name in NOT_TIER_COUNTERS:
                        if name == "circuit_open":
                            circuit.add_metric(values, float(bool(value)))
                        continue
                    if isinstance(value, int) and not isinstance(value, bool):
                        if name not in tier:
                            tier[name] = CounterMetricFamily(
                                f"guardcache_redis_tier_{name}",
                                f"Redis tier: {name.replace('_', ' ')} (tier_stats()).",
                                labels=labels,
                            )
                        tier[name].add_metric(values, value)
        yield from counters.values()
        yield from gauges.values()
        yield from tier.values()
        if circuit.samples:
            yield circuit


def _fields(stats: Any) -> dict[str, Any]:
    if hasattr(stats, "as_dict"):
        return dict(stats.as_dict())
    if dataclasses.is_dataclass(stats) and not isinstance(stats, type):
        return {f.name: getattr(stats, f.name) for f in dataclasses.fields(stats)}
    return dict(stats) if isinstance(stats, Mapping) else {}


class ServerMetrics:
    """The registry served on ``/metrics`` and the per-turn instruments."""

    def __init__(self, caches: Callable[[], Mapping[str, Mapping[str, CacheInterface]]]) -> None:
        disable_created_metrics()  # no *_created series: they double a scrape for nothing here
        self.registry = CollectorRegistry()
        self.registry.register(CacheCollector(caches))
        r = self.registry
        self.checks = Counter(
            "guardcache_checks",
            "Rail checks run, by rail, direction and verdict (allowed/blocked); a streamed answer "
            "checked in windows counts one check per window.",
            ["config", "rail", "direction", "verdict", "cached"],
            registry=r,
        )
        self.check_errors = Counter(
            "guardcache_check_errors",
            "Checks that got no verdict (decided by on_error or blocked), by rail and error kind.",
            ["config", "rail", "kind"],
            registry=r,
        )
        self.backend_latency = Histogram(
            "guardcache_backend_call_seconds",
            "LLM calls of turns, by task (a rail's prompt task, or 'general' for the main model) and "
            "whether the cache served them (source=cache: the lookup time).",
            ["config", "task", "source"],
            buckets=BACKEND_BUCKETS,
            registry=r,
        )
        self.backend_errors = Counter(
            "guardcache_backend_errors",
            "Backend calls that failed, by target (a rail, or 'main') and error kind.",
            ["config", "target", "kind"],
            registry=r,
        )
        self.turn_latency = Histogram(
            "guardcache_turn_seconds",
            "Guarded turns, from the request to the last byte of the answer, by mode and outcome.",
            ["config", "mode", "outcome"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.first_token = Histogram(
            "guardcache_time_to_first_piece_seconds",
            "Streamed turns: from the request to the first text sent.",
            ["config"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "guardcache_requests_in_flight", "Chat completion requests being served.", registry=r
        )
        self.rejected = Counter(
            "guardcache_requests_rejected",
            "Requests refused before any rail ran, by reason (auth, body_too_large, overloaded, invalid, "
            "unknown_config).",
            ["reason"],
            registry=r,
        )
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def observe_turn(
        self,
        config_id: str,
        turn: Any,
        *,
        mode: str,
        outcome: str,
        seconds: float,
        first_piece: float | None = None,
    ) -> None:
        """Count one finished turn from its record (``TurnInfo``)."""
        child = self._child
        checks = turn.checks
        for direction, results in (("input", checks.input), ("output", checks.output)):
            for result in results:
                verdict = "allowed" if result.allowed else "blocked"
                cached = "true" if result.from_cache else "false"
                child(self.checks, config_id, result.flow, direction, verdict, cached).inc()
                if result.error is not None:
                    kind = result.error.split(":", 1)[0]
                    child(self.check_errors, config_id, result.flow, kind).inc()
                    if kind.startswith("Backend"):
                        child(self.backend_errors, config_id, result.flow, kind).inc()
        for call in turn.explain.llm_calls:
            if call.cancelled:
                continue
            source = "cache" if call.from_cache else "backend"
            child(self.backend_latency, config_id, call.task, source).observe(call.duration)
        child(self.turn_latency, config_id, mode, outcome).observe(seconds)
        if first_piece is not None:
            child(self.first_token, config_id).observe(first_piece)

    def main_error(self, config_id: str, kind: str) -> None:
        self._child(self.backend_errors, config_id, "main", kind).inc()

    def reject(self, reason: str) -> None:
        self._child(self.rejected, reason).inc()


__all__ = ["CacheCollector", "ServerMetrics"]
