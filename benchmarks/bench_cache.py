"""Cache core benchmark: guardcache's LFUCache vs cachetools.LFUCache (+RLock) vs NeMo Guardrails' LFU.

Prints ns/op per workload and bytes/entry, side by side from ONE run, with the ratios to NeMo's cache
(the library guardcache replaces) when ``nemoguardrails`` is importable. ``guardcache+log`` is a cache
with ``stats_logging_interval`` and no reporter, which checks the clock on each get/put to write the
stats line on access (NeMo's way); the ratio column is always plain ``guardcache``'s. For the NeMo column:

    python -m venv /tmp/bench && /tmp/bench/bin/pip install nemoguardrails -e .
    /tmp/bench/bin/python benchmarks/bench_cache.py

Each ns/op figure is the best of ``--repeat`` rounds. The implementations are interleaved within a
round so machine noise hits them alike, and the ratio column is the MEDIAN of the per-round ratios
(each taken between runs seconds apart), which a noisy neighbour skews far less than a ratio of two
minima taken in different rounds; both are printed. The order of the implementations rotates from
round to round. Not part of the test run.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import threading
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import cachetools
from machine import describe_speed

from guardcache.cache import LFUCache

try:  # the peer library, when installed in the bench environment
    from nemoguardrails.llm.cache.lfu import LFUCache as NemoLFU
except Exception:  # any import failure means "not available"
    NemoLFU = None


class CachetoolsLocked:
    """cachetools.LFUCache made thread-safe the usual way: one RLock around each call."""

    def __init__(self, maxsize: int) -> None:
        self._cache: cachetools.LFUCache[Any, Any] = cachetools.LFUCache(maxsize)
        self._lock = threading.RLock()

    def get(self, key: Any, default: Any = None) -> Any:
        with self._lock:
            return self._cache.get(key, default)

    def put(self, key: Any, value: Any) -> None:
        with self._lock:
            self._cache[key] = value


Factory = Callable[[int], Any]


def factories() -> dict[str, Factory]:
    out: dict[str, Factory] = {
        "guardcache": lambda n: LFUCache(n, track_stats=True),
        # A stats line interval and no reporter: the line is written on access, as NeMo does, so
        # get/put read the wall clock first (the interval never elapses during the bench).
        "guardcache+log": lambda n: LFUCache(n, track_stats=True, stats_logging_interval=3600.0),
        "cachetools+RLock": CachetoolsLocked,
    }
    if NemoLFU is not None:
        out["nemoguardrails"] = lambda n: NemoLFU(n, track_stats=True)
    return out


def keys(n: int, seed: int) -> list[bytes]:
    rnd = random.Random(seed)
    return [rnd.randbytes(32) for _ in range(n)]


def timed(fn: Callable[[], int]) -> float:
    gc.collect()
    start = time.perf_counter()
    ops = fn()
    return (time.perf_counter() - start) / ops * 1e9


def get_hits(make: Factory, n_ops: int, alpha: float = 0.0) -> float:
    """Hits only; keys drawn uniformly (alpha 0: every entry's group is large, the costly case) or
    Zipf(alpha) (hot keys sit alone in their frequency group, as in real traffic)."""
    universe = keys(10_000, 1)
    cache = make(10_000)
    for k in universe:
        cache.put(k, b"v")
    weights = [1.0 / (r + 1) ** alpha for r in range(10_000)]
    seq = [universe[i] for i in random.Random(2).choices(range(10_000), weights, k=n_ops)]
    get = cache.get

    def run() -> int:
        for k in seq:
            get(k)
        return len(seq)

    return timed(run)


def put_evict(make: Factory, n_ops: int) -> float:
    universe = keys(100_000, 3)
    cache = make(10_000)
    seq = [universe[i] for i in random.Random(4).choices(range(100_000), k=n_ops)]
    put = cache.put

    def run() -> int:
        for k in seq:
            put(k, b"v")
        return len(seq)

    return timed(run)


def mixed(make: Factory, n_ops: int, threads: int = 1) -> float:
    universe = keys(20_000, 5)
    cache = make(10_000)
    for k in universe[:10_000]:
        cache.put(k, b"v")
    rnd = random.Random(6)
    # 90% gets, 10% puts; keys skewed so most gets hit
    skewed = [int(rnd.paretovariate(1.2)) * 7 % 20_000 for _ in range(n_ops)]
    ops = [(rnd.random() < 0.9, universe[i]) for i in skewed]
    per = n_ops // threads

    def work(chunk: list[tuple[bool, bytes]]) -> None:
        get, put = cache.get, cache.put
        for is_get, k in chunk:
            if is_get:
                get(k)
            else:
                put(k, b"v")

    def run() -> int:
        if threads == 1:
            work(ops)
            return len(ops)
        ts = [threading.Thread(target=work, args=(ops[i * per : (i + 1) * per],)) for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return per * threads

    return timed(run)


def bytes_per_entry(make: Factory, n: int = 50_000, accessed: bool = False) -> float:
    ks = keys(n, 7)
    value = object()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    cache = make(n)
    for k in ks:
        cache.put(k, value)
    if accessed:
        for k in ks:
            cache.get(k)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del cache
    return (after - before) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the issue's op counts (1.0 = full)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds (best ns/op, median ratio)")
    args = ap.parse_args()
    s = args.scale
    impls = factories()
    workloads: dict[str, Callable[[Factory], float]] = {
        "get hit (1M @10k, uniform)": lambda m: get_hits(m, int(1_000_000 * s)),
        "get hit (1M @10k, Zipf 0.99)": lambda m: get_hits(m, int(1_000_000 * s), alpha=0.99),
        "put+evict (200k/100k keys)": lambda m: put_evict(m, int(200_000 * s)),
        "90/10 get/put": lambda m: mixed(m, int(500_000 * s)),
        "90/10 get/put, 2 threads": lambda m: mixed(m, int(500_000 * s), threads=2),
    }
    names = list(impls)
    ref = "nemoguardrails" if "nemoguardrails" in impls else "cachetools+RLock"
    results: dict[str, dict[str, float]] = {w: {} for w in workloads}
    ratios: dict[str, list[float]] = {w: [] for w in workloads}
    for r in range(args.repeat):
        # Rotate who goes first each round, so an order effect (allocator state, caches warmed by
        # the previous run) does not always land on the same implementation.
        order = names[r % len(names) :] + names[: r % len(names)]
        for wname, run in workloads.items():
            round_ns = {iname: run(impls[iname]) for iname in order}
            ratios[wname].append(round_ns["guardcache"] / round_ns[ref])
            for iname, ns in round_ns.items():
                results[wname][iname] = min(ns, results[wname].get(iname, float("inf")))
    mem = {name: bytes_per_entry(make) for name, make in impls.items()}
    mem_acc = {name: bytes_per_entry(make, accessed=True) for name, make in impls.items()}

    print(
        f"machine: {os.cpu_count()} cpus, {describe_speed()}; {args.repeat} rounds; ns/op = best round; "
        f"ratio = guardcache / {ref}: median of per-round ratios (ratio of the bests)"
    )
    header = f"{'workload':30s}" + "".join(f"{n:>18s}" for n in names) + f"{'ratio':>16s}"
    print(header)
    print("-" * len(header))
    for wname, row in results.items():
        cells = "".join(f"{row[n]:>15.0f} ns" for n in names)
        paired = statistics.median(ratios[wname])
        best = row["guardcache"] / row[ref]
        print(f"{wname:30s}{cells}{paired:>9.2f} ({best:.2f})")
    for label, table in (("bytes/entry (50k, fresh)", mem), ("bytes/entry (50k, all read)", mem_acc)):
        cells = "".join(f"{table[n]:>16.1f} B" for n in names)
        print(f"{label:30s}{cells}{table['guardcache'] / table[ref]:>9.2f}")
    if NemoLFU is None:
        print("(nemoguardrails not importable: install it in a bench venv for the NeMo column)")


if __name__ == "__main__":
    main()
