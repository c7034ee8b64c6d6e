"""``guardcache demo``: the product in one command, on built-in defaults, no keys, no GPU."""

from __future__ import annotations

import argparse
import asyncio
import logging

from guardcache.demo.report import render_log_lines, render_table
from guardcache.demo.runner import CONFIG_DIR, STATS_LOGGER, run_demo
from guardcache.demo.workload import build_workload, counts


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="replay a chat workload through cached NemoGuard rails against emulated NIMs",
        description=(
            "Starts four emulated NIMs (the main model, NemoGuard Content Safety, Topic Control and "
            "JailbreakDetect, with realistic latency), replays a built-in workload through LLMRails "
            "with NeMo's nemoguards rails (content safety, topic control and jailbreak detection on "
            "input, in parallel; content safety on output), first with caching off and then on, and "
            "prints both side by side."
        ),
    )
    p.add_argument("--turns", type=int, default=3000, help="chat turns per pass (default 3000)")
    p.add_argument("--concurrency", type=int, default=64, help="turns in flight at once (default 64)")
    p.add_argument("--alpha", type=float, default=0.99, help="Zipf exponent of message repetition")
    p.add_argument("--unique", type=float, default=0.25, help="share of never-repeated messages")
    p.add_argument(
        "--time-scale", type=float, default=1.0, help="emulated latency scale: 1 realistic, 0 none"
    )
    p.add_argument("--log-interval", type=float, default=5.0, help="seconds between cache stats lines")
    p.add_argument("--seed", type=int, default=0, help="workload seed")
    p.add_argument(
        "--in-process",
        action="store_true",
        help="serve the emulators from this process's event loop instead of child processes",
    )
    p.set_defaults(func=run)


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
    stats_log = logging.getLogger(STATS_LOGGER)
    propagate, stats_log.propagate = stats_log.propagate, False  # the demo prints these lines itself
    try:
        off, on = asyncio.run(
            run_demo(
                workload,
                concurrency=args.concurrency,
                time_scale=args.time_scale,
                log_interval=args.log_interval,
                in_process=args.in_process,
            )
        )
    finally:
        stats_log.propagate = propagate
    print()
    print(render_table(off, on))
    print("\nCache stats log lines (caching on pass), by model:")
    print(render_log_lines(on))
    return 0


__all__ = ["register", "run"]
