"""What a policy costs per operation: TinyLFUCache beside LFUCache, on bench_cache.py's workloads plus
a miss then a put (what a guard check's miss costs the cache), and bytes per entry (issue 23's
targets: a get hit at most 1.5x the LFU's, a miss-then-put at most 2x, memory at most 1.3x).

Rounds are interleaved (the order alternates) and the ratio column is the median of the per-round
ratios, which a noisy neighbour skews far less than a ratio of two minima; ns/op is the best round.
Bytes per entry: a cache of 50,000 built and filled under tracemalloc, so TinyLFU's frequency
sketch (sized when the cache is half full) is counted. Not part of the test run.

    python benchmarks/bench_cache_policies.py [--scale 0.5] [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import bench_cache as bc
from machine import describe_speed

from guardcache.cache import LFUCache, TinyLFUCache

Factory = Callable[[int], Any]
IMPLS: dict[str, Factory] = {
    "lfu": lambda n: LFUCache(n, track_stats=True),
    "tinylfu": lambda n: TinyLFUCache(n, track_stats=True),
}


def miss_then_put(make: Factory, n_ops: int) -> float:
    """A full cache of 10,000; each op is a get that misses, then the put of that key (evicting)."""
    universe = bc.keys(n_ops + 10_000, 9)
    cache = make(10_000)
    for k in universe[:10_000]:
        cache.put(k, b"v")
    seq = universe[10_000:]
    get, put = cache.get, cache.put

    def run() -> int:
        for k in seq:
            if get(k) is None:
                put(k, b"v")
        return len(seq)

    return bc.timed(run)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the default op counts")
    ap.add_argument("--repeat", type=int, default=7, help="rounds (best ns/op, median ratio)")
    args = ap.parse_args()
    s = args.scale
    workloads: dict[str, Callable[[Factory], float]] = {
        "get hit (500k @10k, uniform)": lambda m: bc.get_hits(m, int(500_000 * s)),
        "get hit (500k @10k, Zipf 0.99)": lambda m: bc.get_hits(m, int(500_000 * s), alpha=0.99),
        "get miss, then put (evicting)": lambda m: miss_then_put(m, int(200_000 * s)),
        "put+evict (200k/100k keys)": lambda m: bc.put_evict(m, int(200_000 * s)),
        "90/10 get/put": lambda m: bc.mixed(m, int(300_000 * s)),
    }
    best: dict[str, dict[str, float]] = {w: {} for w in workloads}
    ratios: dict[str, list[float]] = {w: [] for w in workloads}
    names = list(IMPLS)
    for r in range(args.repeat):
        order = names if r % 2 == 0 else names[::-1]
        for w, run in workloads.items():
            got = {name: run(IMPLS[name]) for name in order}
            ratios[w].append(got["tinylfu"] / got["lfu"])
            for name, ns in got.items():
                best[w][name] = min(ns, best[w].get(name, float("inf")))
    print(f"{describe_speed()}; {args.repeat} rounds; ns/op = best round; ratio = tinylfu / lfu, median")
    print(f"{'workload':34s}{'lfu':>12s}{'tinylfu':>12s}{'ratio':>8s}")
    for w in workloads:
        row = best[w]
        print(f"{w:34s}{row['lfu']:>9.0f} ns{row['tinylfu']:>9.0f} ns{statistics.median(ratios[w]):>8.2f}")
    for label, accessed in (("bytes/entry (50k, fresh)", False), ("bytes/entry (50k, all read)", True)):
        mem = {name: bc.bytes_per_entry(make, accessed=accessed) for name, make in IMPLS.items()}
        print(f"{label:34s}{mem['lfu']:>10.1f} B{mem['tinylfu']:>10.1f} B{mem['tinylfu'] / mem['lfu']:>8.2f}")


if __name__ == "__main__":
    main()
