"""The demo's engine: two emulated NIMs (main model, content safety), one workload, two passes."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from guardcache.config import RailsConfig
from guardcache.demo.workload import Turn
from guardcache.emulator import EmulatorConfig, EmulatorProcess, EmulatorServer, LatencyConfig
from guardcache.rails import REFUSAL, LLMRails

STATS_LOGGER = "guardcache.cache.lfu"


def demo_config(main_url: str, guard_url: str, *, cache: bool, log_interval: float) -> RailsConfig:
    cache_block = (
        f"cache: {{enabled: true, maxsize: 10000, stats: {{enabled: true, log_interval: {log_interval}}}}}"
        if cache
        else "cache: {enabled: false}"
    )
    return RailsConfig.from_content(
        yaml_content=f"""
models:
  - type: main
    engine: nim
    model: meta/llama-3.1-8b-instruct
    parameters: {{base_url: "{main_url}", max_tokens: 24}}
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    parameters: {{base_url: "{guard_url}"}}
    {cache_block}
rails:
  input: {{flows: [content safety check input $model=content_safety]}}
  output: {{flows: [content safety check output $model=content_safety]}}
""",
        source="<demo>",
    )


@dataclass
class PassResult:
    name: str
    turns: int
    wall: float
    latencies: list[float]
    guard_calls: int
    main_calls: int
    cached_prompt_tokens: int
    guard_prompt_tokens: int
    refused: int
    cache_hits: int = 0
    cache_misses: int = 0
    log_lines: list[str] = field(default_factory=list)

    def pct(self, q: float) -> float:
        data = sorted(self.latencies)
        return data[min(len(data) - 1, int(q * len(data)))] if data else 0.0

    @property
    def hit_rate(self) -> float | None:
        total = self.cache_hits + self.cache_misses
        return self.cache_hits / total if total else None


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class Progress:
    """A one-line progress bar on stderr (nothing when stderr is not a terminal, except the end)."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done = label, total, 0
        self.tty = sys.stderr.isatty()
        self.started = time.monotonic()

    def step(self) -> None:
        self.done += 1
        if self.tty and (self.done % 25 == 0 or self.done == self.total):
            width = 30
            filled = int(width * self.done / self.total)
            rate = self.done / max(time.monotonic() - self.started, 1e-9)
            sys.stderr.write(
                f"\r{self.label:18s} [{'#' * filled}{'.' * (width - filled)}] "
                f"{self.done}/{self.total} turns  {rate:6.0f} turns/s"
            )
            sys.stderr.flush()

    def close(self) -> None:
        elapsed = time.monotonic() - self.started
        end = "\n" if self.tty else ""
        sys.stderr.write(f"{end}{self.label}: {self.done} turns in {elapsed:.1f} s\n")


async def run_pass(
    name: str,
    workload: list[Turn],
    *,
    main: EmulatorServer | EmulatorProcess,
    guard: EmulatorServer | EmulatorProcess,
    cache: bool,
    concurrency: int,
    log_interval: float,
) -> PassResult:
    rails = LLMRails(demo_config(main.base_url, guard.base_url, cache=cache, log_interval=log_interval))
    handler = _Lines()
    logging.getLogger(STATS_LOGGER).addHandler(handler)
    await guard.areset(flush_cache=True)
    await main.areset(flush_cache=True)
    progress = Progress(name, len(workload))
    latencies: list[float] = []
    refused = 0
    queue = iter(workload)

    async def worker() -> None:
        nonlocal refused
        for turn in queue:
            t0 = time.perf_counter()
            reply = await rails.generate_async(messages=[{"role": "user", "content": turn.text}])
            latencies.append(time.perf_counter() - t0)
            refused += reply["content"] == REFUSAL
            progress.step()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    progress.close()
    guard_stats, main_stats = await guard.astats(prompts=False), await main.astats(prompts=False)
    result = PassResult(
        name=name,
        turns=len(workload),
        wall=wall,
        latencies=latencies,
        guard_calls=guard_stats.requests_total,
        main_calls=main_stats.requests_total,
        cached_prompt_tokens=guard_stats.cached_prompt_tokens,
        guard_prompt_tokens=guard_stats.prompt_tokens,
        refused=refused,
    )
    cache_obj = rails.model_caches.get("content_safety")
    if cache_obj is not None:
        cache_obj.log_stats_now()
        stats = cache_obj.get_stats()
        result.cache_hits, result.cache_misses = stats.hits, stats.misses
        close = getattr(cache_obj, "close", None)
        if close:
            close()
    logging.getLogger(STATS_LOGGER).removeHandler(handler)
    result.log_lines = handler.lines
    await rails.aclose()
    return result


async def run_demo(
    workload: list[Turn],
    *,
    concurrency: int,
    time_scale: float,
    log_interval: float,
    in_process: bool = False,
) -> tuple[PassResult, PassResult]:
    """Both passes against two emulated NIMs (main model, content safety).

    By default each emulator runs in a child process: on a 2-core machine an in-process server would
    share the client's interpreter lock, and the measured turn latency would be CPU queueing rather than
    the emulated NIM latency. ``in_process`` serves them from this event loop instead.
    """
    latency = LatencyConfig(time_scale=time_scale)
    main_cfg = EmulatorConfig(port=0, latency=latency, model="meta/llama-3.1-8b-instruct")
    guard_cfg = EmulatorConfig(port=0, latency=latency)
    kind = EmulatorServer if in_process else EmulatorProcess
    async with kind(main_cfg) as main, kind(guard_cfg) as guard:

        def one(name: str, cache: bool) -> Coroutine[Any, Any, PassResult]:
            return run_pass(
                name,
                workload,
                main=main,
                guard=guard,
                cache=cache,
                concurrency=concurrency,
                log_interval=log_interval,
            )

        off = await one("caching off", False)
        on = await one("caching on", True)
    return off, on


__all__ = ["PassResult", "demo_config", "run_demo", "run_pass"]
