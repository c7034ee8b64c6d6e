"""Shadow rails off the critical path: live turn latency with a shadow guard whose NIM hangs.

One Zipf chat workload through two configurations run AT THE SAME TIME, each turn sent to both at
once (so a burst of load on this shared VM slows both alike):

- "live only": a content-safety input and output rail;
- "with shadow": the same live rails, plus a shadow content-safety rail (input and output, another
  model type and prompt) on EVERY turn (``sample: 1.0``) whose NIM hangs on every request
  (``hang_rate: 1``): the worst a shadow guard can do.

Each side has its own emulated NIMs (child processes, realistic latency x1) and its own cold caches.
The table gives both sides' p50 and p95 turn latency and the median of the per-turn ratios, and
what the shadow rails did (samples started, dropped at the concurrency limit).

    python benchmarks/bench_shadow.py            # ~1 min
    python benchmarks/bench_shadow.py --quick    # a smoke run

Target (issue 31): live turns unaffected by a hanging shadow guard: p50 ratio ~1.00 (within the
noise of two paired runs of the same config, which the "A/A" row measures).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from dataclasses import dataclass, field

from machine import describe_speed

from guardcache import LLMRails, RailsConfig
from guardcache.emulator import EmulatorConfig, EmulatorProcess, LatencyConfig
from guardcache.emulator.config import FaultConfig
from guardcache.testing.shadow import GUARD_MODEL, MAIN_MODEL, shadow_prompts, shadow_yaml

TOPICS = ["bread", "heat pumps", "turtles", "eggs", "haiku", "back pain", "CSS", "Italian", "the sky"]


def workload(turns: int, *, seed: int = 1, alpha: float = 1.0) -> list[str]:
    """Zipf-repeated questions: a mix of hit and miss turns, as live traffic has."""
    rng = random.Random(seed)
    pool = [f"Tell me something about {topic} (question {i})." for i in range(80) for topic in TOPICS]
    weights = [1 / (rank + 1) ** alpha for rank in range(len(pool))]
    return [rng.choices(pool, weights)[0] for _ in range(turns)]


def live_yaml(main_url: str, guard_url: str) -> str:
    return f"""
models:
  - type: main
    engine: nim
    model: {MAIN_MODEL}
    parameters: {{base_url: "{main_url}", max_tokens: 24}}
  - type: content_safety
    engine: nim
    model: {GUARD_MODEL}
    parameters: {{base_url: "{guard_url}"}}
rails:
  input: {{flows: [content safety check input $model=content_safety]}}
  output: {{flows: [content safety check output $model=content_safety]}}
"""


def live(main: EmulatorProcess, guard: EmulatorProcess) -> LLMRails:
    return LLMRails(RailsConfig.from_content(live_yaml(main.base_url, guard.base_url)))


@dataclass
class Side:
    name: str
    rails: LLMRails
    latency: dict[int, float] = field(default_factory=dict)

    async def turn(self, index: int, text: str) -> None:
        started = time.perf_counter()
        await self.rails.generate_async(messages=[{"role": "user", "content": text}])
        self.latency[index] = time.perf_counter() - started


def pct(data: list[float], q: float) -> float:
    ordered = sorted(data)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


async def run_paired(texts: list[str], a: Side, b: Side, conc: int) -> None:
    for side in (a, b):
        await side.rails.warm_up_async()
    queue = iter(enumerate(texts))

    async def worker() -> None:
        for index, text in queue:
            await asyncio.gather(a.turn(index, text), b.turn(index, text))

    await asyncio.gather(*(worker() for _ in range(conc)))


def row(label: str, a: Side, b: Side) -> None:
    la, lb = list(a.latency.values()), list(b.latency.values())
    ratios = [b.latency[i] / a.latency[i] for i in a.latency if a.latency[i] > 0]
    print(
        f"{label:<26} {pct(la, 0.5) * 1000:8.1f} {pct(lb, 0.5) * 1000:8.1f} {pct(la, 0.95) * 1000:8.1f} "
        f"{pct(lb, 0.95) * 1000:8.1f} {statistics.median(ratios):8.3f}"
    )


async def main_async(turns: int, conc: int) -> None:
    texts = workload(turns)
    latency = LatencyConfig(time_scale=1.0)
    main_cfg = EmulatorConfig(port=0, latency=latency, model=MAIN_MODEL)
    guard_cfg = EmulatorConfig(port=0, latency=latency)
    hang_cfg = EmulatorConfig(port=0, latency=latency, faults=FaultConfig(hang_rate=1.0, hang_seconds=600))
    with (
        EmulatorProcess(main_cfg) as main_a,
        EmulatorProcess(guard_cfg) as guard_a,
        EmulatorProcess(main_cfg) as main_b,
        EmulatorProcess(guard_cfg) as guard_b,
        EmulatorProcess(hang_cfg) as hanging,
    ):
        print(f"{'pair':<26} {'p50 A':>8} {'p50 B':>8} {'p95 A':>8} {'p95 B':>8} {'median B/A':>8}  (ms)")
        # A/A: the same config on both sides, each with its own NIMs: the noise floor of the pairing.
        a = Side(
            "live only", LLMRails(RailsConfig.from_content(live_yaml(main_a.base_url, guard_a.base_url)))
        )
        b = Side(
            "live only", LLMRails(RailsConfig.from_content(live_yaml(main_b.base_url, guard_b.base_url)))
        )
        try:
            await run_paired(texts, a, b, conc)
        finally:
            await asyncio.gather(a.rails.aclose(), b.rails.aclose())
        row("A/A (live only, twice)", a, b)
        for emulator in (main_a, guard_a, main_b, guard_b):
            await emulator.areset(flush_cache=True)
        shadow_config = RailsConfig.from_content(
            shadow_yaml(
                main_b.base_url,
                guard_b.base_url,
                hanging.base_url,
                sample=1.0,
                max_concurrency=4,
                shadow_timeout=120,
                close_timeout=0.5,
                max_tokens=24,
            ),
            shadow_prompts(),
        )
        a = Side(
            "live only", LLMRails(RailsConfig.from_content(live_yaml(main_a.base_url, guard_a.base_url)))
        )
        b = Side("with shadow", LLMRails(shadow_config))
        try:
            await run_paired(texts, a, b, conc)
            assert b.rails.runner.shadow is not None
            shadow = b.rails.runner.shadow.stats()
        finally:
            await asyncio.gather(a.rails.aclose(), b.rails.aclose())
        row("A/B (B: hanging shadow)", a, b)
        print(
            f"shadow side: {shadow.sampled} samples started, {dict(shadow.dropped)} dropped, "
            f"{shadow.in_flight} hanging at the end (the concurrency limit)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=1200)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--quick", action="store_true", help="200 turns")
    args = ap.parse_args()
    print(describe_speed())
    asyncio.run(main_async(200 if args.quick else args.turns, args.concurrency))


if __name__ == "__main__":
    main()
