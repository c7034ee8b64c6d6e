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

``--instructions`` counts instead of timing: each server runs under valgrind's callgrind, and a
round is a fixed number of requests (``--requests``) between a zeroing and a dump of its counters,
so a round reports user-space instructions per request, the same on a quiet machine and a busy one
(a shared 2-vCPU VM moves CPU time by +-8% between rounds, more than the differences looked for).
What it leaves out: time in the kernel (system calls) and what an instruction costs (cache misses),
so it decides between code paths, and CPU time stays the measure of record. Needs ``valgrind``
(``apt-get install -y valgrind``); a server under it runs ~50x slower, so rounds are short.

``--floor`` serves bench_serve's floor beside each ref (``benchmarks/serve_floor.py proxy`` on that
ref's tree: uvicorn forwarding each request upstream on its h1 client, nothing else; under callgrind
too with ``--instructions``), measured the same way, so a ref's figure reads as a ratio to its floor;
``--floor proxy guard`` adds serve_floor's ``guard`` (the least a caching guard does on top).
``--unguarded`` serves each ref a second time with the same config and no rails: what the server
costs before any check (protections, the turn, the main call, metrics, the answer), so a ref's
figure splits into the server's own cost and what its checks add.
``--modes plain stream`` add the official ``openai`` client's load (bench_serve's other load: more
headers per request, one request per server wake-up when the server is not slowed down).

    python benchmarks/ab_serve.py HEAD WORKTREE --floor --instructions --rounds 1 --requests 300
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_serve import MESSAGES, REPO, Child, cpu_seconds, run_load, wait_ready, write_config
from machine import describe_speed


def checkout(ref: str, into: Path) -> Path:
    """The tree to serve for ``ref``: this checkout for WORKTREE, a folder as it is (a tree prepared
    by hand: a commit with some files changed), else a detached git worktree."""
    if ref == "WORKTREE":
        return REPO
    if Path(ref).is_dir():
        return Path(ref).resolve()
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


VALGRIND = ["valgrind", "--tool=callgrind", "--quiet", "--trace-children=no"]


def instructions_per_request(child: Child, url: str, mode: str, requests: int) -> float:
    """Thousands of instructions the server ran per request over ``requests`` requests: its
    callgrind counters are zeroed before and dumped after (one dump file per call)."""
    pid = str(child.proc.pid)
    subprocess.run(["callgrind_control", "--zero", pid], check=True, capture_output=True)
    got = run_load(url, mode, 8, count=requests)
    if got["errors"]:
        raise SystemExit(f"{got['errors']} errors ({got['first_error']})")
    subprocess.run(["callgrind_control", "--dump", pid], check=True, capture_output=True)
    return _latest_total(child) / len(got["latencies"]) / 1e3


def syscalls_per_request(child: Child, url: str, mode: str, requests: int) -> list[tuple[str, float]]:
    """System calls of the server (all threads) per request over ``requests`` requests, by call,
    most first: ``strace -c`` attached for the pass."""
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
        tracer = subprocess.Popen(
            ["strace", "-c", "-f", "-o", out.name, "-p", str(child.proc.pid)], stderr=subprocess.DEVNULL
        )
        time.sleep(1.0)  # attached
        got = run_load(url, mode, 8, count=requests)
        tracer.send_signal(signal.SIGINT)
        tracer.wait(30)
        done = max(len(got["latencies"]), 1)
        rows = []
        for line in out.read().splitlines():
            parts = line.split()
            if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
                calls = int(parts[3])
                rows.append((parts[-1], calls / done))
    return sorted(rows, key=lambda r: -r[1])


