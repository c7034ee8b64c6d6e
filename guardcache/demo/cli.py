"""``guardcache demo``: the product in one command, on built-in defaults, no keys, no GPU."""

from __future__ import annotations

import argparse
import asyncio
import logging
import textwrap
from collections.abc import Callable

from guardcache.cache import POLICY_NAMES
from guardcache.demo.report import p95_note, render_log_lines, render_refusals, render_table
from guardcache.demo.runner import CONFIG_DIR, STATS_LOGGER, PassResult, percentile, run_demo
from guardcache.demo.workload import build_workload, counts


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="replay a chat workload through cached NemoGuard rails against emulated NIMs",
        description=(
            "Starts four emulated NIMs (the main model, NemoGuard Content Safety, Topic Control and "
            "JailbreakDetect, with realistic latency), replays a built-in workload through LLMRails "
            "with NeMo's nemoguards rails (content safety, topic control and jailbreak detection on "
            "input, in parallel; content safety on output) three times: caching off, caching on, and "
            "caching on with the main model started during the input checks (rails.input.during_main), "
            "and prints them side by side, with latency for hit and miss turns apart."
        ),
    )
    # Three passes in about two minutes on a shared 2-core machine. The caching-off pass is the long
    # one (every turn makes five backend calls, the client and the four NIMs share the cores); more
    # turns in flight only adds CPU queueing to every turn's latency, hiding the NIM latency the
    # hit/miss split is about.
    p.add_argument("--turns", type=_bounded(int, 1), default=1500, help="chat turns per pass (default 1500)")
    p.add_argument(
        "--concurrency", type=_bounded(int, 1), default=16, help="turns in flight at once (default 16)"
    )
    p.add_argument(
        "--alpha", type=_bounded(float, 0), default=0.99, help="Zipf exponent of message repetition"
    )
    p.add_argument(
        "--unique", type=_bounded(float, 0, 1), default=0.25, help="share of never-repeated messages"
    )
    p.add_argument(
        "--time-scale",
        type=_bounded(float, 0),
        default=1.0,
        help="emulated latency scale: 1 realistic, 0 none",
    )
    p.add_argument(
        "--log-interval", type=_bounded(float, 1e-3), default=5.0, help="seconds between cache stats lines"
    )
    p.add_argument("--seed", type=int, default=0, help="workload seed")
    p.add_argument(
        "--policy",
        choices=POLICY_NAMES,
        default=POLICY_NAMES[0],
        help="the guard caches' eviction policy (cache.policy; default lfu)",
    )
    p.add_argument(
        "--in-process",
        action="store_true",
        help="serve the emulators from this process's event loop instead of child processes",
    )
    p.set_defaults(func=run)


def _bounded(kind: type[int] | type[float], low: float, high: float | None = None) -> Callable[[str], float]:
    """An argparse type: a value out of range is a usage error (exit 2, naming the flag), not a
    traceback from deep in the emulator or the config, nor a pass of zero turns that prints a table."""

    def parse(text: str) -> float:
        value = kind(text)
        if value < low or (high is not None and value > high):
            span = f">= {low:g}" if high is None else f"between {low:g} and {high:g}"
            raise argparse.ArgumentTypeError(f"must be {span}, not {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its "invalid ... value" message
    return parse


def run(args: argparse.Namespace) -> int:
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    logging.getLogger("uvicorn").setLevel(logging.WARNING)
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    workload = build_workload(args.turns, alpha=args.alpha, unique_share=args.unique, seed=args.seed)
    n = counts(workload)
    print(
        f"guardcache demo: {len(workload)} turns ({n['unique']} never repeated; {n['unsafe']} unsafe, "
        f"{n['off_topic']} off-topic, {n['jailbreak']} jailbreak attempts, {n['cut_reply']} whose reply "
        f"gets cut to an unsafe fragment), concurrency {args.concurrency}, "
        f"emulated NIM latency x{args.time_scale:g}"
    )
    print(f"rails: {CONFIG_DIR / 'config.yml'} (+ prompts.yml), one emulated NIM per model")
    print(HEADER)
    stats_log = logging.getLogger(STATS_LOGGER)
    propagate, stats_log.propagate = stats_log.propagate, False  # the demo prints these lines itself
    try:
        off, on, early = asyncio.run(
            run_demo(
                workload,
                concurrency=args.concurrency,
                time_scale=args.time_scale,
                log_interval=args.log_interval,
                in_process=args.in_process,
                policy=getattr(args, "policy", POLICY_NAMES[0]),  # (a Namespace built by hand has none)
            )
        )
    finally:
        stats_log.propagate = propagate
    print()
    print(render_table((off, on, early)))
    print()
    print(render_refusals(on))
    print()
    print(closing(on, early))
    print()
    print(p95_note(off, on))
    print("\nCache stats log lines (caching on pass), by model:")
    print(render_log_lines(on))
    return 0


HEADER = """\
three passes over the same turns, each from cold caches: caching off; caching on; "+ early main" =
  caching on with rails.input.during_main: true (the main model starts as soon as an input check
  asks its NIM, and is cancelled if an input rail blocks)
each turn is sorted by its own record (explain(): each check's from_cache):
  hit turn = every check of the turn answered from cache (input, and output when it got that far);
  input-miss turn = some input check asked its NIM; output-miss turn = inputs cached, the output
  check asked its NIM (the early start only helps input misses: the main model waits for the input
  verdict, not for the output check)"""


def closing(on: PassResult, early: PassResult) -> str:
    """How to read the latency rows, with this run's numbers."""
    hit, main = on.path_pct("hit", 0.5), percentile(on.main_seconds, 0.5)
    miss_on, miss_early = on.path_pct("input_miss", 0.5), early.path_pct("input_miss", 0.5)
    text = "How to read it: a hit turn costs about the main call alone (its checks are lookups)"
    if hit is not None and main is not None:
        text += f", p50 {hit * 1000:.0f} ms vs {main * 1000:.0f} ms"
    text += (
        ". The tail is the miss turns, which wait for the input check, then the main call, then the "
        "output check. The early main start cuts an input-miss turn to about max(input check, main "
        "call) + output check"
    )
    if miss_on and miss_early is not None:
        text += f" (p50 {miss_on * 1000:.0f} -> {miss_early * 1000:.0f} ms, {miss_early / miss_on:.2f}x)"
    text += (
        ", and pays with the main-model tokens of turns an input rail then blocks (a cancelled call's "
        "prefill and the tokens decoded before the cancel)."
    )
    return textwrap.fill(text, width=100)


__all__ = ["HEADER", "closing", "register", "run"]
