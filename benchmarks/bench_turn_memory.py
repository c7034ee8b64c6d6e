"""Memory per guarded turn: RSS growth per 1,000 distinct turns of ``LLMRails.generate_async``, in a
fresh interpreter per measurement, beside the same turns with the cache off and with no rails.

Each measurement is a child process (``--one``) importing guardcache from a checkout. It builds
``LLMRails`` on one emulator (a separate process, ``time_scale=0``, shared by every child) and runs
``--warmup`` distinct turns (code paths, connections, pools and lazy imports in place), then
``gc.collect()``, reads ``VmRSS``, runs ``--turns`` DISTINCT turns (texts of user-message lengths, all
safe, so each guarded turn stores 2 verdicts: input and output; the emulator's main model echoes the
text, so the outputs are distinct too), ``gc.collect()``, reads ``VmRSS`` again. Variants:

  guarded   a main model and content-safety input + output rails (cache on, maxsize 10,000)
  nocache   the same rails with ``cache: {enabled: false}``: what a turn grows with nothing cached
  bare      ``LLMRails`` with only a main model
  floor     bare, plus each turn's two 32-byte keys stored in a plain dict -> one shared value: the
            least any cache of 2 verdicts a turn holds (key objects and dict entries, no order)
  slots     floor, plus the least a cache that evicts in O(1) holds per entry: a slot of its own as
            the dict's value (an int object, as any slot table's index needs) and the key by slot
            (to find the victim's key); no order links, frequencies or timestamps yet

Each variant runs ``--repeat`` times (fresh processes, interleaved); each run and the median are
printed in KiB per 1,000 turns, with the run's turns per second. ``guarded - nocache`` is what the
cached verdicts cost; ``nocache`` is the floor the workload sets without caching.

    python benchmarks/bench_turn_memory.py                    # ~1 min
    python benchmarks/bench_turn_memory.py --compare 736640c,03474c5  # other commits too (worktrees)
    python benchmarks/bench_turn_memory.py --tracemalloc      # what grows, by file:line (top 15)

RSS growth depends on how much freed memory the warm-up left for the run to reuse (the same code
reads ~220 or ~480 KiB in different states of the heap), so each variant also runs once under
tracemalloc (started after the warm-up): "retained" is the bytes of the blocks allocated since and
still live (small blocks rounded up as pymalloc does; a large block counts whole, touched or not).
``--tracemalloc`` prints the guarded growth by allocating line (top 15).

Not part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from guarded_config import config_yaml

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ("guarded", "nocache", "bare", "floor", "slots")
WORDS = ("please", "tell", "me", "about", "the", "weather", "trains", "gardens", "music", "history")


def yaml_config(url: str, variant: str) -> str:
    """The config of ``variant`` on the emulator at ``url`` (bench_overhead.py's): the cache off for
    ``nocache``, no rails for the bare variants."""

    rails = variant in ("guarded", "nocache")
    return config_yaml(url, inputs=rails, outputs=rails, cache=variant == "guarded")


def text(i: int, tag: str, rnd: random.Random) -> str:
    """A distinct, safe user message of a length users write (log-normal: a few words to hundreds)."""
    words = min(400, int(rnd.lognormvariate(2.8, 0.9)) + 1)
    return f"{tag} {i}: " + " ".join(rnd.choice(WORDS) for _ in range(words)) + "."


def allocated(snapshot: tracemalloc.Snapshot) -> int:
    """Bytes held by the traced blocks as pymalloc holds them (a small block in 16-byte steps)."""
    return sum((t.size + 15) // 16 * 16 if t.size <= 512 else t.size for t in snapshot.traces)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
        )
    ]


def malloc_kib() -> tuple[int, int, int]:
    """glibc's heap (brk) size, its mmap'd chunks, and the bytes in use of both, in KiB (pymalloc's
    arenas are mmap'd on their own, not counted here)."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _Mallinfo2
    m = libc.mallinfo2()
    return m.arena // 1024, m.hblkhd // 1024, m.uordblks // 1024


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def measure(url: str, variant: str, warmup: int, turns: int, trace: bool) -> dict[str, Any]:
    import guardcache
    from guardcache import LLMRails, RailsConfig

    rails = LLMRails(RailsConfig.from_content(yaml_content=yaml_config(url, variant)))
    rnd = random.Random(7)
    warm = [text(i, "Warm-up", rnd) for i in range(warmup)]
    texts = [text(i, "Message", rnd) for i in range(turns)]

    floor: dict[bytes, object] = {}
    shared = object()
    keep = variant in ("floor", "slots")
    slot_keys: list[bytes] = []  # ("slots") the keys by slot: what finds an evicted entry's key

    async def run(batch: list[str]) -> int:
        refused = 0
        for t in batch:
            out = await rails.generate_async(messages=[{"role": "user", "content": t}])
            if keep:  # the least two cached verdicts can hold: two 32-byte keys -> one shared value
                for said in (t, out["content"]):
                    key = hashlib.blake2b(said.encode(), digest_size=32).digest()
                    if variant == "floor":
                        floor[key] = shared
                    else:  # plus what O(1) eviction needs: a slot of its own, the key by slot
                        floor[key] = 1000 + len(slot_keys)  # (a new int: small ones are shared)
                        slot_keys.append(key)
            refused += not str(out.get("content", "")).startswith("You said")
        return refused

    await run(warm)
    malloc_kib()  # its first call loads what it needs: not in the window measured
    gc.collect()
    if trace:
        tracemalloc.start(1)
        before_snap = tracemalloc.take_snapshot()
    heap0 = malloc_kib()
    rss0 = rss_kib()
    t0 = time.perf_counter()
    refused = await run(texts)
    elapsed = time.perf_counter() - t0
    gc.collect()
    rss1 = rss_kib()
    heap1 = malloc_kib()
    top: list[str] = []
    retained = 0.0
    if trace:
        after_snap = tracemalloc.take_snapshot()
        tracemalloc.stop()
        filters = [tracemalloc.Filter(False, tracemalloc.__file__)]
        before_snap, after_snap = before_snap.filter_traces(filters), after_snap.filter_traces(filters)
        retained = (allocated(after_snap) - allocated(before_snap)) * 1000 / turns
        stats = after_snap.compare_to(before_snap, "lineno")
        stats.sort(key=lambda s: -s.size_diff)
        for s in stats[:15]:
            frame = s.traceback[0]
            name = frame.filename.replace(str(REPO) + "/", "")
            name = name.split("/site-packages/")[-1].split("/lib/python3")[-1]
            top.append(
                f"{s.size_diff * 1000 / turns / 1024:8.1f} KiB {s.count_diff * 1000 / turns:7.0f} blocks"
                f"  {name}:{frame.lineno}"
            )
    caches = getattr(rails, "model_caches", {}) or {}
    cached = sum(c.size() for c in caches.values()) + len(floor)
    aclose = getattr(rails, "aclose", None)
    if aclose is not None:
        await aclose()
    return {
        "kib_per_1k": (rss1 - rss0) * 1000 / turns,
        "retained": retained / 1024,
        "turns_per_s": turns / elapsed,
        "refused": refused,
        "cached": cached,
        "rss0": rss0,
        "rss1": rss1,
        "heap": [b - a for a, b in zip(heap0, heap1, strict=True)],
        "top": top,
        "module": guardcache.__file__,
    }


def run_child(
    checkout: Path, url: str, variant: str, args: argparse.Namespace, trace: bool = False
) -> dict[str, Any]:
    """One measurement in a fresh interpreter importing guardcache from ``checkout``."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    argv = [sys.executable, __file__, "--one", variant, "--url", url]
    argv += ["--warmup", str(args.warmup), "--turns", str(args.turns)]
    if trace:
        argv.append("--tracemalloc")
    out = subprocess.run(argv, check=True, capture_output=True, text=True, env=env)
    result = dict(json.loads(out.stdout.strip().splitlines()[-1]))
    if not result["module"].startswith(str(checkout)):
        raise SystemExit(f"the child imported {result['module']}, not guardcache from {checkout}")
    return result


def report(name: str, runs: dict[str, list[dict[str, Any]]], traced: dict[str, dict[str, Any]]) -> None:
    print(name)
    print(
        f"  {'variant':<9}{'RSS median':>11}   runs                {'turns/s':>8}{'retained':>10}   verdicts"
    )
    med: dict[str, float] = {}
    for variant, results in runs.items():
        kib = [r["kib_per_1k"] for r in results]
        med[variant] = statistics.median(kib)
        speed = statistics.median(r["turns_per_s"] for r in results)
        each = ", ".join(f"{k:.0f}" for k in kib)
        refused = sum(r["refused"] for r in results)
        note = f"  ({refused} refused!)" if refused else ""
        kept = traced[variant]["retained"]
        start = statistics.median(r["rss0"] for r in results) / 1024
        end = statistics.median(r["rss1"] for r in results) / 1024
        print(
            f"  {variant:<9}{med[variant]:>11.0f}   {each:<20s}{speed:>8.0f}{kept:>10.0f}"
            f"{start:>19.2f} -> {end:.2f}   {results[0]['cached']}{note}"
        )
    if "guarded" in med and "nocache" in med:
        rss = med["guarded"] - med["nocache"]
        kept = traced["guarded"]["retained"] - traced["nocache"]["retained"]
        print(
            f"  guarded - nocache: RSS {rss:.0f} KiB, retained {kept:.0f} KiB per 1,000 turns "
            f"= {kept * 1024 / 2000:.0f} B a verdict retained"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=2000, help="distinct turns measured")
    ap.add_argument("--warmup", type=int, default=200, help="distinct turns before the first reading")
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per variant")
    ap.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated, of " + ", ".join(VARIANTS)
    )
    ap.add_argument(
        "--compare", metavar="REV[,REV...]", help="also measure these git revisions (temporary worktrees)"
    )
    ap.add_argument("--tracemalloc", action="store_true", help="attribute the guarded growth by file:line")
    ap.add_argument("--one", metavar="VARIANT", help=argparse.SUPPRESS)  # measure here, print JSON
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(asyncio.run(measure(args.url, args.one, args.warmup, args.turns, args.tracemalloc))))
        return

    from ab_serve import checkout, remove  # (here: the measured children need none of it)

    from guardcache.emulator import EmulatorConfig, EmulatorProcess, LatencyConfig

    variants = [v for v in args.variants.split(",") if v]
    trees: dict[str, Path] = {"this checkout": REPO}
    tmp = Path(tempfile.mkdtemp(prefix="turn-memory-"))
    made: list[Path] = []
    try:
        for n, rev in enumerate(args.compare.split(",") if args.compare else []):
            into = tmp / f"tree{n}"
            trees[rev] = tree = checkout(rev, into)
            if tree == into:  # a worktree made here (not a folder given, not this checkout)
                made.append(tree)
        trees = {name: tree for name, tree in trees.items() if tree != REPO} | {"this checkout": REPO}
        with EmulatorProcess(EmulatorConfig(latency=LatencyConfig(time_scale=0.0))) as nim:
            print(
                f"KiB per 1,000 turns over {args.turns:,} distinct turns after {args.warmup} warm-up "
                f"turns, a fresh process per run: RSS growth ({args.repeat} runs a variant) and retained "
                "(tracemalloc: blocks allocated since and still live, pymalloc-rounded; its own run)"
            )
            traced = {
                n: {v: run_child(t, nim.base_url, v, args, trace=True) for v in variants}
                for n, t in trees.items()
            }
            if args.tracemalloc:
                for name, by_variant in traced.items():
                    print(f"{name}: guarded, growth by allocating line (tracemalloc), per 1,000 turns")
                    print("\n".join("  " + line for line in by_variant["guarded"]["top"]))
            runs: dict[str, dict[str, list[dict[str, Any]]]] = {n: {v: [] for v in variants} for n in trees}
            for _ in range(args.repeat):  # interleaved: a machine that changes speed slows all alike
                for name, tree in trees.items():
                    for variant in variants:
                        runs[name][variant].append(run_child(tree, nim.base_url, variant, args))
            for name in trees:
                report(name, runs[name], traced[name])
    finally:
        remove(made)
        with contextlib.suppress(OSError):
            tmp.rmdir()


if __name__ == "__main__":
    main()
