"""One rails "replica" process, for cross-replica tests and benchmarks (see ``replicas``).

    python -m guardcache.testing.replica --config DIR --messages FILE [--concurrency N] [--cold]

Builds ``LLMRails`` from the config (e.g. a model with ``cache.store: redis``), brings its Redis tier
up (unless ``--cold``: then its first checks start it, as in a process that serves at once), prints
``READY`` and waits for one line on stdin (so a test can start every replica's burst at the same
moment), then runs ``check_async`` on every message of the JSON list in FILE (all at once, or
``--concurrency`` at a time), closes the rails (what the tier kept is written then), and prints one
JSON line: per-check results, latencies, the cache's tier stats and the writes it gave up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import httpx2

from guardcache import LLMRails, RailsConfig
from guardcache.cache.redis.tiered import TieredCache
from guardcache.llm.lanes import shared_ssl_context


async def run(config_dir: str, messages: list[str], concurrency: int, cold: bool = False) -> dict[str, Any]:
    rails = LLMRails(RailsConfig.from_path(config_dir))
    # Warm up like a production replica that has served traffic: the HTTP stack's lazy imports and
    # TLS context (they block the event loop ~150 ms on first use, far longer on a busy CPU) and this
    # loop's Redis tier (unless cold). No check runs, so no counter moves.
    await httpx2.AsyncClient(verify=shared_ssl_context()).aclose()
    cache = rails.model_caches["content_safety"]
    if isinstance(cache, TieredCache) and not cold:
        await cache.connect()
    print("READY", flush=True)
    await asyncio.to_thread(sys.stdin.readline)  # the barrier: every replica starts together
    gate = asyncio.Semaphore(concurrency if concurrency > 0 else len(messages) or 1)
    latencies: list[float] = [0.0] * len(messages)

    async def one(i: int, text: str) -> dict[str, Any]:
        async with gate:
            started = time.perf_counter()
            checks = await rails.check_async([{"role": "user", "content": text}])
            latencies[i] = time.perf_counter() - started
        r = checks.input[0]
        return {"allowed": r.allowed, "from_cache": r.from_cache, "error": r.error}

    started = time.perf_counter()
    results = await asyncio.gather(*(one(i, m) for i, m in enumerate(messages)))
    wall = time.perf_counter() - started
    tier: dict[str, Any] | None = None
    dropped = 0
    if isinstance(cache, TieredCache):
        await cache.aclose()  # what the tier kept while connecting is written, the stats flushed
        tier = cache.tier_stats().as_dict()
        dropped = cache.store.writes_dropped
    await rails.aclose()
    return {
        "results": results,
        "latencies": latencies,
        "wall_s": wall,
        "l1": cache.get_stats().as_dict(),
        "tier": tier,
        "writes_dropped": dropped,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--messages", required=True, help="a JSON file: a list of user messages")
    parser.add_argument("--concurrency", type=int, default=0, help="checks in flight (0: all)")
    parser.add_argument("--cold", action="store_true", help="no warm-up of the Redis tier")
    args = parser.parse_args()
    with open(args.messages, encoding="utf-8") as f:
        messages = json.load(f)
    report = asyncio.run(run(args.config, messages, args.concurrency, args.cold))
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
