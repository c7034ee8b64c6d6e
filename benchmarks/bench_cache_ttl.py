"""What expiry (``cache.ttl``) costs a hit: the cache as it was before (a git revision, HEAD by
default), the cache now without a ttl, and the cache now with one, interleaved in ONE process.

Targets (issue 31): without a ttl the hit path is the code it was (within 3%: the same closures);
with a ttl, a hit within 1.15x of one without.

The revision's ``guardcache/cache`` is extracted with ``git archive`` into a temporary folder as the
package ``guardcache_before`` (its imports renamed), so both versions run side by side in this
interpreter: same allocator, same CPU frequency, same neighbours. The three caches run in a rotating
order each round; ns/op is the best round, a ratio the median of the per-round ratios (a noisy
neighbour skews that far less than a ratio of two minima). Not part of the test run.

    python benchmarks/bench_cache_ttl.py [--rev HEAD] [--scale 0.5] [--repeat 9]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_cache as bc
from machine import describe_speed

from guardcache.cache import make_cache

ROOT = Path(__file__).resolve().parents[1]
Factory = Callable[[int], Any]


def load_before(rev: str, where: Path) -> Any:
    """``guardcache.cache.make_cache`` of ``rev``, importable beside this checkout's."""
    data = subprocess.run(
        ["git", "archive", rev, "guardcache/cache"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(where, filter="data")
    package = where / "guardcache_before"
    (where / "guardcache").rename(package)
    (package / "__init__.py").write_text("", encoding="utf-8")
    for path in package.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        path.write_text(re.sub(r"\bguardcache\.cache\b", "guardcache_before.cache", text), encoding="utf-8")
    sys.path.insert(0, str(where))
    from guardcache_before.cache import make_cache as before  # type: ignore[import-not-found]

    return before


def get_or_compute_hits(make: Factory, n_ops: int) -> float:
    """Hits through ``get_or_compute`` (a check's path: the single flight's lookup), uniform keys."""
    universe = bc.keys(10_000, 1)
    cache = make(10_000)
    for k in universe:
        cache.put(k, b"v")
    seq = [universe[i] for i in bc.random.Random(2).choices(range(10_000), k=n_ops)]
    get_or_compute = cache.get_or_compute

    async def loop() -> None:
        for k in seq:
            await get_or_compute(k, None)

    def run() -> int:
        asyncio.run(loop())
        return len(seq)

    return bc.timed(run)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rev", default="HEAD", help="the revision to compare with (default: HEAD)")
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the op counts (1.0 = full)")
    ap.add_argument("--repeat", type=int, default=7, help="rounds (best ns/op, median ratio)")
    ap.add_argument("--policy", default="lfu", choices=["lfu", "tinylfu"])
    args = ap.parse_args()
    s = args.scale
    with tempfile.TemporaryDirectory() as tmp:
        before = load_before(args.rev, Path(tmp))
        policy = args.policy
        impls: dict[str, Factory] = {
            "before": lambda n: before(policy, n, track_stats=True),
            "ttl unset": lambda n: make_cache(policy, n, track_stats=True),
            "ttl set": lambda n: make_cache(policy, n, track_stats=True, ttl=3600.0),
        }
        workloads: dict[str, Callable[[Factory], float]] = {
            "get hit (uniform)": lambda m: bc.get_hits(m, int(1_000_000 * s)),
            "get hit (Zipf 0.99)": lambda m: bc.get_hits(m, int(1_000_000 * s), alpha=0.99),
            "get_or_compute hit": lambda m: get_or_compute_hits(m, int(300_000 * s)),
            "90/10 get/put": lambda m: bc.mixed(m, int(500_000 * s)),
        }
        names = list(impls)
        best: dict[str, dict[str, float]] = {w: {} for w in workloads}
        same: dict[str, list[float]] = {w: [] for w in workloads}
        cost: dict[str, list[float]] = {w: [] for w in workloads}
        for r in range(args.repeat):
            order = names[r % len(names) :] + names[: r % len(names)]
            for wname, run in workloads.items():
                ns = {name: run(impls[name]) for name in order}
                same[wname].append(ns["ttl unset"] / ns["before"])
                cost[wname].append(ns["ttl set"] / ns["ttl unset"])
                for name, value in ns.items():
                    best[wname][name] = min(value, best[wname].get(name, float("inf")))
    print(
        f"{policy}; {describe_speed()}; {args.repeat} rounds, rev {args.rev}; ns/op = best round; "
        "ratios = median of per-round ratios"
    )
    header = (
        f"{'workload':24s}" + "".join(f"{n:>14s}" for n in names) + f"{'unset/before':>15s}{'set/unset':>12s}"
    )
    print(header)
    print("-" * len(header))
    for wname, row in best.items():
        cells = "".join(f"{row[n]:>11.0f} ns" for n in names)
        print(
            f"{wname:24s}{cells}{statistics.median(same[wname]):>15.3f}{statistics.median(cost[wname]):>12.3f}"
        )


if __name__ == "__main__":
    main()
