"""Prometheus metrics of ``guardcache serve`` (``GET /metrics``).

Two sources, never a second bookkeeping of the same thing:

- **Caches** are read at scrape time by :class:`CacheCollector`: ``get_stats()`` of every model cache
  (the numbers of the ``LFU Cache Statistics`` log line) and ``tier_stats()`` of a Redis tier (the
  ``Redis Tier Statistics`` line). Nothing is counted twice, so nothing can drift.
- **Turns** are observed once each, when the turn ends, from its own record (the ``TurnInfo`` a
  ``GuardedStream`` holds): checks by rail and verdict, backend-call latency by task, check errors
  by kind, the turn's latency and outcome, answered turns by what decided them (a verdict, or the
  lack of one: ``guardcache_turns_total``), tallied in plain dicts (see :class:`_Family`) and
  exposed at scrape time. Requests in flight are the middleware's own count, read at scrape time.

Metrics are per process: with ``--workers N`` each worker answers a scrape with its own numbers.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from itertools import accumulate
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from guardcache.cache import CacheInterface
from guardcache.openai_wire import RequestError
from guardcache.rails.shadow import ShadowRails
from guardcache.rails.turn import ALLOWED, BLOCKED_NO_VERDICT, BLOCKED_VERDICT, PASSED_NO_VERDICT

#: metric name (``guardcache_cache_<name>_total``) -> (key of ``get_stats()``, help)
CACHE_COUNTERS = {
    "hits": ("hits", "Lookups served without a backend call of their own (coalesced askers included)."),
    "misses": ("misses", "Lookups that computed the value (a backend call)."),
    "coalesced": ("coalesced", "Askers that joined an in-flight computation (also counted as hits)."),
    "evictions": ("evictions", "Entries evicted to make room."),
    "puts": ("puts", "Entries stored."),
    "updates": ("updates", "Stored entries replaced."),
    "expirations": (
        "expirations",
        "Entries found older than cache.ttl and dropped (each such lookup was also a miss).",
    ),
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
NOT_TIER_COUNTERS = frozenset({"circuit_open", "connecting", "global_stats", "fetched_at"})

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
        connecting = GaugeMetricFamily(
            "guardcache_redis_connecting",
            "1 while the Redis tier is not up yet (being set up, or its set-up failing and retried).",
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
                        elif name == "connecting":
                            connecting.add_metric(values, float(bool(value)))
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
        if connecting.samples:
            yield connecting


class ShadowCollector(Collector):
    """Reads each config's shadow rails' counts at scrape time (``ShadowRails.stats()``): a shadow
    judgement ends after its turn was observed, so it is counted where it ends, once, and read."""

    def __init__(self, shadows: Callable[[], Mapping[str, ShadowRails | None]]) -> None:
        self._shadows = shadows  # config id -> its shadow rails (None: the config has none)

    def collect(self) -> Iterator[Metric]:
        agreement = CounterMetricFamily(
            "guardcache_shadow",
            "Shadow rail judgements of sampled turns, by shadow rail and by what the live rails "
            "(live) and the shadow rail (shadow) decided: allowed, blocked, error (no verdict); "
            "live=none when no live rail judged that text.",
            labels=["config", "rail", "live", "shadow"],
        )
        sampled = CounterMetricFamily(
            "guardcache_shadow_sampled",
            "Turns sampled for the shadow rails whose judgements started.",
            labels=["config"],
        )
        dropped = CounterMetricFamily(
            "guardcache_shadow_dropped",
            "Sampled turns the shadow rails did not judge (to the end), by reason: limit (max_concurrency "
            "samples were under way: dropped, never queued), closed (the rails closed first).",
            labels=["config", "reason"],
        )
        in_flight = GaugeMetricFamily(
            "guardcache_shadow_in_flight", "Shadow samples under way.", labels=["config"]
        )
        for config_id, shadow in self._shadows().items():
            if shadow is None:
                continue
            stats = shadow.stats()
            sampled.add_metric([config_id], stats.sampled)
            in_flight.add_metric([config_id], stats.in_flight)
            for reason, count in stats.dropped.items():
                dropped.add_metric([config_id, reason], count)
            for (rail, live, judged), count in stats.agreement.items():
                agreement.add_metric([config_id, rail, live, judged], count)
        if sampled.samples:
            yield from (agreement, sampled, dropped, in_flight)


def _fields(stats: Any) -> dict[str, Any]:
    if hasattr(stats, "as_dict"):
        return dict(stats.as_dict())
    if dataclasses.is_dataclass(stats) and not isinstance(stats, type):
        return {f.name: getattr(stats, f.name) for f in dataclasses.fields(stats)}
    return dict(stats) if isinstance(stats, Mapping) else {}


class _Family:
    """One labelled counter or histogram, tallied in plain dicts on the server's event loop.

    Why not prometheus_client's ``Counter``/``Histogram``: each of their updates takes a lock and
    goes through a label child, and a turn updates ~10 of them: ~4% of the server's CPU per request
    at 100% hits. Every update here happens on the event loop's thread (the routes), and so does
    every scrape (``/metrics`` is a route too), so no lock is needed and a scrape sees whole turns.
    """

    __slots__ = ("buckets", "doc", "kind", "labels", "name", "values")

    def __init__(
        self, kind: str, name: str, doc: str, labels: tuple[str, ...], buckets: tuple[float, ...] = ()
    ) -> None:
        self.kind = kind
        self.name = name
        self.doc = doc
        self.labels = labels
        self.buckets = buckets
        # counter: labels -> count; histogram: labels -> [count per bucket..., +Inf count, sum]
        self.values: dict[tuple[str, ...], Any] = {}

    def inc(self, labels: tuple[str, ...]) -> None:
        values = self.values
        values[labels] = values.get(labels, 0) + 1

    def counts(self) -> Mapping[tuple[str, ...], int]:
        """A counter's values, as a scrape shows them."""
        return self.values

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        row = self.values.get(labels)
        if row is None:
            row = self.values[labels] = self.new_row()
        row[bisect_left(self.buckets, value)] += 1
        row[-1] += value

    def new_row(self) -> list[Any]:
        """A histogram's row for new labels: a count per bucket, the +Inf count, the sum."""
        return [0] * (len(self.buckets) + 1) + [0.0]

    def metric(self) -> Metric:
        if self.kind == "counter":
            counter = CounterMetricFamily(self.name, self.doc, labels=self.labels)
            for labels, count in self.counts().items():
                counter.add_metric(labels, count)
            return counter
        histogram = HistogramMetricFamily(self.name, self.doc, labels=self.labels)
        bounds = [*(_bound(b) for b in self.buckets), "+Inf"]
        for labels, row in self.values.items():
            cumulative = list(accumulate(row[:-1]))
            histogram.add_metric(labels, list(zip(bounds, cumulative, strict=True)), row[-1])
        return histogram


