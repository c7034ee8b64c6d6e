"""Targets 2 and 3 of ``bench_e2e.py``: the cost of a cached check, and warm-cache turn throughput.

Both run against a guard emulator only to fill the cache; the timed loops make no backend call
(verified by the emulator's request counter).
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import io
import json
import pstats
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e_support import EchoChatModel, close_caches, make_rails, pct, rails_config, user_turn
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import HumanMessage

from guardcache import LLMRails
from guardcache.emulator import EmulatorProcess
from guardcache.llm.records import request_scope
from guardcache.testing import ProcessFleet

# -- timing helpers -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cost:
    """Per-call cost of one layer, in microseconds (the round with the lowest p50)."""

    layer: str
    p50_us: float
    p99_us: float
    mean_us: float
    calls: int


def _cost(layer: str, samples_ns: Sequence[int]) -> Cost:
    us = [s / 1000 for s in samples_ns]
    return Cost(layer, pct(us, 0.50), pct(us, 0.99), sum(us) / len(us), len(us))


Probe = Callable[[int], Any]  # returns an awaitable when the layer is async


async def _samples(fn: Probe, n: int, is_async: bool) -> list[int]:
    """``n`` one-call timings of ``fn(i)`` with ``perf_counter_ns`` (timer overhead included)."""
    samples = [0] * n
    clock = time.perf_counter_ns
    if is_async:
        for i in range(n):
            t0 = clock()
            await fn(i)
            samples[i] = clock() - t0
    else:
        for i in range(n):
            t0 = clock()
            fn(i)
            samples[i] = clock() - t0
    return samples


async def time_layers(layers: Sequence[tuple[str, Probe, bool]], n: int, rounds: int) -> list[Cost]:
    """Time every layer in ``rounds`` interleaved rounds of ``n // rounds`` calls (after a warm-up);
    each layer reports its best round, so a burst of load from other processes hits one round only."""
    per_round = max(1, n // rounds)
    best: dict[str, Cost] = {}
    for _ in range(rounds):
        for name, fn, is_async in layers:
            await _samples(fn, min(per_round, 1000), is_async)  # warm-up
            cost = _cost(name, await _samples(fn, per_round, is_async))
            if name not in best or cost.p50_us < best[name].p50_us:
                best[name] = cost
    return [best[name] for name, _, _ in layers]


async def drive(
    fn: Callable[[str], Awaitable[Any]], texts: Sequence[str], turns: int, concurrency: int
) -> float:
    """Run ``turns`` calls of ``fn(text)`` (cycling ``texts``) from ``concurrency`` workers;
    returns the wall time in seconds."""
    items = iter([texts[i % len(texts)] for i in range(turns)])

    async def worker() -> None:
        for text in items:
            await fn(text)

    gc.collect()
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


# -- target 2: what one cached check costs ---------------------------------------------------------


async def cached_check_costs(
    guard: EmulatorProcess, texts: Sequence[str], n: int, rounds: int = 5
) -> list[Cost]:
    """p50/p99 of one warm-cache check, layer by layer, from the raw LFU up to ``check_async``.

    One input rail (content safety), a cache warmed with ``texts`` (cycled, so the LFU touches
    several entries rather than one hot slot).
    """
    rails = make_rails("c", guard.base_url, llm=None, output=False)
    rail = rails._runtime.input_rails[0]
    check = rail.check
    cache = rails.model_caches["content_safety"]
    msgs = [[{"role": "user", "content": t}] for t in texts]
    variables = [{"user_input": t} for t in texts]
    await asyncio.gather(*(rails.check_async(m) for m in msgs))  # fill: one backend call per text
    before = (await guard.astats(prompts=False)).requests_total
    keys = [check.key(v) for v in variables]
    k = len(texts)

    async def noop() -> None:
        return None

    async def compute() -> Any:  # never called: every key is stored
        raise AssertionError("cache miss in a warm-cache measurement")

    async def scoped_check_run(i: int) -> Any:
        with request_scope():
            return await check.run(variables[i % k])

    layers: list[tuple[str, Probe, bool]] = [
        ("timer + await of an empty coroutine", lambda i: noop(), True),
        ("LFUCache.get (hit)", lambda i: cache.get(keys[i % k]), False),
        ("LLMCheck.key (normalize + blake2b)", lambda i: check.key(variables[i % k]), False),
        ("LFUCache.get_or_compute (hit)", lambda i: cache.get_or_compute(keys[i % k], compute), True),
        ("LLMCheck.run (hit)", lambda i: check.run(variables[i % k]), True),
        ("LLMCheck.run in a request scope (hit)", scoped_check_run, True),
        ("Rail.run (hit)", lambda i: rail.run(variables[i % k]), True),
        ("LLMRails.check_async, 1 input rail (hit)", lambda i: rails.check_async(msgs[i % k]), True),
    ]
    costs = await time_layers(layers, n, rounds)
    after = (await guard.astats(prompts=False)).requests_total
    if after != before:
        raise AssertionError(f"the warm-cache loop made {after - before} backend calls")
    close_caches(rails)
    return costs


# -- target 3: warm-cache turns per second ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Throughput:
    """Turns/s with a warm cache at one concurrency, guarded and bare, for one main model."""

    model: str
    concurrency: int
    turns: int
    guarded: float  # turns/s through generate_async, input + output rails, all hits
    no_rails: float  # turns/s through generate_async of an LLMRails without rails
    bare: float  # turns/s of the main model's ainvoke alone

    @property
    def middleware_us(self) -> float:
        """Microseconds the middleware adds to a turn: 1/guarded - 1/bare."""
        return (1 / self.guarded - 1 / self.bare) * 1e6


def _models() -> dict[str, Callable[[], Any]]:
    return {
        "EchoChatModel (native _agenerate)": lambda: EchoChatModel(delay_s=0.0),
        "FakeListChatModel (thread pool)": lambda: FakeListChatModel(responses=["Happy to help with that."]),
    }


async def warm_throughput(
    guard: EmulatorProcess,
    texts: Sequence[str],
    concurrencies: Sequence[int],
    turns: int,
    *,
    rounds: int = 3,
    fake_list_concurrency: Sequence[int] = (32,),
) -> tuple[list[Throughput], int]:
    """Guarded (all cache hits), no-rails and bare turns/s per model and concurrency.

    The three variants are interleaved in ``rounds`` rounds and each keeps its best round.
    ``FakeListChatModel`` (no native async: one thread-pool hop per call) runs only at
    ``fake_list_concurrency``. Returns the rows and the backend calls made while timing (must be 0).
    """
    rows: list[Throughput] = []
    leaked = 0
    for name, factory in _models().items():
        levels = concurrencies if name.startswith("Echo") else fake_list_concurrency
        if not levels:
            continue
        llm = factory()
        guarded = make_rails("c", guard.base_url, llm=llm)
        plain = LLMRails(rails_config(guard.base_url, cache=True, input_=False, output=False), llm=llm)

        turn, no_rails = user_turn(guarded), user_turn(plain)

        async def bare(t: str, m: Any = llm) -> Any:
            return await m.ainvoke([HumanMessage(content=t)])

        await drive(turn, texts, len(texts), 32)  # fills the cache: the only backend calls
        before = (await guard.astats(prompts=False)).requests_total
        for c in levels:
            best = {"guarded": 0.0, "no_rails": 0.0, "bare": 0.0}
            variants = {"bare": bare, "no_rails": no_rails, "guarded": turn}
            for fn in variants.values():
                await drive(fn, texts, min(turns, 500), c)  # warm-up
            for _ in range(rounds):
                for key, fn in variants.items():
                    best[key] = max(best[key], turns / await drive(fn, texts, turns, c))
            rows.append(Throughput(name, c, turns, best["guarded"], best["no_rails"], best["bare"]))
        leaked += (await guard.astats(prompts=False)).requests_total - before
        close_caches(guarded)
    return rows, leaked


@dataclass(frozen=True, slots=True)
class FleetThroughput:
    """Aggregate warm-cache guarded turns/s of ``procs`` worker processes started together."""

    procs: int
    concurrency: int  # per process
    turns: int  # per process per round
    guarded: float  # all processes' turns / (last end - first start), best round


WORKER = Path(__file__).with_name("e2e_worker.py")


async def fleet_throughput(
    guard: EmulatorProcess,
    texts: Sequence[str],
    procs: int,
    concurrencies: Sequence[int],
    turns: int,
    *,
    rounds: int = 3,
) -> tuple[list[FleetThroughput], int]:
    """Target 3 as a 2-core service runs it: ``procs`` worker processes (one event loop per core),
    each with its own warm cache, released together; per-process concurrency ``c // procs``.

    Returns the rows and the backend calls made while timing (must be 0: every check a hit).
    """
    rows: list[FleetThroughput] = []
    leaked = 0
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(list(texts)), encoding="utf-8")
        for total in concurrencies:
            per_proc = max(1, total // procs)
            argv = [sys.executable, str(WORKER), "--guard", guard.base_url, "--texts", str(texts_file)]
            argv += ["--turns", str(turns), "--concurrency", str(per_proc), "--rounds", str(rounds)]
            async with ProcessFleet([argv] * procs, step_timeout=300) as fleet:
                before = (await guard.astats(prompts=False)).requests_total
                best = 0.0
                for _ in range(rounds):
                    await fleet.release()
                    reports = [json.loads(await fleet.readline(w)) for w in fleet.procs]
                    span = max(r["end"] for r in reports) - min(r["start"] for r in reports)
                    best = max(best, sum(r["turns"] for r in reports) / span)
                leaked += (await guard.astats(prompts=False)).requests_total - before
                rows.append(FleetThroughput(procs, per_proc, turns, best))
                for w in fleet.procs:
                    if await asyncio.wait_for(w.wait(), 60) != 0:
                        raise RuntimeError("a throughput worker failed")
    return rows, leaked


async def profile_warm_turns(guard: EmulatorProcess, texts: Sequence[str], turns: int, top: int = 30) -> str:
    """cProfile of warm-cache guarded turns at concurrency 32 (EchoChatModel, no sleep)."""
    rails = make_rails("c", guard.base_url, llm=EchoChatModel(delay_s=0.0))
    turn = user_turn(rails)
    await drive(turn, texts, len(texts), 32)
    prof = cProfile.Profile()
    prof.enable()
    await drive(turn, texts, turns, 32)
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    close_caches(rails)
    return out.getvalue()


__all__ = [
    "Cost",
    "FleetThroughput",
    "Throughput",
    "cached_check_costs",
    "drive",
    "fleet_throughput",
    "profile_warm_turns",
    "warm_throughput",
]
