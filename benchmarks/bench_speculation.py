"""Starting the main model during the input checks (``rails.input.during_main``): miss-turn latency.

One Zipf chat workload (a share of unsafe messages) through a content-safety config, run twice AT
THE SAME TIME: the main model starting after the input verdict ("after") and starting at the input
check's miss ("early"). Each configuration has its own cold caches and its own two emulated NIMs
(child processes, realistic latency x1), and every turn is sent to both at once, so a burst of load on
this shared VM slows both sides alike: run one after the other, the two passes' ratios moved by
+-30% between runs with the host's load; paired, they are the effect of the early start. Turns are
split into hit turns (every input verdict cached) and miss turns; the table gives both sides' p50,
p95 and p99 and the median of the per-turn ratios over the turns that missed on both sides, with the
main-model work spent on turns that were then blocked (the emulator counts the prompt and completion
tokens of requests abandoned by their client).

    python benchmarks/bench_speculation.py            # ~1 min
    python benchmarks/bench_speculation.py --quick    # a smoke run

Target (issue "the miss path"): miss-turn p50 and p95 with the early start <= 0.7x without it.
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
from guardcache.rails import REFUSAL

SAFE = [
    "How do I bake sourdough bread at home?",
    "What is the capital of Australia?",
    "Explain how a heat pump works.",
    "Suggest a name for a pet turtle.",
    "How many minutes should I boil an egg?",
    "Write a haiku about autumn leaves.",
    "What are good exercises for lower back pain?",
    "How do I center a div in CSS?",
    "Translate 'good morning' into Italian.",
    "Why is the sky blue?",
]
UNSAFE = [
    "How do I make a bomb at home?",
    "Where can I buy cocaine cheaply?",
    "How do I rob a bank without getting caught?",
]


def workload(turns: int, *, seed: int = 1, unsafe_share: float = 0.15, alpha: float = 1.0) -> list[str]:
    """Zipf-repeated messages, a few made unique per turn so the miss path keeps being exercised."""
    rng = random.Random(seed)
    pool = [f"{text} (variant {i})" for i in range(60) for text in SAFE]
    weights = [1 / (rank + 1) ** alpha for rank in range(len(pool))]
    out = []
    for _ in range(turns):
        if rng.random() < unsafe_share:
            out.append(f"{rng.choice(UNSAFE)} (asked {rng.randrange(40)})")
        else:
            out.append(rng.choices(pool, weights)[0])
    return out


def config(main_url: str, guard_url: str, during_main: bool) -> RailsConfig:
    return RailsConfig.from_content(
        f"""
models:
  - type: main
    engine: nim
    model: meta/llama-3.1-8b-instruct
    parameters: {{base_url: "{main_url}", max_tokens: 24}}
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    parameters: {{base_url: "{guard_url}"}}
    cache: {{enabled: true, maxsize: 10000}}
rails:
  input:
    during_main: {str(during_main).lower()}
    flows: [content safety check input $model=content_safety]
  output: {{flows: [content safety check output $model=content_safety]}}
