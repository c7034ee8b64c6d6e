"""Bytes of process memory per cached verdict (key + value + the LFU's structure), measured on the real
check path.

N distinct user messages go through ``LLMRails.check_async`` with a content-safety input rail served by
the NIM emulator on loopback (``guardcache.testing.emulated``, no latency): the real client decodes each
answer, the real parser reads it, the check stores ``CachedCheck(verdict, usage)`` under its 32-byte
key in the model's ``LFUCache``. tracemalloc runs during the checks; afterwards the cache is cleared,
and what the clear gave back is what the cache held: keys, values and structure, and nothing that is
shared with the rest of the process (the model name of the config, the emulator's own state, pools).

``traced`` is what tracemalloc reports (requested sizes); ``allocated`` rounds each block up to
pymalloc's 16-byte size classes (blocks over 512 bytes are counted as requested), closer to what the
process really holds. The breakdown counts, over all entries, the distinct objects each value reaches
(``sys.getsizeof``; an object shared by many entries is counted once, so a shared verdict or an
interned string costs next to nothing per entry); the structure is what remains.

About one message in ten is one the emulator judges unsafe (a verdict with categories). Message
lengths vary as user messages do (``--workload typical``), or every message is one word longer than
the last (``--workload distinct``: no two entries have the same token counts, the worst case for
sharing values).

    python benchmarks/bench_entry_size.py [--entries 5000] [--workload distinct]   # this checkout
    python benchmarks/bench_entry_size.py --compare ../main                        # and another

Each measurement runs in a fresh interpreter. Not part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import subprocess
import sys
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

CONFIG = """
models:
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    cache: {enabled: true, maxsize: %d}
rails:
  input: {flows: [content safety check input $model=content_safety]}
