"""guardcache's LLM client at two (or more) commits, side by side: client CPU per call, interleaved.

    python benchmarks/ab_client.py 736640c WORKTREE            # 6 rounds, plain and streamed
    python benchmarks/ab_client.py HEAD~2 HEAD --rounds 8

Why: a change to the client (limits, checks before reuse) must be measured against the code it
changes, in one run, on the same server: ``bench_http_clients.py`` compares libraries, this compares
commits. Each ref is checked out into a temporary git worktree (``WORKTREE``: this checkout as it is)
and gets its own worker process, whose ``guardcache`` comes from that tree; every worker calls the
same canned server (bench_http_clients' child process: it answers in microseconds, so it is not
what is measured) through ``ChatClient.complete`` on the default pool, sequentially and with 8
concurrent tasks, and through the main model's stream. Rounds alternate between the workers, so a
VM that changes speed mid-run slows every side alike; the median of the rounds is printed.
Not part of the test run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ab_serve import checkout, remove
from bench_http_clients import BODY, MODEL, serve
from bench_serve import REPO
from machine import describe_speed

WORKER = r"""
import asyncio, json, sys, time
base, n = sys.argv[1], int(sys.argv[2])
from guardcache.llm.client import ChatClient
from guardcache.rails.main_llm import ClientLLM
try:
    from guardcache.llm.stream import StreamTotals
except ImportError:  # before ChatClient.stream was public
    from guardcache.rails.main_llm import StreamTotals
messages = json.loads(sys.argv[3])

async def measure(call, concurrency):
    for _ in range(20):
        await call()
    per = n // concurrency
    async def worker():
        for _ in range(per):
            await call()
    cpu0 = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (time.process_time() - cpu0) / (per * concurrency) * 1e6

async def main():
    client = ChatClient(base, model=sys.argv[4])
    main = ClientLLM(client, {"max_tokens": 16})
    async def complete():
        return await client.complete(messages, max_tokens=16)
    async def stream():
        async for _ in main.stream(messages, StreamTotals()):
            pass
    out = {"plain, sequential": await measure(complete, 1), "plain, 8 concurrent": await measure(complete, 8),
           "streamed, sequential": await measure(stream, 1)}
    print(json.dumps(out))

asyncio.run(main())
"""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("refs", nargs="+", help="git refs (or WORKTREE for this checkout as it is)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=2000, help="per pass")
    args = parser.parse_args()
    print(describe_speed())
    ports: multiprocessing.Queue[int] = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve, args=(ports,), daemon=True)
    server.start()
    trees: list[Path] = []
    try:
        base = f"http://127.0.0.1:{ports.get(timeout=30)}/v1"
        with tempfile.TemporaryDirectory() as tmp:
            sides: dict[str, Path] = {}
            for i, ref in enumerate(args.refs):
                tree = checkout(ref, Path(tmp) / f"tree{i}")
                if tree != REPO:
                    trees.append(tree)
                sides[f"{ref} ({tree.name})"] = tree
            rows: dict[str, dict[str, list[float]]] = {name: {} for name in sides}
            messages = json.dumps(BODY["messages"])
            for _ in range(args.rounds):
                for name, tree in sides.items():
                    done = subprocess.run(
                        [sys.executable, "-c", WORKER, base, str(args.requests), messages, MODEL],
                        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                        cwd=tree,
                        check=True,
                        capture_output=True,
                        text=True,
                    )
                    for kind, value in json.loads(done.stdout.strip().splitlines()[-1]).items():
                        rows[name].setdefault(kind, []).append(value)
            first = next(iter(rows))
            for kind in rows[first]:
                print(f"\n{kind}: client CPU per call, median of {args.rounds} interleaved rounds")
                base_median = statistics.median(rows[first][kind])
                for name, kinds in rows.items():
                    median = statistics.median(kinds[kind])
                    each = " ".join(f"{v:.0f}" for v in kinds[kind])
                    print(
                        f"   {name:<32} {median:6.0f} us ({median / base_median:4.2f}x the first)   [{each}]"
                    )
            print(describe_speed())
    finally:
        server.terminate()
        server.join()
        remove(trees)
    return 0


if __name__ == "__main__":
    sys.exit(main())