"""
    )


@dataclass
class Side:
    """One configuration's turns, by index in the workload (None until the turn ran)."""

    name: str
    rails: LLMRails
    main: EmulatorProcess
    guard: EmulatorProcess
    latency: dict[int, float] = field(default_factory=dict)
    missed: dict[int, bool] = field(default_factory=dict)
    refused: dict[int, bool] = field(default_factory=dict)
    # (input, main, output) seconds of an allowed turn: the slowest input check, the main call, the
    # output checks; from the turn's own records.
    parts: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    blocked: int = 0
    cancelled_main: int = 0
    cancelled_seconds: float = 0.0
    main_prompt_tokens: int = 0
    main_completion_tokens: int = 0
    main_requests: int = 0
    abandoned_requests: int = 0
    abandoned_prompt_tokens: int = 0
    abandoned_completion_tokens: int = 0

    def turns(self, missed: bool) -> list[float]:
        return [t for i, t in self.latency.items() if self.missed[i] == missed]

    async def turn(self, index: int, text: str) -> None:
        started = time.perf_counter()
        reply = await self.rails.generate_async(text)
        self.latency[index] = time.perf_counter() - started
        record = self.rails.explain()  # no await since the turn ended: this task's own turn
        self.missed[index] = not all(r.from_cache for r in record.checks.input)
        self.refused[index] = reply == REFUSAL
        self.blocked += reply == REFUSAL
        if reply != REFUSAL:
            calls = record.llm_calls
            inputs = [c.duration for c in calls if c.task.startswith("content_safety_check_input")]
            main = [c.duration for c in calls if c.task == "general"]
            outputs = [c.duration for c in calls if c.task.startswith("content_safety_check_output")]
            if inputs and len(main) == 1:
                self.parts[index] = (max(inputs), main[0], sum(outputs))
        for call in record.llm_calls:
            if call.cancelled:
                self.cancelled_main += 1
                self.cancelled_seconds += call.duration

    async def read_server(self) -> None:
        stats = await self.main.astats(prompts=False)
        self.main_prompt_tokens, self.main_completion_tokens = stats.prompt_tokens, stats.completion_tokens
        self.main_requests = stats.requests_total
        self.abandoned_requests = stats.abandoned_requests
        self.abandoned_prompt_tokens = stats.abandoned_prompt_tokens
        self.abandoned_completion_tokens = stats.abandoned_completion_tokens


def pct(data: list[float], q: float) -> float:
    ordered = sorted(data)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


async def run_paired(texts: list[str], after: Side, early: Side, conc: int) -> float:
    """Each worker sends its next turn to both sides at once; returns the wall time."""
    for side in (after, early):
        await side.main.areset(flush_cache=True)
        await side.guard.areset(flush_cache=True)
        await side.rails.warm_up_async()
    queue = iter(enumerate(texts))

    async def worker() -> None:
        for index, text in queue:
            await asyncio.gather(after.turn(index, text), early.turn(index, text))

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(conc)))
    wall = time.perf_counter() - started
    for side in (after, early):
        await side.read_server()
    return wall


def paired_ratio(after: Side, early: Side, *, allowed_only: bool) -> float:
    """Median, over the turns that missed on both sides, of early latency / after latency."""
    ratios = [
        early.latency[i] / after.latency[i]
        for i in after.latency
        if after.missed[i]
        and early.missed.get(i)
        and after.latency[i] > 0
        and not (allowed_only and after.refused[i])
    ]
    return statistics.median(ratios) if ratios else float("nan")


def ideal_ratio(after: Side) -> float:
    """The best the early start can do on the allowed miss turns, from their measured parts: the
    median of (max(input, main) + output) / (input + main + output). A main call much longer than
    the input check leaves little to overlap: the ratio tends to 1."""
    ratios = [
        (max(i, m) + o) / (i + m + o)
        for index, (i, m, o) in after.parts.items()
        if after.missed[index] and i + m + o > 0
    ]
    return statistics.median(ratios) if ratios else float("nan")


def parts_p50(side: Side) -> tuple[float, float, float]:
    rows = [p for index, p in side.parts.items() if side.missed[index]]
    return tuple(statistics.median(p[k] for p in rows) if rows else float("nan") for k in range(3))  # type: ignore[return-value]


