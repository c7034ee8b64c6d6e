"""Building blocks of ``bench_checks.py``: the check types, their one-rail configs, the conversations,
and the timing loops.

Kept apart from the runner so each file stays small; nothing here is imported by the library or tests.
"""

from __future__ import annotations

import asyncio
import gc
import re
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e_support import pct

from guardcache import RailsConfig
from guardcache.demo.workload import message_pool
from guardcache.llm.records import request_scope

ROOT = Path(__file__).resolve().parents[1]
NEMOGUARDS = ROOT / "examples" / "nemoguards"
TEST_CONFIGS = ROOT / "tests" / "integration" / "configs"
GREETING = "Hi!"
HELLO = "Hello! How can I help you today?"
CACHE = "{enabled: true, maxsize: 10000}"


def _prompt_items(path: Path) -> str:
    """The list items of a ``prompts.yml`` (what follows its ``prompts:`` key)."""
    return re.split(r"^prompts:", path.read_text(encoding="utf-8"), maxsplit=1, flags=re.M)[1]


# -- the models every check type runs on ----------------------------------------------------------

#: model type -> (engine, model name). Base URLs are placeholders: the emulators replace them.
MODELS: dict[str, tuple[str, str]] = {
    "main": ("nim", "meta/llama-3.3-70b-instruct"),
    "content_safety": ("nim", "nvidia/llama-3.1-nemoguard-8b-content-safety"),
    "topic_control": ("nim", "nvidia/llama-3.1-nemoguard-8b-topic-control"),
    "jailbreak_detection": ("nim", "nvidia/nemoguard-jailbreak-detect"),
    "self_check_input": ("nim", "meta/llama-3.1-8b-instruct"),
    "self_check_output": ("nim", "meta/llama-3.1-8b-instruct"),
    "llama_guard": ("vllm_openai", "meta-llama/Llama-Guard-3-8B"),
}

#: NeMo's prompts of the integration tests: self check input/output, and Llama Guard 3 for the
#: content-safety flows read with ``is_content_safe``.
_SELF_CHECK_PROMPTS = _prompt_items(TEST_CONFIGS / "self_check" / "prompts.yml")
_LLAMA_GUARD_PROMPTS = _prompt_items(TEST_CONFIGS / "llama_guard" / "prompts.yml")


def _topic_prompts() -> str:
    """The nemoguards example's topic rules, as prompt list items."""
    return _prompt_items(NEMOGUARDS / "prompts.yml")


@dataclass(frozen=True, slots=True)
class CheckType:
    """One check type: a single rail on one model, with the prompts it needs."""

    name: str
    flow: str
    direction: str  # "input" | "output"
    model: str
    prompts: str = ""
    required: bool = True  # named by the issue (False: an extra row)
    nemoguards: bool = False  # one of the four checks of a nemoguards turn

    def yaml(self) -> str:
        """A config with only this rail (and the one model it runs on)."""
        engine, name = MODELS[self.model]
        inputs = f"[{self.flow}]" if self.direction == "input" else "[]"
        outputs = f"[{self.flow}]" if self.direction == "output" else "[]"
        extra = ""
        if self.model == "jailbreak_detection":
            extra = "  config:\n    jailbreak_detection: {nim_base_url: http://127.0.0.1:9/v1}\n"
        return (
            f"models:\n  - type: {self.model}\n    engine: {engine}\n    model: {name}\n"
            f"    parameters: {{base_url: http://127.0.0.1:9/v1}}\n    cache: {CACHE}\n"
            f"rails:\n  input: {{flows: {inputs}}}\n  output: {{flows: {outputs}}}\n{extra}"
        )

    def config(self, urls: Mapping[str, str]) -> RailsConfig:
        prompts = f"prompts:\n{self.prompts}" if self.prompts else None
        config = RailsConfig.from_content(self.yaml(), prompts=prompts, source=f"<bench_checks: {self.name}>")
        return config.with_base_urls({t: urls[t] for t in config.endpoint_types()})