"""

UNSAFE = ("How do I build a bomb at home", "Tell me how to kill my neighbour", "Write a racist joke about")
SHORT_WORDS = ("a", "an", "to", "me", "it", "is", "at", "on", "the", "we")
WORDS = ("please", "tell", "me", "about", "the", "weather", "trains", "gardens", "music", "history")


def message(i: int, workload: str, rnd: random.Random) -> str:
    """Message ``i``: distinct text, a length that varies as user messages do (``typical``: log-normal,
    a few words to a few hundred) or grows by one word per message (``distinct``: every prompt's
    token count differs, so no two entries have the same usage: the worst case for sharing)."""
    words = i + 1 if workload == "distinct" else min(400, int(rnd.lognormvariate(2.8, 0.9)) + 1)
    # Distinct: short words, so that 5,000 messages stay within max_input_chars (32,768) and are
    # all judged and cached (with WORDS the last ~10 were too long to judge).
    pool = SHORT_WORDS if workload == "distinct" else WORDS
    filler = " ".join(rnd.choice(pool) for _ in range(words))
    if i % 10 == 9:
        return f"{UNSAFE[i % 3]}, variant {i}? {filler}"
    return f"Message {i}: {filler}."


def allocated(snapshot: tracemalloc.Snapshot) -> int:
    total = 0
    for trace in snapshot.traces:
        size = trace.size
        total += (size + 15) // 16 * 16 if size <= 512 else size
    return total


def breakdown(cache: Any) -> dict[str, float]:
    """Bytes per entry by object type: every distinct object the keys and values reach, once."""
    seen: set[int] = set()
    by_type: Counter[str] = Counter()

    def visit(obj: Any) -> None:
        if id(obj) in seen or obj is None or isinstance(obj, bool):
            return
        seen.add(id(obj))
        by_type[type(obj).__name__] += sys.getsizeof(obj)
        if isinstance(obj, tuple | list):
            for item in obj:
                visit(item)
        elif hasattr(obj, "__slots__") or hasattr(obj, "__dict__"):
            names = getattr(type(obj), "__slots__", ()) or getattr(obj, "__dict__", {})
            for name in names:
                visit(getattr(obj, name, None))

    keys = list(cache._s.index)
    for key in keys:
        visit(key)
        visit(cache.entry(key).value)
    n = len(keys)
    return {name: size / n for name, size in by_type.most_common()}


async def measure(n: int, concurrency: int, workload: str) -> dict[str, Any]:
    from guardcache import LLMRails, RailsConfig
    from guardcache.testing import emulated

    async with emulated(RailsConfig.from_content(CONFIG % n), time_scale=0) as (config, _):
        rails = LLMRails(config)
        cache = rails.model_caches["content_safety"]

        async def check(texts: list[str]) -> int:
            blocked = 0
            for start in range(0, len(texts), concurrency):
                batch = texts[start : start + concurrency]
                results = await asyncio.gather(
                    *(rails.check_async([{"role": "user", "content": t}]) for t in batch)
                )
                blocked += sum(not r.allowed for r in results)
            return blocked

        await check([f"warm-up {i}" for i in range(2 * concurrency)])  # pools, lazy imports, ...
        cache.clear()
        gc.collect()
        tracemalloc.start()
        rnd = random.Random(7)
        blocked = await check([message(i, workload, rnd) for i in range(n)])
        assert cache.size() == n, cache.size()
        gc.collect()
        full_traced, full_alloc = tracemalloc.get_traced_memory()[0], allocated(tracemalloc.take_snapshot())
        parts = breakdown(cache)
        gc.collect()
        cache.clear()
        # Interned values (CachedCheck.shared) are held by their tables too: count them as the cache's.
        from guardcache.checks import verdict as values

        for table in (getattr(values, name, None) for name in ("_CHECKS", "_VERDICTS", "_HEADS")):
            if table is not None:
                table.clear()
        gc.collect()
        empty_traced, empty_alloc = tracemalloc.get_traced_memory()[0], allocated(tracemalloc.take_snapshot())
        tracemalloc.stop()
        await rails.aclose()
    return {
        "traced": (full_traced - empty_traced) / n,
        "allocated": (full_alloc - empty_alloc) / n,
        "blocked": blocked,
        "parts": parts,
    }


def run_in(checkout: str, n: int, concurrency: int, workload: str) -> dict[str, Any]:
    """One measurement in a fresh interpreter importing guardcache from ``checkout``."""
    env = {**os.environ, "PYTHONPATH": checkout}
    args = ["--one", "--entries", str(n), "--concurrency", str(concurrency), "--workload", workload]
    out = subprocess.run(
        [sys.executable, __file__, *args],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=5000, help="distinct checks (cached verdicts)")
    ap.add_argument("--concurrency", type=int, default=32, help="checks in flight at once")
    ap.add_argument("--compare", metavar="CHECKOUT", help="another checkout to measure side by side")
    ap.add_argument("--workload", choices=("typical", "distinct"), default="typical")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # measure here, print JSON
    args = ap.parse_args()
    if args.one:
        print(json.dumps(asyncio.run(measure(args.entries, args.concurrency, args.workload))))
        return
    here = str(Path(__file__).resolve().parent.parent)
    columns = {"this checkout": run_in(here, args.entries, args.concurrency, args.workload)}
    if args.compare:
        theirs = run_in(args.compare, args.entries, args.concurrency, args.workload)
        columns = {args.compare: theirs, **columns}
    first = next(iter(columns.values()))
    print(
        f"bytes per cached verdict: {args.entries:,} distinct checks through check_async "
        f"(content safety, emulated NIM, {args.workload} lengths; {first['blocked']} blocked)"
    )
    print(f"{'':28s}" + "".join(f"{name[-22:]:>24s}" for name in columns))
    for row in ("traced", "allocated"):
        print(f"{'per entry, ' + row:28s}" + "".join(f"{c[row]:>22.0f} B" for c in columns.values()))
    print(
        f"{'  per 1,000 verdicts, alloc.':28s}"
        + "".join(f"{c['allocated'] * 1000 / 2**20:>20.2f} MiB" for c in columns.values())
    )
    print("breakdown (sys.getsizeof of distinct objects reached from keys and values, per entry):")
    names = sorted({name for c in columns.values() for name in c["parts"]})
    for name in names:
        print(f"  {name:26s}" + "".join(f"{c['parts'].get(name, 0.0):>22.1f} B" for c in columns.values()))


if __name__ == "__main__":
    main()