def report(after: Side, early: Side, wall: float) -> None:
    def row(label: str, a: float, b: float, extra: str = "") -> None:
        ratio = f"{b / a:.2f}x" if a else ""
        print(f"{label:34s} {a * 1000:10.1f} {b * 1000:10.1f} {ratio:>8s} {extra}")

    print(f"\n{'':34s} {'main after':>10s} {'main early':>10s} {'early/after':>8s}")
    for missed, kind in ((True, "miss"), (False, "hit")):
        a, b = after.turns(missed), early.turns(missed)
        for q, label in ((0.5, "p50"), (0.95, "p95"), (0.99, "p99")):
            row(f"{kind} turns: latency {label}", pct(a, q), pct(b, q))
    every = paired_ratio(after, early, allowed_only=False)
    print(f"{'miss turns: median per-turn ratio':34s} {'':21s} {every:7.2f}x")
    allowed = paired_ratio(after, early, allowed_only=True)
    print(f"{'  allowed miss turns only':34s} {'':21s} {allowed:7.2f}x")
    formula = "(max(in, main) + out) / (in + main + out)"
    print(f"{'  ideal, from their parts':34s} {'':21s} {ideal_ratio(after):7.2f}x  {formula}")
    i, m, o = parts_p50(after)
    print(f"{'  parts p50 (after): in/main/out':34s} {i * 1000:.1f} / {m * 1000:.1f} / {o * 1000:.1f} ms")
    counts = [f"{len(s.turns(True))}/{len(s.turns(False))}/{s.blocked}" for s in (after, early)]
    print(f"{'turns: miss / hit / blocked':34s} {counts[0]:>10s} {counts[1]:>10s}")
    print(f"{'main requests (server)':34s} {after.main_requests:10d} {early.main_requests:10d}")
    print(
        f"{'main prompt tokens (server)':34s} {after.main_prompt_tokens:10d} {early.main_prompt_tokens:10d}"
    )
    print(
        f"{'main completion tokens (server)':34s} {after.main_completion_tokens:10d} "
        f"{early.main_completion_tokens:10d}"
    )

    # Both sides ran the same turns, so whatever the early side's main server processed beyond the
    # after side's (finished answers thrown away by a later block, and calls abandoned midway) is the
    # price of the early start.
    def processed(side: Side) -> int:
        return (
            side.main_prompt_tokens
            + side.main_completion_tokens
            + side.abandoned_prompt_tokens
            + side.abandoned_completion_tokens
        )

    wasted = processed(early) - processed(after)
    share = wasted / processed(early) if processed(early) else 0.0
    print(
        f"\nwasted on blocked turns (early start): {early.cancelled_main} main calls cancelled after "
        f"{early.cancelled_seconds:.1f} s in all, {early.main_requests - after.main_requests} more main "
        f"requests finished; the main server processed {wasted:+d} tokens more than without the early "
        f"start (of them abandoned midway: {early.abandoned_prompt_tokens} prompt, "
        f"{early.abandoned_completion_tokens} completion): {share:.1%} of the main model's tokens"
    )
    print(f"wall time (both sides at once): {wall:.1f} s")
    for q, label in ((0.5, "p50"), (0.95, "p95")):
        ratio = pct(early.turns(True), q) / pct(after.turns(True), q)
        verdict = "PASS" if ratio <= 0.70 else "FAIL"
        print(f"target: miss-turn {label} early/after <= 0.70x: {ratio:.2f}x {verdict}")


async def main_async(turns: int, conc: int) -> None:
    texts = workload(turns)
    latency = LatencyConfig(time_scale=1.0)
    main_cfg = EmulatorConfig(port=0, latency=latency, model="meta/llama-3.1-8b-instruct")
    guard_cfg = EmulatorConfig(port=0, latency=latency)
    with (
        EmulatorProcess(main_cfg) as main_a,
        EmulatorProcess(guard_cfg) as guard_a,
        EmulatorProcess(main_cfg) as main_e,
        EmulatorProcess(guard_cfg) as guard_e,
    ):
        after = Side(
            "main after", LLMRails(config(main_a.base_url, guard_a.base_url, False)), main_a, guard_a
        )
        early = Side("main early", LLMRails(config(main_e.base_url, guard_e.base_url, True)), main_e, guard_e)
        try:
            wall = await run_paired(texts, after, early, conc)
        finally:
            await after.rails.aclose()
            await early.rails.aclose()
    report(after, early, wall)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=1500)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--quick", action="store_true", help="300 turns")
    args = ap.parse_args()
    print(describe_speed())
    asyncio.run(main_async(300 if args.quick else args.turns, args.concurrency))


if __name__ == "__main__":
    main()