def _latest_total(child: Child) -> float:
    """The ``totals:`` line of the newest dump callgrind wrote for ``child``."""
    flag = "--callgrind-out-file="
    out = next(str(arg)[len(flag) :] for arg in child.proc.args if str(arg).startswith(flag))
    dumps = sorted(Path(out).parent.glob(Path(out).name + ".*"), key=lambda p: p.stat().st_mtime)
    for line in dumps[-1].read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return float(line.split()[1])
    raise SystemExit(f"no totals in {dumps[-1]}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("refs", nargs="+", help="git refs (or WORKTREE for this checkout as it is)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=3.0, help="each measured pass (default 3)")
    parser.add_argument(
        "--modes",
        nargs="*",
        default=["lean", "lean-stream"],
        choices=["lean", "lean-stream", "plain", "stream"],
    )
    parser.add_argument(
        "--floor",
        nargs="*",
        default=[],
        choices=["proxy", "guard", "canned"],
        help="serve these reference servers of benchmarks/serve_floor.py beside each ref, measured "
        "the same way (--floor alone: proxy)",
    )
    parser.add_argument(
        "--unguarded",
        action="store_true",
        help="also serve each ref with the same config and no rails (what the server costs before "
        "any check: the protections, the turn, the main call, the metrics), measured the same way",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count user-space instructions per request under valgrind (see above) instead of CPU time",
    )
    parser.add_argument(
        "--syscalls",
        action="store_true",
        help="count the server's system calls per request (strace -c), by call, instead of CPU time",
    )
    parser.add_argument("--requests", type=int, default=400, help="per round with --instructions/--syscalls")
    parser.add_argument(
        "--keep",
        type=Path,
        help="with --instructions: write the callgrind dumps into this folder (kept, for callgrind_annotate)",
    )
    args = parser.parse_args()
    if args.floor == [] and "--floor" in sys.argv:
        args.floor = ["proxy"]
    if args.instructions and shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind: apt-get install -y valgrind")
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)

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
        guard_url = f"http://127.0.0.1:{guard_emu.port}/v1"
        config = write_config(Path(tmp) / "ab", main_url, guard_url)
        bare = write_config(Path(tmp) / "bare", main_url, guard_url, rails=False)
        servers: dict[str, tuple[Child, str]] = {}
        floors: dict[str, tuple[Child, str]] = {}
        try:
            for i, ref in enumerate(args.refs):
                tree = checkout(ref, Path(tmp) / f"tree{i}")
                if tree != REPO and not Path(ref).is_dir():
                    trees.append(tree)
                variants = [("", config), (" unguarded", bare)] if args.unguarded else [("", config)]
                for suffix, served in variants:
                    cmd = [sys.executable, "-m", "guardcache", "serve", "--config", str(served)]
                    cmd += ["--port", "0"]
                    if args.instructions:
                        out = (args.keep or Path(tmp)) / f"callgrind.{i}{suffix.strip()}"
                        cmd = [*VALGRIND, f"--callgrind-out-file={out}", *cmd]
                    child = Child([*cmd, "--no-warm-up"], env={"PYTHONPATH": str(tree)}, cwd=tree)
                    url = f"http://127.0.0.1:{child.port(timeout=900 if args.instructions else 60)}"
                    servers[f"{ref}{suffix} ({tree.name})"] = (child, f"{url}/v1")
                    wait_ready(f"{url}/health/ready", timeout=900 if args.instructions else 60)
                    run_load(f"{url}/v1", "lean", 8, count=len(MESSAGES) * 8)  # every check cached
                for kind in args.floor:  # the floors on this tree's h1 client
                    script = str(Path(__file__).with_name("serve_floor.py"))
                    cmd = [sys.executable, script, kind, "0", main_url]
                    if args.instructions:
                        out = (args.keep or Path(tmp)) / f"callgrind.{kind}{i}"
                        cmd = [*VALGRIND, f"--callgrind-out-file={out}", *cmd]
                    floor = Child(cmd, env={"PYTHONPATH": str(tree)})
                    url = f"http://127.0.0.1:{floor.port(timeout=900 if args.instructions else 60)}/v1"
                    floors[f"floor {kind} ({tree.name})"] = (floor, url)
                    run_load(url, "lean", 8, count=len(MESSAGES) * 8)  # connections open, code paths warm
            servers.update(floors)
            for mode in args.modes:
                rows: dict[str, list[float]] = {name: [] for name in servers}
                for _ in range(args.rounds):
                    for name, (child, url) in servers.items():
                        if args.instructions:
                            rows[name].append(instructions_per_request(child, url, mode, args.requests))
                            continue
                        if args.syscalls:
                            print(f"\n{mode}, {name}: system calls per request")
                            for call, per in syscalls_per_request(child, url, mode, args.requests):
                                print(f"   {call:<24} {per:6.2f}")
                            continue
                        cpu0 = cpu_seconds(child.proc.pid)
                        got = run_load(url, mode, 32, seconds=args.seconds)
                        done = len(got["latencies"])
                        if not done or got["errors"]:
                            raise SystemExit(f"{name}: {got['errors']} errors ({got['first_error']})")
                        rows[name].append((cpu_seconds(child.proc.pid) - cpu0) / done * 1e6)
                if args.syscalls:
                    continue
                what = "thousand instructions" if args.instructions else "server CPU"
                print(f"\n{mode}: {what} per request, median of {args.rounds} interleaved rounds")
                first = statistics.median(next(iter(rows.values())))
                for name, values in rows.items():
                    median = statistics.median(values)
                    each = " ".join(f"{v:.0f}" for v in values)
                    unit = "k" if args.instructions else "us"
                    print(f"   {name:<48} {median:6.0f} {unit} ({median / first:5.3f}x the first)   [{each}]")
            print(describe_speed())
        finally:
            for child, _ in [*servers.values(), *floors.values()]:
                child.stop()
            remove(trees)
    return 0


if __name__ == "__main__":
    sys.exit(main())
