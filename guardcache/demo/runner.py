"""The demo's engine: one emulated NIM per endpoint, one workload, two passes (caching off, then on).

The rails are NeMo's nemoguards setup (``config.yml`` and ``prompts.yml`` next to this file): the
main model, NemoGuard Content Safety (input and output), Topic Control and JailbreakDetect (input,
the three input rails in parallel). Each endpoint gets its own emulator, so backend calls, prompt
tokens and KV-cache reuse are counted per model.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from guardcache.checks.verdict import RailResult
from guardcache.config import RailsConfig
from guardcache.demo.workload import Turn
from guardcache.emulator import EmulatorConfig, EmulatorProcess, EmulatorServer, LatencyConfig
from guardcache.rails import LLMRails

STATS_LOGGER = "guardcache.cache.lfu"
CONFIG_DIR = Path(__file__).parent
"""``config.yml`` + ``prompts.yml``: the demo's rails, a NeMo Guardrails config folder."""

GUARDS = ("content_safety", "topic_control", "jailbreak_detection")
"""The guard models, in table order; each has an emulator and, in the caching-on pass, a cache."""
ENDPOINTS = ("main", *GUARDS)
MODEL_LABELS = {
    "main": "main LLM",
    "content_safety": "content safety",
    "topic_control": "topic control",
    "jailbreak_detection": "jailbreak detection",
}

RAILS = ("content_safety", "topic_control", "jailbreak_detection", "output")
"""Where a refusal came from: the three input rails, and the output rail (content safety again)."""
RAIL_LABELS = {
    "content_safety": "content safety (input)",
    "topic_control": "topic control",
    "jailbreak_detection": "jailbreak detection",
    "output": "content safety (output)",
}
_INPUT_FLOWS = {
    "content safety check input": "content_safety",
    "topic safety check input": "topic_control",
    "jailbreak detection model": "jailbreak_detection",
}


def demo_config(urls: dict[str, str], *, cache: bool, log_interval: float) -> RailsConfig:
    """The demo's config folder pointed at ``urls`` (endpoint -> base URL): every guard model's cache
    on (stats logged every ``log_interval`` seconds) or off, nothing else changed."""
    path = CONFIG_DIR / "config.yml"
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    for model in data["models"]:
        if model["type"] in GUARDS:
            if cache:
                settings = model.setdefault("cache", {})
                settings["enabled"] = True
                settings["stats"] = {"enabled": True, "log_interval": log_interval}
            else:
                model["cache"] = {"enabled": False}
    config = RailsConfig.from_content(
        yaml_content=yaml.safe_dump(data, sort_keys=False),
        prompts=(CONFIG_DIR / "prompts.yml").read_text(encoding="utf-8"),
        source=str(path),
        prompts_source=str(CONFIG_DIR / "prompts.yml"),
    )
    return config.with_base_urls(urls)


def emulator_configs(time_scale: float) -> dict[str, EmulatorConfig]:
    """One emulator per endpoint, each answering under its model's name."""
    data: dict[str, Any] = yaml.safe_load((CONFIG_DIR / "config.yml").read_text(encoding="utf-8"))
    names = {m["type"]: m["model"] for m in data["models"]}
    latency = LatencyConfig(time_scale=time_scale)
    return {e: EmulatorConfig(port=0, latency=latency, model=names[e]) for e in ENDPOINTS}