_ANSWERED = frozenset({"allowed", "blocked_input", "blocked_output"})
"""The route outcomes of turns the rails decided (``guardcache_turns_total`` counts these)."""

_CONNECTION_REFUSALS: dict[tuple[str, ...], int] = {}


def count_connection_refusal(reason: str) -> None:
    """Count a connection the HTTP protocol refused before any request reached the app (a request
    head too large or too slow; ``server/connections.py``). Per process, as every metric here; shown
    in ``guardcache_requests_rejected_total`` beside the app's own refusals."""
    key = (reason,)
    _CONNECTION_REFUSALS[key] = _CONNECTION_REFUSALS.get(key, 0) + 1


class _Rejections(_Family):
    """The app's refusals, and at scrape time the HTTP protocol's (which has no app to count in)."""

    __slots__ = ()

    def counts(self) -> Mapping[tuple[str, ...], int]:
        if not _CONNECTION_REFUSALS:
            return self.values
        app = self.values
        return {**app, **{key: app.get(key, 0) + n for key, n in _CONNECTION_REFUSALS.items()}}


def _bound(value: float) -> str:
    text: str = floatToGoString(value)  # type: ignore[no-untyped-call]
    return text


class _TurnCollector(Collector):
    """Exposes the tallies (and the in-flight count) at scrape time."""

    def __init__(self, families: list[_Family], in_flight: Callable[[], int]) -> None:
        self._families = families
        self._in_flight = in_flight

    def collect(self) -> Iterator[Metric]:
        for family in self._families:
            yield family.metric()
        gauge = GaugeMetricFamily(
            "guardcache_requests_in_flight",
            "Requests with a body being served (chat completions, checks, LiteLLM's guardrail API).",
        )
        gauge.add_metric([], self._in_flight())
        yield gauge


