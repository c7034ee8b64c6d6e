"""``guardcache serve`` at two (or more) commits, side by side: server CPU per request, interleaved.

    python benchmarks/ab_serve.py HEAD~3 HEAD            # plain and streamed, 6 rounds
    python benchmarks/ab_serve.py main WORKTREE --rounds 8 --modes plain

Each ref is checked out into a temporary git worktree (``WORKTREE`` means this checkout as it is,
uncommitted changes included) and served by its own ``guardcache serve`` process, all at once, in
front of the same emulated NIMs (``time_scale=0``) with the same config (input and output
content-safety rails, cached: 100% hits). Rounds alternate between the servers, so a VM that
changes speed mid-run slows every side alike; the median of the rounds is printed with each round.
The load is bench_serve's lean generator (aiohttp, pre-encoded bodies, concurrency 32), so each
server is measured busy. Not part of the test run.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_serve import MESSAGES, REPO, Child, cpu_seconds, run_load, wait_ready, write_config
from machine import describe_speed


def checkout(ref: str, into: Path) -> Path:
    """The tree to serve for ``ref``: this checkout for WORKTREE, else a detached git worktree."""
    if ref == "WORKTREE":
        return REPO
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(into), ref],
        check=True,
        capture_output=True,
    )
    return into


def remove(trees: list[Path]) -> None:
    """Remove the temporary worktrees ``checkout`` made."""
    for tree in trees:
        with contextlib.suppress(subprocess.CalledProcessError):
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                check=True,
                capture_output=True,
            )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("refs", nargs="+", help="git refs (or WORKTREE for this checkout as it is)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=3.0, help="each measured pass (default 3)")
    parser.add_argument(
        "--modes", nargs="*", default=["lean", "lean-stream"], choices=["lean", "lean-stream"]
    )
    args = parser.parse_args()

    from guardcache.emulator import EmulatorConfig, EmulatorProcess, LatencyConfig

    print(describe_speed())
    fast = LatencyConfig(time_scale=0)
    trees: list[Path] = []
    with (
        EmulatorProcess(EmulatorConfig(port=0, model="meta/llama-3.1-8b-instruct", latency=fast)) as main_emu,
        EmulatorProcess(EmulatorConfig(port=0, latency=fast)) as guard_emu,
        tempfile.TemporaryDirectory() as tmp,
    ):
        main_url = f"http://127.0.0.1:{main_emu.port}/v1"
        config = write_config(Path(tmp) / "ab", main_url, f"http://127.0.0.1:{guard_emu.port}/v1")
        servers: dict[str, tuple[Child, str]] = {}
        try:
            for i, ref in enumerate(args.refs):
                tree = checkout(ref, Path(tmp) / f"tree{i}")
                if tree != REPO:
                    trees.append(tree)
                cmd = [sys.executable, "-m", "guardcache", "serve", "--config", str(config), "--port", "0"]
                child = Child([*cmd, "--no-warm-up"], env={"PYTHONPATH": str(tree)}, cwd=tree)
                url = f"http://127.0.0.1:{child.port()}"
                servers[f"{ref} ({tree.name})"] = (child, f"{url}/v1")
                wait_ready(f"{url}/health/ready")
                run_load(f"{url}/v1", "lean", 8, count=len(MESSAGES) * 8)  # every check cached
            for mode in args.modes:
                rows: dict[str, list[float]] = {name: [] for name in servers}
                for _ in range(args.rounds):
                    for name, (child, url) in servers.items():
                        cpu0 = cpu_seconds(child.proc.pid)
                        got = run_load(url, mode, 32, seconds=args.seconds)
                        done = len(got["latencies"])
                        if not done or got["errors"]:
                            raise SystemExit(f"{name}: {got['errors']} errors ({got['first_error']})")
                        rows[name].append((cpu_seconds(child.proc.pid) - cpu0) / done * 1e6)
                print(f"\n{mode}: server CPU per request, median of {args.rounds} interleaved rounds")
                first = statistics.median(next(iter(rows.values())))
                for name, values in rows.items():
                    median = statistics.median(values)
                    each = " ".join(f"{v:.0f}" for v in values)
                    print(f"   {name:<40} {median:6.0f} us ({median / first:4.2f}x the first)   [{each}]")
            print(describe_speed())
        finally:
            for child, _ in servers.values():
                child.stop()
            remove(trees)
    return 0


if __name__ == "__main__":
    sys.exit(main())
