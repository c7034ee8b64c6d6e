"""Counters of one emulator instance, readable as JSON (``/admin/stats``) and Prometheus text.

Tests assert on these ("the backend saw this prompt once", "N cached tokens were served"), so the
JSON counters are exact integers kept beside the Prometheus objects rather than scraped from them.
Each instance has its own ``CollectorRegistry``: several emulators in one process never mix series,
and a reset simply builds a fresh registry.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client import Counter as PromCounter

PREFIX = "guardcache_emulator"
_TTFT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.0)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0)


class EmulatorMetrics:
    """Exact counters plus a per-instance Prometheus registry; ``gauges`` are read at scrape time."""

    def __init__(self, gauges: Mapping[str, tuple[str, Callable[[], float]]] | None = None) -> None:
        self._gauges = dict(gauges or {})
        self.reset()

    def reset(self) -> None:
        """Zero every counter and histogram (a fresh registry)."""
        self.requests_total = 0
        self.by_status: Counter[str] = Counter()
        self.by_endpoint: Counter[str] = Counter()
        self.by_prompt: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cached_prompt_tokens = 0
        self.requests_with_cached_tokens = 0
        self.abandoned_requests = 0
        self.abandoned_prompt_tokens = 0
        self.abandoned_completion_tokens = 0
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._requests = PromCounter(
            f"{PREFIX}_requests",
            "Inference requests (chat completions, classify) by endpoint and final status.",
            ["endpoint", "status"],
            registry=r,
        )
        self._prompt_tokens = PromCounter(
            f"{PREFIX}_prompt_tokens", "Prompt tokens processed, cached ones included.", registry=r
        )
        self._cached_tokens = PromCounter(
            f"{PREFIX}_cached_prompt_tokens",
            "Prompt tokens served from the prefix (KV) cache.",
            registry=r,
        )
        self._completion_tokens = PromCounter(
            f"{PREFIX}_completion_tokens", "Completion tokens generated.", registry=r
        )
        self._faults = PromCounter(f"{PREFIX}_faults", "Injected faults by kind.", ["kind"], registry=r)
        self._ttft = Histogram(
            f"{PREFIX}_time_to_first_token_seconds",
            "Time from request arrival to the first token (queueing included).",
            buckets=_TTFT_BUCKETS,
            registry=r,
        )
        self._latency = Histogram(
            f"{PREFIX}_request_latency_seconds",
            "Time from request arrival to the last token of a completed request.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        for name, (doc, read) in self._gauges.items():
            Gauge(f"{PREFIX}_{name}", doc, registry=r).set_function(read)

    def record_prompt(self, digest: str) -> None:
        """Count one backend call for the prompt with this digest (faulted calls included)."""
        self.by_prompt[digest] += 1

    def record_status(self, endpoint: str, status: str) -> None:
        """Count a finished request; ``status`` is the HTTP code, ``dropped`` or ``disconnected``."""
        self.requests_total += 1
        self.by_status[status] += 1
        self.by_endpoint[endpoint] += 1
        self._requests.labels(endpoint, status).inc()

    def record_usage(self, prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> None:
        self.prompt_tokens += prompt_tokens
        self.cached_prompt_tokens += cached_tokens
        self.completion_tokens += completion_tokens
        if cached_tokens:
            self.requests_with_cached_tokens += 1
        self._prompt_tokens.inc(prompt_tokens)
        self._cached_tokens.inc(cached_tokens)
        self._completion_tokens.inc(completion_tokens)

    def record_abandoned(self, prompt_tokens: int, completion_tokens: int) -> None:
        """Count a request that reached a running slot and ended without its answer delivered (the
        client left, or the server stopped): its prefill (the prompt tokens) and the tokens decoded
        before the end were computed and thrown away. Kept apart from the usage counters, which
        count delivered answers (what a client is billed)."""
        self.abandoned_requests += 1
        self.abandoned_prompt_tokens += prompt_tokens
        self.abandoned_completion_tokens += completion_tokens

    def record_fault(self, kind: str) -> None:
        self.faults[kind] += 1
        self._faults.labels(kind).inc()

    def observe_ttft(self, seconds: float) -> None:
        self._ttft.observe(seconds)

    def observe_latency(self, seconds: float) -> None:
        self._latency.observe(seconds)

    def snapshot(self, *, include_prompts: bool = True) -> dict[str, Any]:
        """The counter part of the ``/admin/stats`` document."""
        data: dict[str, Any] = {
            "requests_total": self.requests_total,
            "requests_by_status": dict(self.by_status),
            "requests_by_endpoint": dict(self.by_endpoint),
            "distinct_prompts": len(self.by_prompt),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "requests_with_cached_tokens": self.requests_with_cached_tokens,
            "abandoned_requests": self.abandoned_requests,
            "abandoned_prompt_tokens": self.abandoned_prompt_tokens,
            "abandoned_completion_tokens": self.abandoned_completion_tokens,
            "faults": dict(self.faults),
        }
        if include_prompts:
            data["requests_by_prompt"] = dict(self.by_prompt)
        return data

    def render(self) -> bytes:
        """Prometheus text exposition of this instance's registry."""
        return generate_latest(self.registry)