@dataclass
class PassResult:
    name: str
    turns: int
    wall: float
    latencies: list[float]
    calls: dict[str, int]  # backend requests per endpoint (ENDPOINTS)
    prompt_tokens: dict[str, int]  # per guard model, as the server counted them
    cached_prompt_tokens: dict[str, int]  # of those, reused from the server's KV cache
    refused: dict[str, int]  # refused turns per rail (RAILS)
    failed_checks: int = 0  # checks that got no verdict (timeouts, errors): their rail blocked
    hits: dict[str, int] = field(default_factory=dict)  # per guard model; empty with caching off
    misses: dict[str, int] = field(default_factory=dict)
    log_lines: list[tuple[str, str]] = field(default_factory=list)  # (model type, stats line)

    def pct(self, q: float) -> float:
        data = sorted(self.latencies)
        return data[min(len(data) - 1, int(q * len(data)))] if data else 0.0

    @property
    def guard_calls(self) -> int:
        return sum(self.calls[g] for g in GUARDS)

    @property
    def refused_total(self) -> int:
        return sum(self.refused.values())

    def hit_rate(self, model: str | None = None) -> float | None:
        """One guard model's cache hit rate, or all of them together; None without caches."""
        models = GUARDS if model is None else (model,)
        hits = sum(self.hits.get(m, 0) for m in models)
        total = hits + sum(self.misses.get(m, 0) for m in models)
        return hits / total if total else None


class StatsLines(logging.Handler):
    """Collects the ``LFU Cache Statistics`` lines and which model's cache wrote each.

    The line itself names no cache (it is the format operators grep for), so the model is found from
    the cache object whose ``log_stats_now`` is logging: the caller's frames are read, not changed.
    """

    def __init__(self, owners: dict[int, str]) -> None:
        super().__init__(logging.INFO)
        self.owners = owners  # id(cache) -> model type
        self.lines: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((self._owner(sys._getframe(1)), record.getMessage()))

    def _owner(self, frame: FrameType | None) -> str:
        while frame is not None:
            if frame.f_code.co_name == "log_stats_now":
                owner = self.owners.get(id(frame.f_locals.get("self")))
                if owner is not None:
                    return owner
            frame = frame.f_back
        return "?"


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


def refused_by(inputs: Sequence[RailResult], outputs: Sequence[RailResult]) -> str | None:
    """The rail (``RAILS``) that refused a turn, None when it was allowed."""
    for result in inputs:
        if not result.allowed:
            return next((rail for flow, rail in _INPUT_FLOWS.items() if result.flow.startswith(flow)), "?")
    if any(not r.allowed for r in outputs):
        return "output"
    return None


AnyEmulator = EmulatorServer | EmulatorProcess


@contextlib.contextmanager
def capture_stats_lines(caches: dict[str, Any]) -> Iterator[StatsLines]:
    """Collect the stats lines of ``caches`` (model type -> cache) while in the block, at INFO even
    when logging is configured quieter (the lines are the demo's output)."""
    log = logging.getLogger(STATS_LOGGER)
    handler = StatsLines({id(c): m for m, c in caches.items()})
    level = log.level
    if not log.isEnabledFor(logging.INFO):
        log.setLevel(logging.INFO)
    log.addHandler(handler)
    try:
        yield handler
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


async def run_pass(
    name: str,
    workload: Sequence[Turn],
    *,
    emulators: dict[str, AnyEmulator],
    cache: bool,
    concurrency: int,
    log_interval: float,
) -> PassResult:
    """One pass of ``workload`` through fresh rails (caches on or off) against ``emulators``."""
    urls = {endpoint: emu.base_url for endpoint, emu in emulators.items()}
    rails = LLMRails(demo_config(urls, cache=cache, log_interval=log_interval))
    caches = {m: rails.model_caches[m] for m in GUARDS if m in rails.model_caches}
    try:
        with capture_stats_lines(caches) as lines:
            result = await _replay(name, workload, rails, emulators, concurrency)
            for model, cache_obj in caches.items():
                cache_obj.log_stats_now()  # the final line: the periodic ones may have missed the end
                cache_stats = cache_obj.get_stats()
                result.hits[model], result.misses[model] = cache_stats.hits, cache_stats.misses
        result.log_lines = lines.lines
    finally:
        for cache_obj in caches.values():
            close = getattr(cache_obj, "close", None)
            if close is not None:
                close()  # stop its periodic lines
        await rails.aclose()
    return result


