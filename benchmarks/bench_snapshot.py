"""Warm restarts: the time to write and to load a snapshot of a full cache, beside the time to fill
the same cache by puts.

A cache of ``--entries`` (50,000) 32-byte keys and verdict values as checks store them
(``CachedCheck.shared``, through ``guardcache.checks.codec``), filled by a skewed trace so that
frequencies and (TinyLFU) queues and sketch are those of real use. Each value's token counts are
distinct (``--distinct``, the default) or repeat as typical messages' do (``--typical``: checks
intern equal values, and the file holds each distinct value once). Then, for each policy:

- fill: the puts and gets of the trace (what a cold process spends building the same cache, before
  counting any backend call it would also make);
- write: ``Snapshotter.save()``: export under the lock, encode, sign, write a temporary file, fsync,
  rename;
- load: ``Snapshotter.load()`` into a new cache: read, verify, decode every value, restore the order.

The issue's target: 50,000 entries written in under 1 s and loaded in under 1 s.

    python benchmarks/bench_snapshot.py [--entries 50000] [--typical] [--repeat 3]

Not part of the test run.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

from guardcache.cache import PolicyCache, make_cache
from guardcache.cache.snapshot import Snapshotter
from guardcache.checks import codec
from guardcache.checks.verdict import CachedCheck, Verdict
from guardcache.llm.types import Usage

IDENTITY = {"model_type": "content_safety", "model": "bench", "version": None, "namespaces": ["00" * 16]}
KEY = os.urandom(32)


def values(n: int, typical: bool) -> list[CachedCheck]:
    safe = Verdict(allowed=True, categories=(), label="safe")
    unsafe = Verdict(allowed=False, categories=("Violence",), label="unsafe")
    out = []
    for i in range(n):
        prompt = 400 + (i % 60 if typical else i)
        verdict = unsafe if i % 10 == 0 else safe
        out.append(CachedCheck.shared(verdict, Usage(prompt, 8, prompt + 8, 0, "nemoguard", "nim")))
    return out


def fill(policy: str, entries: int, typical: bool) -> tuple[PolicyCache, float]:
    rng = random.Random(1)
    keys = [rng.randbytes(32) for _ in range(entries * 2)]
    vals = values(len(keys), typical)
    cache = make_cache(policy, entries)
    trace = [int(rng.paretovariate(0.4) * 3) % len(keys) for _ in range(entries * 4)]
    start = time.perf_counter()
    for k in trace:
        key = keys[k]
        if cache.get(key) is None:
            cache.put(key, vals[k])
    for k in range(len(keys)):  # top it up: the benchmark is of a full cache
        if len(cache) >= entries:
            break
        cache.put(keys[k], vals[k])
    return cache, time.perf_counter() - start


def snapshotter(cache: PolicyCache, path: Path) -> Snapshotter:
    return Snapshotter(
        cache, str(path), key=KEY, identity=IDENTITY, codec=codec, interval=300.0, where="bench"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entries", type=int, default=50_000)
    parser.add_argument("--typical", action="store_true", help="token counts repeat (values shared)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N for write and load")
    args = parser.parse_args()
    print(
        f"{args.entries} entries, values {'typical' if args.typical else 'distinct'}; best of {args.repeat}"
    )
    print(f"{'policy':8} {'fill (puts)':>12} {'write':>8} {'load':>8} {'file':>10}")
    with tempfile.TemporaryDirectory() as folder:
        for policy in ("lfu", "tinylfu"):
            cache, filled = fill(policy, args.entries, args.typical)
            path = Path(folder) / f"{policy}.snapshot"
            writes, loads = [], []
            for _ in range(args.repeat):
                writer = snapshotter(cache, path)
                start = time.perf_counter()
                assert writer.save()
                writes.append(time.perf_counter() - start)
                writer.close(save=False)  # gives up the writer's lock for the next round
                fresh = make_cache(policy, args.entries)
                reader = snapshotter(fresh, path)
                start = time.perf_counter()
                loaded = reader.load()
                loads.append(time.perf_counter() - start)
                reader.close(save=False)
                assert loaded == len(cache), (loaded, len(cache))
                assert fresh.keys_in_eviction_order() == cache.keys_in_eviction_order()
            size = path.stat().st_size
            print(
                f"{policy:8} {filled:>11.3f}s {min(writes):>7.3f}s {min(loads):>7.3f}s {size / 1e6:>8.2f}MB"
            )


if __name__ == "__main__":
    main()
