"""One worker process of target 3's multi-process run: warm guarded turns, timed at a barrier.

    python benchmarks/e2e_worker.py --guard URL --texts FILE --turns N --concurrency C --rounds R

A service on a 2-core machine runs two worker processes (uvicorn/gunicorn ``--workers 2``): one event
loop can only use one core. Each worker builds its own ``LLMRails`` (its own in-process cache), fills
it with one pass over the texts (the only backend calls), warms up, prints ``READY``, then for each
round waits for one line on stdin and prints one JSON line: turns, wall-clock start and end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from e2e_micro import drive
from e2e_support import EchoChatModel, make_rails, user_turn


async def run(args: argparse.Namespace, texts: list[str]) -> None:
    rails = make_rails("c", args.guard, llm=EchoChatModel(delay_s=0.0))
    turn = user_turn(rails)
    await drive(turn, texts, len(texts), 32)  # fills the cache
    await drive(turn, texts, min(args.turns, 500), args.concurrency)  # warm-up, all hits
    print("READY", flush=True)
    for _ in range(args.rounds):
        await asyncio.to_thread(sys.stdin.readline)  # the barrier
        started = time.time()
        await drive(turn, texts, args.turns, args.concurrency)
        print(json.dumps({"turns": args.turns, "start": started, "end": time.time()}), flush=True)
    await rails.aclose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--guard", required=True, help="the guard emulator's base URL")
    p.add_argument("--texts", required=True, help="a JSON list of user messages")
    p.add_argument("--turns", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    with open(args.texts, encoding="utf-8") as f:
        texts: list[str] = json.load(f)
    asyncio.run(run(args, texts))


if __name__ == "__main__":
    main()
