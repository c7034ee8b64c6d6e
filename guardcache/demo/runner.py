"""The demo's engine: one emulated NIM per endpoint, one workload, three passes (caching off;
caching on; caching on with the main model started during the input checks).

The rails are NeMo's nemoguards setup (``config.yml`` and ``prompts.yml`` next to this file): the
main model, NemoGuard Content Safety (input and output), Topic Control and JailbreakDetect (input,
the three input rails in parallel). Each endpoint gets its own emulator, so backend calls, prompt
tokens and KV-cache reuse are counted per model. Each turn's record (``explain()``) says which path
its checks took (:mod:`guardcache.demo.turns`), so latency is reported for hit and miss turns apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
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
from guardcache.config.files import ConfigReader
from guardcache.demo.turns import (
    PATHS,
    MainWork,
    Refusal,
    check_path,
    main_call_seconds,
    main_work_on_block,
    refusal,
)
from guardcache.demo.workload import Turn
from guardcache.emulator import EmulatorConfig, EmulatorProcess, EmulatorServer, LatencyConfig
from guardcache.llm.types import ChatResult
from guardcache.rails import LLMRails
from guardcache.rails.main_llm import ClientLLM

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


PASSES = (("caching off", False, False), ("caching on", True, False), ("+ early main", True, True))
"""(name, cache, during_main) of each pass, in order: the third is the second with the main model
started as soon as an input check misses (``rails.input.during_main: true``)."""


def demo_config(
    urls: dict[str, str],
    *,
    cache: bool,
    log_interval: float,
    during_main: bool = False,
    policy: str = "lfu",
) -> RailsConfig:
    """The demo's config folder pointed at ``urls`` (endpoint -> base URL): every guard model's cache
    on (stats logged every ``log_interval`` seconds) or off, and the speculative main start on or
    off; nothing else changed."""
    path = CONFIG_DIR / "config.yml"
    data: dict[str, Any] = ConfigReader().read_mapping(path)
    if during_main:
        data["rails"]["input"]["during_main"] = True
    for model in data["models"]:
        if model["type"] in GUARDS:
            if cache:
                settings = model.setdefault("cache", {})
                settings["enabled"] = True
                settings["stats"] = {"enabled": True, "log_interval": log_interval}
                settings["policy"] = policy
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
    data: dict[str, Any] = ConfigReader().read_mapping(CONFIG_DIR / "config.yml")
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
    during_main: bool = False  # the main model started during the input checks (on a miss)
    by_path: dict[str, list[float]] = field(default_factory=dict)  # latencies per check path (PATHS)
    refused_turns: list[str | None] = field(default_factory=list)  # per workload turn: the rail, or None
    turn_paths: list[str] = field(default_factory=list)  # per workload turn: its check path
    main_seconds: list[float] = field(default_factory=list)  # main calls that ran to their answer
    main_work: MainWork = field(default_factory=MainWork)  # on input-blocked turns (records)
    main_tokens: int = 0  # main prompt + completion tokens of delivered answers (server)
    main_abandoned: int = 0  # main requests that ended undelivered after reaching a slot (server)
    main_abandoned_tokens: int = 0  # their prefilled prompt + decoded tokens (server)
    hits: dict[str, int] = field(default_factory=dict)  # per guard model; empty with caching off
    misses: dict[str, int] = field(default_factory=dict)
    log_lines: list[tuple[str, str]] = field(default_factory=list)  # (model type, stats line)
    refusals: dict[str, Refusal] = field(default_factory=dict)  # per rail (RAILS): its first refused turn

    def pct(self, q: float) -> float:
        return percentile(self.latencies, q) or 0.0

    def path_pct(self, path: str, q: float) -> float | None:
        """A latency percentile of the turns whose checks took ``path``; None when there were none."""
        return percentile(self.by_path.get(path, []), q)

    def path_turns(self, path: str) -> int:
        return len(self.by_path.get(path, []))

    @property
    def wasted_main_tokens(self) -> int:
        """Main-model tokens spent on turns an input rail then blocked: the cancelled calls' work
        (server-counted) and the answers that finished before the block and were thrown away."""
        return self.main_abandoned_tokens + self.main_work.discarded_tokens

    def wasted_main_share(self) -> float | None:
        """``wasted_main_tokens`` as a share of all the main model's tokens; None when it had none."""
        total = self.main_tokens + self.main_abandoned_tokens
        return self.wasted_main_tokens / total if total else None

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