class ServerMetrics:
    """The registry served on ``/metrics`` and the per-turn tallies (see :class:`_Family`)."""

    def __init__(
        self,
        caches: Callable[[], Mapping[str, Mapping[str, CacheInterface]]],
        in_flight: Callable[[], int] = lambda: 0,
        shadows: Callable[[], Mapping[str, ShadowRails | None]] = dict,
    ) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(CacheCollector(caches))
        self.registry.register(ShadowCollector(shadows))
        self.checks = _Family(
            "counter",
            "guardcache_checks",
            "Rail checks run, by rail, direction, verdict (allowed/blocked) and what was judged "
            "(kind: message, tool_result, tool_call); a streamed answer checked in windows counts "
            "one check per window.",
            ("config", "rail", "direction", "verdict", "cached", "kind"),
        )
        self.check_errors = _Family(
            "counter",
            "guardcache_check_errors",
            "Checks that got no verdict (decided by on_error or blocked), by rail and error kind "
            "(the failure's class; ParseError for an answer that is no verdict).",
            ("config", "rail", "kind"),
        )
        self.turns = _Family(
            "counter",
            "guardcache_turns",
            "Turns answered (allowed or refused; not a main-model failure or a client that left), by "
            "what decided them: allowed (every rail answered), blocked_verdict, blocked_no_verdict "
            "(the blocking rail got no verdict), passed_no_verdict (nothing blocked, and a rail "
            "without a verdict was let through by on_error: allow).",
            ("config", "outcome"),
        )
        self.backend_latency = _Family(
            "histogram",
            "guardcache_backend_call_seconds",
            "LLM calls of turns, by task (a rail's prompt task, or 'general' for the main model) and "
            "whether the cache served them (source=cache: the lookup time).",
            ("config", "task", "source"),
            BACKEND_BUCKETS,
        )
        self.backend_errors = _Family(
            "counter",
            "guardcache_backend_errors",
            "Backend calls that failed, by target (a rail, or 'main') and error kind.",
            ("config", "target", "kind"),
        )
        self.turn_latency = _Family(
            "histogram",
            "guardcache_turn_seconds",
            "Guarded turns, from the request to the last byte of the answer, by mode and outcome.",
            ("config", "mode", "outcome"),
            LATENCY_BUCKETS,
        )
        self.first_token = _Family(
            "histogram",
            "guardcache_time_to_first_piece_seconds",
            "Streamed turns: from the request to the first text sent.",
            ("config",),
            LATENCY_BUCKETS,
        )
        self.rejected = _Rejections(
            "counter",
            "guardcache_requests_rejected",
            "Requests refused before any rail ran, by reason (auth, body_too_large, body_timeout, "
            "overloaded, invalid, unknown_config, client_left (gone before its body was read), and "
            "from the HTTP protocol header_too_large, header_timeout).",
            ("reason",),
        )
        families = [
            self.turns,
            self.checks,
            self.check_errors,
            self.backend_latency,
            self.backend_errors,
            self.turn_latency,
            self.first_token,
            self.rejected,
        ]
        self.registry.register(_TurnCollector(families, in_flight))

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
        """Count one finished turn from its record (``TurnInfo``). ``outcome`` is the route's
        (``allowed``, ``blocked_input``, ``blocked_output``, ``main_error``, ``client_left``): an
        answered turn is also counted by what decided it (``checks.outcome``)."""
        checks = turn.checks
        decided = None  # what decided the turn (CheckResult.outcome), found in the same walk
        no_verdict = False
        # Every turn runs this: the tallies are updated inline (:meth:`_Family.inc`,
        # :meth:`_Family.observe`: a call each less per check and per LLM call), the same counts.
        counts = self.checks.values
        for direction, results in (("input", checks.input), ("output", checks.output)):
            for result in results:
                flow, error, allowed = result.flow, result.error, result.allowed
                cached = "true" if result.from_cache else "false"
                key = (config_id, flow, direction, "allowed" if allowed else "blocked", cached, result.kind)
                if not allowed and decided is None:
                    decided = BLOCKED_VERDICT if error is None else BLOCKED_NO_VERDICT
                counts[key] = counts.get(key, 0) + 1
                if error is not None:
                    no_verdict = True
                    kind = result.error_kind
                    self.check_errors.inc((config_id, flow, kind))
                    if kind.startswith("Backend"):
                        self.backend_errors.inc((config_id, flow, kind))
        if outcome in _ANSWERED:
            if decided is None:
                decided = PASSED_NO_VERDICT if no_verdict else ALLOWED
            self.turns.inc((config_id, decided))
        latency = self.backend_latency
        rows, bounds = latency.values, latency.buckets
        for call in turn.explain.llm_calls:
            if not call.cancelled:
                labels = (config_id, call.task, "cache" if call.from_cache else "backend")
                row = rows.get(labels)
                if row is None:
                    row = rows[labels] = latency.new_row()
                duration = call.duration
                row[bisect_left(bounds, duration)] += 1
                row[-1] += duration
        self.turn_latency.observe((config_id, mode, outcome), seconds)
        if first_piece is not None:
            self.first_token.observe((config_id,), first_piece)

    def observe_failed_turn(self, config_id: str, mode: str, outcome: str, seconds: float) -> None:
        self.turn_latency.observe((config_id, mode, outcome), seconds)

    def main_error(self, config_id: str, kind: str) -> None:
        self.backend_errors.inc((config_id, "main", kind))

    def reject(self, reason: str) -> None:
        self.rejected.inc((reason,))

    def refused(self, exc: RequestError) -> None:
        """A request refused with ``exc``, counted by :func:`reject_reason`."""
        self.rejected.inc((reject_reason(exc),))


def reject_reason(exc: RequestError) -> str:
    """The ``reason`` label of a refused request in ``guardcache_requests_rejected_total``."""
    if exc.status == 413:
        return "body_too_large"
    if exc.code in ("config_not_found", "model_not_found"):
        return "unknown_config"
    return "invalid"


__all__ = ["CacheCollector", "ServerMetrics", "ShadowCollector", "count_connection_refusal", "reject_reason"]