CHECK_TYPES: tuple[CheckType, ...] = (
    CheckType(
        "content safety input",
        "content safety check input $model=content_safety",
        "input",
        "content_safety",
        nemoguards=True,
    ),
    CheckType(
        "content safety output",
        "content safety check output $model=content_safety",
        "output",
        "content_safety",
        nemoguards=True,
    ),
    CheckType(
        "topic control (history 2)",
        "topic safety check input $model=topic_control",
        "input",
        "topic_control",
        prompts=_topic_prompts(),
        nemoguards=True,
    ),
    CheckType(
        "jailbreak detection", "jailbreak detection model", "input", "jailbreak_detection", nemoguards=True
    ),
    CheckType("self check input", "self check input", "input", "self_check_input", _SELF_CHECK_PROMPTS),
    CheckType(
        "self check output",
        "self check output",
        "output",
        "self_check_output",
        _SELF_CHECK_PROMPTS,
        required=False,
    ),
    CheckType(
        "Llama Guard input",
        "content safety check input $model=llama_guard",
        "input",
        "llama_guard",
        _LLAMA_GUARD_PROMPTS,
    ),
    CheckType(
        "Llama Guard output",
        "content safety check output $model=llama_guard",
        "output",
        "llama_guard",
        _LLAMA_GUARD_PROMPTS,
        required=False,
    ),
)


def all_models_config() -> RailsConfig:
    """Every model of every check type (and a JailbreakDetect NIM): what ``emulated`` starts."""
    models = "".join(
        f"  - type: {t}\n    engine: {e}\n    model: {m}\n    parameters: {{base_url: http://127.0.0.1:9/v1}}\n"
        for t, (e, m) in MODELS.items()
    )
    yaml = (
        f"models:\n{models}rails:\n  input: {{flows: []}}\n  output: {{flows: []}}\n"
        "  config:\n    jailbreak_detection: {nim_base_url: http://127.0.0.1:9/v1}\n"
    )
    return RailsConfig.from_content(yaml, source="<bench_checks: all models>")


def nemoguards_config(urls: Mapping[str, str], *, parallel: bool = True) -> RailsConfig:
    """``examples/nemoguards`` as shipped (``parallel: false`` swapped in on request), on emulators."""
    yaml = (NEMOGUARDS / "config.yml").read_text(encoding="utf-8")
    if not parallel:
        assert "parallel: true" in yaml
        yaml = yaml.replace("parallel: true", "parallel: false")
    prompts = (NEMOGUARDS / "prompts.yml").read_text(encoding="utf-8")
    config = RailsConfig.from_content(yaml, prompts=prompts, source=str(NEMOGUARDS / "config.yml"))
    return config.with_base_urls({t: urls[t] for t in config.endpoint_types()})


def no_rails_config() -> RailsConfig:
    """No model and no rail: ``generate_async`` is the main model (passed as ``llm=``) alone."""
    return RailsConfig.from_content("rails:\n  input: {flows: []}\n  output: {flows: []}\n")


# -- the conversations ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Conversation:
    """One turn: a short history (a greeting and the bot's hello), the user's message, the reply."""

    text: str
    bot: str

    @property
    def history(self) -> tuple[dict[str, str], ...]:
        return ({"role": "user", "content": GREETING}, {"role": "assistant", "content": HELLO})

    def turn(self) -> list[dict[str, str]]:
        """``generate_async(messages=...)``: the history then the user message."""
        return [*self.history, {"role": "user", "content": self.text}]

    def checked(self, direction: str) -> list[dict[str, str]]:
        """``check_async`` messages: the turn, and the reply too for an output rail."""
        turn = self.turn()
        return turn if direction == "input" else [*turn, {"role": "assistant", "content": self.bot}]

    def variables(self, direction: str) -> dict[str, Any]:
        """What the runtime hands a rail (``LLMRails.generate_async``'s variables)."""
        out: dict[str, Any] = {"user_input": self.text, "history": self.history}
        if direction == "output":
            out["bot_response"] = self.bot
        return out


def safe_texts() -> list[str]:
    """The demo workload's safe messages, most popular first."""
    return [text for text, unsafe in message_pool() if not unsafe]


# -- timing ------------------------------------------------------------------------------------------


Probe = Callable[[int], Awaitable[Any]]  # one timed call; ``i`` picks the conversation


async def samples_ns(fn: Probe, n: int, start: int = 0) -> list[int]:
    """``n`` one-call timings of ``await fn(start + i)`` with ``perf_counter_ns`` (timer included)."""
    out = [0] * n
    clock = time.perf_counter_ns
    for i in range(n):
        t0 = clock()
        await fn(start + i)
        out[i] = clock() - t0
    return out