def percentile(data: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (nearest rank) of ``data``; None when it is empty."""
    ordered = sorted(data)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


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

_ANSWERS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("demo_answers", default=None)
"""The main model's answers of the turn the current task runs (a main call started early runs in a
task of its own, which copies the context: the list is the turn's)."""


class RecordingMain(ClientLLM):
    """The built-in main model, keeping each answer for the turn that asked for it: what an output
    rail judged, which the demo shows beside a refusal (a turn's record holds no text, by design).
    A subclass, so the turn runner still reads its finish reason."""

    def __init__(self, main: ClientLLM) -> None:
        super().__init__(main.client, main.params)

    async def complete(self, messages: Sequence[dict[str, str]], **params: Any) -> ChatResult:
        result = await super().complete(messages, **params)
        answers = _ANSWERS.get()
        if answers is not None:
            answers.append(result.content)
        return result


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
    during_main: bool = False,
    policy: str = "lfu",
) -> PassResult:
    """One pass of ``workload`` through fresh rails (caches on or off, the main model started during
    the input checks or after them) against ``emulators``."""
    urls = {endpoint: emu.base_url for endpoint, emu in emulators.items()}
    config = demo_config(urls, cache=cache, log_interval=log_interval, during_main=during_main, policy=policy)
    rails = LLMRails(config)
    if isinstance(rails.runner.main, ClientLLM):
        rails.runner.main = RecordingMain(rails.runner.main)  # what output rails judged, for the report
    caches = {m: rails.model_caches[m] for m in GUARDS if m in rails.model_caches}
    try:
        with capture_stats_lines(caches) as lines:
            result = await _replay(name, workload, rails, emulators, concurrency)
            result.during_main = during_main
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
    by_path: dict[str, list[float]] = {path: [] for path in PATHS}
    refused = dict.fromkeys(RAILS, 0)
    refused_turns: list[str | None] = [None] * len(workload)
    turn_paths: list[str] = [""] * len(workload)
    main_seconds: list[float] = []
    work: list[MainWork] = []
    refusals: dict[str, Refusal] = {}
    failed = 0
    queue = iter(enumerate(workload))

    async def worker() -> None:
        nonlocal failed
        for index, turn in queue:
            answers: list[str] = []
            _ANSWERS.set(answers)  # this worker's task only: each turn's answers apart
            t0 = time.perf_counter()
            reply = await rails.generate_async(messages=[{"role": "user", "content": turn.text}])
            elapsed = time.perf_counter() - t0
            latencies.append(elapsed)
            record = rails.explain()  # this turn's: nothing ran between its end and here
            checks = record.checks
            path = turn_paths[index] = check_path(record)
            by_path[path].append(elapsed)
            rail = refused_by(checks.input, checks.output)
            refused_turns[index] = rail
            if rail is not None:
                refused[rail] = refused.get(rail, 0) + 1
                answer = answers[-1] if answers else None
                shown = refusals.get(rail)
                seen = refusal(index, turn.text, reply["content"], record, answer)
                if seen is not None and (shown is None or index < shown.position):  # the workload's first
                    refusals[rail] = seen
            failed += sum(r.error is not None for r in (*checks.input, *checks.output))
            main = main_call_seconds(record)
            if main is not None:
                main_seconds.append(main)
            spent = main_work_on_block(record)
            if spent != MainWork():
                work.append(spent)
            progress.step()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    progress.close()
    stats = await _settled_stats(emulators)
    main_stats = stats["main"]
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
        by_path=by_path,
        refused_turns=refused_turns,
        turn_paths=turn_paths,
        main_seconds=main_seconds,
        main_work=MainWork(*(sum(column) for column in zip(*work, strict=True))) if work else MainWork(),
        main_tokens=main_stats.prompt_tokens + main_stats.completion_tokens,
        main_abandoned=main_stats.abandoned_requests,
        main_abandoned_tokens=main_stats.abandoned_prompt_tokens + main_stats.abandoned_completion_tokens,
        refusals=refusals,
    )


async def _settled_stats(emulators: dict[str, AnyEmulator], within: float = 3.0) -> dict[str, Any]:
    """Each emulator's stats once it has nothing running or waiting (bounded by ``within`` s): a
    cancelled request is counted when the server notices its client left, a moment after the turn
    ended."""
    deadline = time.monotonic() + within
    while True:
        fetched = await asyncio.gather(*(emu.astats(prompts=False) for emu in emulators.values()))
        if all(s.running == 0 and s.waiting == 0 for s in fetched) or time.monotonic() > deadline:
            return dict(zip(emulators, fetched, strict=True))
        await asyncio.sleep(0.05)


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
    policy: str = "lfu",
) -> tuple[PassResult, PassResult, PassResult]:
    """The three passes (``PASSES``) against one emulated NIM per endpoint (main, content safety,
    topic control, jailbreak detection), each from cold caches and a flushed KV cache.

    By default each emulator runs in a child process: on a 2-core machine an in-process server would
    share the client's interpreter lock, and the measured turn latency would be CPU queueing rather than
    the emulated NIM latency. ``in_process`` serves them from this event loop instead.
    """
    async with started_emulators(time_scale, in_process=in_process) as emulators:
        results = []
        for name, cache, during_main in PASSES:
            results.append(
                await run_pass(
                    name,
                    workload,
                    emulators=emulators,
                    cache=cache,
                    concurrency=concurrency,
                    log_interval=log_interval,
                    during_main=during_main,
                    policy=policy,
                )
            )
    return results[0], results[1], results[2]


__all__ = [
    "CONFIG_DIR",
    "ENDPOINTS",
    "GUARDS",
    "MODEL_LABELS",
    "PASSES",
    "RAILS",
    "RAIL_LABELS",
    "PassResult",
    "StatsLines",
    "capture_stats_lines",
    "demo_config",
    "emulator_configs",
    "percentile",
    "refused_by",
    "run_demo",
    "run_pass",
]
