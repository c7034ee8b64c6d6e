"""A replica that keeps checking one text, for tests of a clear reaching running replicas.

    python -m guardcache.testing.probe_replica --config DIR --messages FILE --probe TEXT [--every S]

Builds ``LLMRails`` from the config, brings its Redis tier up, checks every message of the JSON list
in FILE (its L1 is warm then), prints ``READY`` and waits for a line on stdin. Then it checks
``--probe`` (a text it checked already) every ``--every`` seconds, prints ``PROBING`` after the first
check the cache answered, and, at the first check the cache did not answer (the guard was asked
again), prints one JSON line, ``{"asked_at": <time.time()>, "hits": <cached checks before it>}``, and
exits. Why a loop of its own rather than the fleet's burst (``replica``): a clear must reach a
process while it serves, and what shows that it did is the guard asked again for a text the
process had cached.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import httpx2

from guardcache import LLMRails, RailsConfig
from guardcache.cache.redis.tiered import TieredCache
from guardcache.llm.lanes import shared_ssl_context


async def run(config_dir: str, messages: list[str], probe: str, every: float) -> dict[str, float]:
    rails = LLMRails(RailsConfig.from_path(config_dir))
    await httpx2.AsyncClient(verify=shared_ssl_context()).aclose()  # lazy imports, as `replica`
    cache = rails.model_caches["content_safety"]
    if isinstance(cache, TieredCache):
        await cache.connect()
    for text in messages:
        await rails.check_async([{"role": "user", "content": text}])
    print("READY", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    hits = 0
    try:
        while True:
            checks = await rails.check_async([{"role": "user", "content": probe}])
            if not checks.input[0].from_cache:
                return {"asked_at": time.time(), "hits": hits}
            hits += 1
            if hits == 1:
                print("PROBING", flush=True)
            await asyncio.sleep(every)
    finally:
        await rails.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--messages", required=True, help="a JSON file: the user messages to cache first")
    parser.add_argument("--probe", required=True, help="the text checked again and again (one of them)")
    parser.add_argument("--every", type=float, default=0.05, help="seconds between probe checks")
    args = parser.parse_args()
    with open(args.messages, encoding="utf-8") as f:
        messages = json.load(f)
    report = asyncio.run(run(args.config, messages, args.probe, args.every))
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
