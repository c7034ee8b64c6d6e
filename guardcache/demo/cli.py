"""``guardcache demo``: the product in one command, on built-in defaults, no keys, no GPU."""

from __future__ import annotations

import argparse
import asyncio
import logging

from guardcache.demo.report import render_table
from guardcache.demo.runner import run_demo
from guardcache.demo.workload import build_workload


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="replay a chat workload through cached content-safety rails against emulated NIMs",
        description=(
            "Starts two emulated NIMs (the main model and NemoGuard Content Safety, with "
            "realistic latency), replays a built-in workload through LLMRails with input and output "
            "rails, first with caching off and then on, and prints both side by side."
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
    logging.getLogger("guardcache.cache.lfu").propagate = False  # the demo prints these lines itself
    workload = build_workload(args.turns, alpha=args.alpha, unique_share=args.unique, seed=args.seed)
    unsafe = sum(t.unsafe for t in workload)
    unique = sum(t.unique for t in workload)
    print(
        f"guardcache demo: {len(workload)} turns ({unique} never repeated, {unsafe} unsafe), "
        f"concurrency {args.concurrency}, emulated NIM latency x{args.time_scale:g}"
    )
    off, on = asyncio.run(
        run_demo(
            workload, concurrency=args.concurrency, time_scale=args.time_scale, log_interval=args.log_interval
        )
    )
    print()
    print(render_table(off, on))
    print("\nCache stats log lines (caching on pass):")
    for line in on.log_lines:
        print(f"  {line}")
    return 0


__all__ = ["register", "run"]