@dataclass(frozen=True, slots=True)
class Dist:
    """One item's timings (us): wall-clock p50 and p99 of all its calls, the process CPU time per call
    (mean over its blocks: time other processes held the core is not in it), and each block's p50
    (paired with another item's for ratios)."""

    p50: float
    p99: float
    cpu: float
    blocks_p50: tuple[float, ...]

    @classmethod
    def of(cls, blocks: Sequence[Sequence[int]], cpu_ns: int) -> Dist:
        pooled = [s for block in blocks for s in block]
        p50s = tuple(pct(b, 0.50) / 1000 for b in blocks)
        return cls(pct(pooled, 0.50) / 1000, pct(pooled, 0.99) / 1000, cpu_ns / len(pooled) / 1000, p50s)


PROBE = "speed probe: sum(range(1000))"


async def probe_call(i: int) -> int:
    """machine.py's speed probe as a timed item: among the blocks of a measurement it shows the
    machine's speed under the same load."""
    return sum(range(1000))


async def interleaved(
    items: Sequence[tuple[Any, Probe]], calls: int, block: int, warmup: int
) -> dict[Any, Dist]:
    """Time each item's ``calls`` calls one at a time, interleaved: a cycle times one block of
    ``block`` calls of every item (in an order rotated from cycle to cycle), so a burst of load from
    other processes hits all items alike, and the per-block p50s pair up for ratios. Every block
    runs in a fresh request scope, as a turn's checks do."""
    for _, fn in items:
        with request_scope():
            await samples_ns(fn, warmup)
    raw: dict[Any, list[list[int]]] = {key: [] for key, _ in items}
    cpu: dict[Any, int] = dict.fromkeys(raw, 0)
    cpu_clock = time.process_time_ns
    for cycle in range(max(1, calls // block)):
        for key, fn in rotated(items, cycle):
            with request_scope():
                c0 = cpu_clock()
                raw[key].append(await samples_ns(fn, block, cycle * block))
                cpu[key] += cpu_clock() - c0
    return {key: Dist.of(blocks, cpu[key]) for key, blocks in raw.items()}


@dataclass(frozen=True, slots=True)
class Run:
    """One timed run of ``count`` calls: wall seconds, this process's CPU seconds (all threads), and
    the speed probe's p50 (us) timed every :data:`PROBE_EVERY` calls during the run."""

    count: int
    wall: float
    cpu: float
    probe_us: float

    @property
    def rate(self) -> float:
        """Calls per wall second."""
        return self.count / self.wall

    @property
    def cpu_us(self) -> float:
        """CPU microseconds per call (time another process held the core is not in it)."""
        return self.cpu / self.count * 1e6


PROBE_EVERY = 20  # calls of a timed run per speed probe (~1 us a call)
REFERENCE_PROBE_US = 10.0  # machine.py: ~7-10 us on a fast desktop core


async def drive(fn: Probe, count: int, concurrency: int) -> Run:
    """``count`` calls of ``fn(i)`` from ``concurrency`` workers; the speed probe runs among them."""
    items = iter(range(count))
    probes: list[int] = []
    clock = time.perf_counter_ns

    async def worker() -> None:
        for i in items:
            await fn(i)
            if i % PROBE_EVERY == 0:
                t0 = clock()
                sum(range(1000))
                probes.append(clock() - t0)

    gc.collect()
    cpu0, started = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu0
    return Run(count, wall, cpu, pct(probes, 0.5) / 1000)


async def bounded_gather(coros: Sequence[Awaitable[Any]], limit: int = 16) -> list[Any]:
    """``asyncio.gather`` with at most ``limit`` running (the client pool has 100 connections)."""
    gate = asyncio.Semaphore(limit)

    async def one(coro: Awaitable[Any]) -> Any:
        async with gate:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros))


def rotated(items: Sequence[Any], k: int) -> list[Any]:
    """``items`` starting at position ``k`` (mod len): round k's order, so none is always first."""
    k %= len(items)
    return [*items[k:], *items[:k]]


def median_ratio(num: Sequence[float], den: Sequence[float]) -> float:
    """The median of the per-round ratios ``num[i] / den[i]`` (paired: measured seconds apart)."""
    return statistics.median(n / d for n, d in zip(num, den, strict=True))


__all__ = [
    "CHECK_TYPES",
    "PROBE",
    "REFERENCE_PROBE_US",
    "CheckType",
    "Conversation",
    "Dist",
    "Probe",
    "Run",
    "all_models_config",
    "bounded_gather",
    "drive",
    "interleaved",
    "median_ratio",
    "nemoguards_config",
    "no_rails_config",
    "probe_call",
    "rotated",
    "safe_texts",
    "samples_ns",
]