async def _replay(
    name: str,
    workload: Sequence[Turn],
    rails: LLMRails,
    emulators: dict[str, AnyEmulator],
    concurrency: int,
) -> PassResult:
    await asyncio.gather(*(emu.areset(flush_cache=True) for emu in emulators.values()))
    # As an app starts: each guard NIM computes its prompt prefix once before the first users come
    # (KV cache only: the caches and their stats are untouched), then the counters start from zero.
    await rails.warm_up_async()
    await asyncio.gather(*(emu.areset() for emu in emulators.values()))
    progress = Progress(name, len(workload))
    latencies: list[float] = []
    refused = dict.fromkeys(RAILS, 0)
    failed = 0
    queue = iter(workload)

    async def worker() -> None:
        nonlocal failed
        for turn in queue:
            t0 = time.perf_counter()
            await rails.generate_async(messages=[{"role": "user", "content": turn.text}])
            latencies.append(time.perf_counter() - t0)
            checks = rails.explain().checks  # this turn's: nothing ran between its end and here
            rail = refused_by(checks.input, checks.output)
            if rail is not None:
                refused[rail] = refused.get(rail, 0) + 1
            failed += sum(r.error is not None for r in (*checks.input, *checks.output))
            progress.step()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    progress.close()
    fetched = await asyncio.gather(*(emu.astats(prompts=False) for emu in emulators.values()))
    stats = dict(zip(emulators, fetched, strict=True))
    return PassResult(
        name=name,
        turns=len(workload),
        wall=wall,
        latencies=latencies,
        calls={e: s.requests_total for e, s in stats.items()},
        prompt_tokens={g: stats[g].prompt_tokens for g in GUARDS},
        cached_prompt_tokens={g: stats[g].cached_prompt_tokens for g in GUARDS},
        refused=refused,
        failed_checks=failed,
    )


@contextlib.asynccontextmanager
async def started_emulators(time_scale: float, *, in_process: bool) -> AsyncIterator[dict[str, AnyEmulator]]:
    """An emulator per endpoint (``ENDPOINTS``), started together and stopped on exit."""
    configs = emulator_configs(time_scale)
    if in_process:
        async with contextlib.AsyncExitStack() as stack:
            servers = {e: await stack.enter_async_context(EmulatorServer(c)) for e, c in configs.items()}
            yield dict(servers)
        return
    procs = {e: EmulatorProcess(c) for e, c in configs.items()}
    try:
        # Each child takes a second or more to import and bind: start them side by side.
        outcomes = await asyncio.gather(
            *(asyncio.to_thread(p.start) for p in procs.values()), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        yield dict(procs)
    finally:
        await asyncio.gather(*(asyncio.to_thread(p.stop) for p in procs.values()))


async def run_demo(
    workload: Sequence[Turn],
    *,
    concurrency: int,
    time_scale: float,
    log_interval: float,
    in_process: bool = False,
) -> tuple[PassResult, PassResult]:
    """Both passes against one emulated NIM per endpoint (main, content safety, topic control,
    jailbreak detection).

    By default each emulator runs in a child process: on a 2-core machine an in-process server would
    share the client's interpreter lock, and the measured turn latency would be CPU queueing rather than
    the emulated NIM latency. ``in_process`` serves them from this event loop instead.
    """
    async with started_emulators(time_scale, in_process=in_process) as emulators:
        results = []
        for name, cache in (("caching off", False), ("caching on", True)):
            results.append(
                await run_pass(
                    name,
                    workload,
                    emulators=emulators,
                    cache=cache,
                    concurrency=concurrency,
                    log_interval=log_interval,
                )
            )
    return results[0], results[1]


__all__ = [
    "CONFIG_DIR",
    "ENDPOINTS",
    "GUARDS",
    "MODEL_LABELS",
    "RAILS",
    "RAIL_LABELS",
    "PassResult",
    "StatsLines",
    "capture_stats_lines",
    "demo_config",
    "emulator_configs",
    "refused_by",
    "run_demo",
    "run_pass",
]
