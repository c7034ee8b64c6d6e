"""Shared Redis tier benchmark: four replicas with per-process caches vs the same four behind Redis.

    python benchmarks/bench_redis.py [--replicas 4] [--checks 3000] [--concurrency 16] [--hit-only]
                                     [--cluster]

Runs, against ONE NIM emulator in its own process (``EmulatorProcess``, calibrated latency) and one
``redis-server`` it starts on a free loopback port:

1. ``store: memory``: N replica processes (``python -m guardcache.testing.replica``), each firing its
   own Zipf workload (alpha 0.99 over a shared universe of messages, plus 25% messages never seen
   again), all released at the same moment;
2. ``store: redis``: the same N workloads, sharing the Redis tier (``timeout_ms`` 50, the default);
3. ONE replica alone running the union of the N workloads (``store: memory``, an L1 that never
   evicts): the fewest backend calls any single process could make.

It prints backend calls and p50/p99 check latency side by side (target: the redis replicas together
make no more backend calls than the lone replica, within 2%), then the cost of one Redis hit (L1
empty, value in Redis) on loopback, p50 (target < 0.5 ms), authenticated (the real tier) next to the
same tier with authentication swapped out (``PlainAuth``, defined here only: the pre-authentication
key names and raw values; production has no such path) and a bare redis-py GET, the two tiers
measured interleaved (key by key, alternating which goes first) so the machine's load hits both
alike, plus the HMAC work of one hit on its own. ``--hit-only`` measures just that.

``--cluster`` also starts a local Redis Cluster (3 primaries + 3 replicas, ``LocalRedisCluster``) and
runs the same N workloads against it (``mode: cluster``), side by side with the standalone server in
the same run: backend calls (target: within 2% of the lone replica, as standalone) and the cost of a
hit on the cluster next to a hit on the standalone server, measured interleaved (target: within
1.3x). The replicas get the tier's secret through ``GUARDCACHE_REDIS_SECRET`` (a random one unless
it is set). Needs the ``server`` and ``redis`` extras and ``redis-server`` (and, for ``--cluster``,
``redis-cli``) on PATH. Not part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

from guardcache.cache import LFUCache
from guardcache.cache.redis import RedisEndpoint, RedisSettings, TieredCache, build_tiered_cache
from guardcache.cache.redis.keys import key_hex
from guardcache.checks import codec
from guardcache.checks.verdict import CachedCheck, Verdict
from guardcache.emulator import DEFAULT_MODEL, EmulatorConfig, EmulatorProcess
from guardcache.llm.types import Usage
from guardcache.testing import LocalRedisCluster, RedisServer, run_replicas, write_replica_config


def zipf_workload(seed: int, checks: int, universe: int, alpha: float, unique_share: float) -> list[str]:
    """``checks`` messages: Zipf(alpha) draws from a universe shared by all replicas, and a share of
    messages unique to this replica and position (never repeated anywhere)."""
    rng = random.Random(seed)
    weights = [1.0 / (rank**alpha) for rank in range(1, universe + 1)]
    out = []
    for i in range(checks):
        if rng.random() < unique_share:
            out.append(f"replica {seed} one-off question number {i}: is this message safe?")
        else:
            (rank,) = rng.choices(range(universe), weights=weights)
            out.append(f"Popular question {rank}: how do I reset my account password?")
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def scenario(
    name: str,
    emu: EmulatorProcess,
    redis: RedisServer | LocalRedisCluster,
    store: str,
    workloads: list[list[str]],
    concurrency: int,
    timeout_ms: int = 50,
) -> dict[str, Any]:
    cluster = isinstance(redis, LocalRedisCluster)
    if cluster:
        redis.flushall()
    else:
        redis.client().flushall()
    await emu.areset(flush_cache=True)
    with tempfile.TemporaryDirectory() as tmp:
        config = write_replica_config(
            Path(tmp) / "config",
            emu.base_url,
            model=DEFAULT_MODEL,
            store=store,
            redis_url=redis.url,
            key_prefix="bench",
            maxsize=100_000,
            ttl=3600,
            timeout_ms=timeout_ms,
            backend_timeout=30,
            redis_extra="mode: cluster" if cluster else "",
        )
        started = time.perf_counter()
        reports = await run_replicas(config, workloads, Path(tmp), concurrency=concurrency)
        wall = time.perf_counter() - started
    stats = await emu.astats(prompts=False)
    latencies = [x for r in reports for x in r["latencies"]]
    errors = sum(1 for r in reports for res in r["results"] if res["error"])
    return {
        "name": name,
        "checks": len(latencies),
        "backend_calls": stats.requests_total,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "wall_s": wall,
        "errors": errors,
        "lease_waits": sum((r["tier"] or {}).get("lease_waits", 0) for r in reports),
        "l2_errors": sum((r["tier"] or {}).get("l2_errors", 0) for r in reports),
        "l2_hits": sum((r["tier"] or {}).get("l2_hits", 0) for r in reports),
        "warning_lines": sum(r["warning_lines"] for r in reports),
    }


class PlainAuth:
    """The tier before authentication, for this comparison only: names are the cache key in hex,
    values are stored and served as they are (what anyone with Redis access could forge)."""

    def key_digest(self, key: bytes) -> str:
        return key_hex(key)

    def seal(self, name: str, payload: bytes, expires_at_ms: int) -> bytes:
        return payload

    def open(self, name: str, data: bytes, now_ms: int) -> tuple[bytes, int]:
        return data, 0


async def redis_hit_cost(url: str, n: int = 2000, rounds: int = 6) -> dict[str, float]:
    """p50 ms of a get_or_compute served by Redis (L1 empty), authenticated and not, of a bare
    redis-py GET, and p50 us of the HMAC work of one hit (name + open) alone."""
    value = CachedCheck(Verdict(True, (), "safe"), Usage(400, 6, 406, 256, DEFAULT_MODEL, "nim"))
    # A generous budget: on a loaded machine a stall past 50 ms would turn one hit into a "miss";
    # the budget does not change what a hit costs.
    settings = RedisSettings(url=url, secret=secrets.token_bytes(32), key_prefix="benchhit", timeout_ms=1000)
    keys = [i.to_bytes(32, "big") for i in range(n)]

    def tier(scope: str, plain: bool) -> TieredCache:
        cache = build_tiered_cache(LFUCache(n + 1), codec=codec, settings=settings, scope=scope)
        if plain:
            cache.store._auth = PlainAuth()  # type: ignore[assignment]
        return cache

    async def never() -> CachedCheck:
        raise AssertionError("a Redis hit must not call the backend")

    readers: dict[str, TieredCache] = {}
    for label, plain in (("auth", False), ("plain", True)):
        writer = tier(f"cs:{label}", plain)
        await writer.connect()  # up before its writes, as a replica at start-up
        for key in keys:
            await writer.aput(key, value)
        await writer.aclose(flush=False)
        readers[label] = tier(f"cs:{label}", plain)
        await readers[label].connect()  # connections set up (the pool open) before the timed reads
    times: dict[str, list[float]] = {"auth": [], "plain": []}
    cpu = {"auth": 0.0, "plain": 0.0}  # this thread's CPU time: what other processes' load barely moves
    for _ in range(rounds):
        for reader in readers.values():
            reader.clear()  # empty L1: every lookup below is a Redis hit
        for i, key in enumerate(keys):  # interleaved, alternating order: both see the same load
            for label in ("auth", "plain") if i % 2 == 0 else ("plain", "auth"):
                c0, t0 = time.thread_time(), time.perf_counter()
                await readers[label].get_or_compute(key, never)
                times[label].append(time.perf_counter() - t0)
                cpu[label] += time.thread_time() - c0
    auth_reader = readers["auth"]
    client = auth_reader.store._client().client
    raw_times = []
    for key in keys:
        t0 = time.perf_counter()
        await client.get(auth_reader.store.value_key(key))
        raw_times.append(time.perf_counter() - t0)
    # The authentication work of one hit, alone: one key name (HMAC) and one open (HMAC + compare).
    auth = auth_reader.store._auth
    sealed = {key: auth.seal(auth_reader.store.value_key(key), codec.encode(value), 2**62) for key in keys}
    hmac_times = []
    for key in keys:
        t0 = time.perf_counter()
        name = auth_reader.store.keys.value_key(auth.key_digest(key))
        assert auth.open(name, sealed[key], 0) is not None
        hmac_times.append(time.perf_counter() - t0)
    for label, reader in readers.items():
        assert reader.tier_stats().l2_hits == n * rounds, label
        assert reader.tier_stats().l2_auth_failures == 0, label
        await reader.aclose(flush=False)
    return {
        "auth_ms": percentile(times["auth"], 0.5) * 1000,
        "plain_ms": percentile(times["plain"], 0.5) * 1000,
        "auth_p99_ms": percentile(times["auth"], 0.99) * 1000,
        "plain_p99_ms": percentile(times["plain"], 0.99) * 1000,
        "get_ms": percentile(raw_times, 0.5) * 1000,
        "auth_cpu_us": cpu["auth"] / (n * rounds) * 1e6,
        "plain_cpu_us": cpu["plain"] / (n * rounds) * 1e6,
        "hmac_us": percentile(hmac_times, 0.5) * 1e6,
    }


async def cluster_hit_cost(
    server_url: str, cluster: LocalRedisCluster, n: int = 2000, rounds: int = 6
) -> dict[str, float]:
    """p50/p99 ms of a get_or_compute served by Redis (L1 empty) on the standalone server and on the
    cluster, measured interleaved (key by key, alternating which goes first) so load hits both."""
    value = CachedCheck(Verdict(True, (), "safe"), Usage(400, 6, 406, 256, DEFAULT_MODEL, "nim"))
    secret = secrets.token_bytes(32)
    keys = [i.to_bytes(32, "big") for i in range(n)]
    where = {
        "standalone": RedisSettings(url=server_url, secret=secret, key_prefix="benchhit", timeout_ms=1000),
        "cluster": RedisSettings(
            endpoint=RedisEndpoint(mode="cluster", urls=(cluster.url,)),
            secret=secret,
            key_prefix="benchhit",
            timeout_ms=1000,
        ),
    }

    def tier(label: str) -> TieredCache:
        return build_tiered_cache(LFUCache(n + 1), codec=codec, settings=where[label], scope="cs:hit")

    async def never() -> CachedCheck:
        raise AssertionError("a Redis hit must not call the backend")

    readers: dict[str, TieredCache] = {}
    for label in where:
        writer = tier(label)
        await writer.connect()
        for key in keys:
            await writer.aput(key, value)
        await writer.aclose(flush=False)
        readers[label] = tier(label)
        await readers[label].connect()  # connections set up (the pool open) before the timed reads
    times: dict[str, list[float]] = {label: [] for label in where}
    for _ in range(rounds):
        for reader in readers.values():
            reader.clear()
        for i, key in enumerate(keys):
            for label in ("standalone", "cluster") if i % 2 == 0 else ("cluster", "standalone"):
                t0 = time.perf_counter()
                await readers[label].get_or_compute(key, never)
                times[label].append(time.perf_counter() - t0)
    for label, reader in readers.items():
        assert reader.tier_stats().l2_hits == n * rounds, label
        await reader.aclose(flush=False)
    return {
        f"{label}_{q}": percentile(times[label], p) * 1000
        for label in where
        for q, p in (("p50", 0.5), ("p99", 0.99))
    }


def print_cluster_hit_cost(hit: dict[str, float]) -> None:
    ratio = hit["cluster_p50"] / hit["standalone_p50"]
    print(
        f"Redis hit (L1 empty), p50: cluster {hit['cluster_p50']:.3f} ms vs standalone "
        f"{hit['standalone_p50']:.3f} ms = {ratio:.2f}x (target <= 1.3x); p99 {hit['cluster_p99']:.3f} vs "
        f"{hit['standalone_p99']:.3f} ms"
    )


def print_hit_cost(hit: dict[str, float]) -> None:
    print(
        f"Redis hit (L1 empty, value in Redis), p50: authenticated {hit['auth_ms']:.3f} ms vs "
        f"unauthenticated {hit['plain_ms']:.3f} ms (+{(hit['auth_ms'] - hit['plain_ms']) * 1000:.1f} us; "
        f"target < 0.5 ms); p99 {hit['auth_p99_ms']:.3f} vs {hit['plain_p99_ms']:.3f} ms\n"
        f"  CPU time per hit (mean, this process): {hit['auth_cpu_us']:.1f} vs {hit['plain_cpu_us']:.1f} us; "
        f"HMAC work of one hit alone (key name + open) p50: {hit['hmac_us']:.1f} us; "
        f"bare redis-py GET p50: {hit['get_ms']:.3f} ms"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--checks", type=int, default=3000, help="checks per replica")
    parser.add_argument("--universe", type=int, default=2000, help="distinct popular messages")
    parser.add_argument("--alpha", type=float, default=0.99)
    parser.add_argument("--unique-share", type=float, default=0.25)
    parser.add_argument("--concurrency", type=int, default=8, help="checks in flight per replica")
    parser.add_argument("--timeout-ms", type=int, default=50, help="the Redis budget (config default 50)")
    parser.add_argument("--time-scale", type=float, default=1.0, help="emulator latency scale")
    parser.add_argument("--hit-only", action="store_true", help="only the cost of one Redis hit")
    parser.add_argument(
        "--cluster", action="store_true", help="also a local Redis Cluster, side by side with standalone"
    )
    args = parser.parse_args()
    # The replicas read the tier's secret from the default secret_env_var (inherited environment).
    os.environ.setdefault("GUARDCACHE_REDIS_SECRET", secrets.token_hex(32))
    if args.hit_only:
        with tempfile.TemporaryDirectory() as redis_dir:
            redis = RedisServer(Path(redis_dir))
            redis.start()
            try:
                print_hit_cost(await redis_hit_cost(redis.url))
                if args.cluster:
                    with LocalRedisCluster(Path(redis_dir) / "cluster") as cluster:
                        print_cluster_hit_cost(await cluster_hit_cost(redis.url, cluster))
            finally:
                redis.kill()
        return

    workloads = [
        zipf_workload(seed, args.checks, args.universe, args.alpha, args.unique_share)
        for seed in range(args.replicas)
    ]
    union = [m for w in workloads for m in w]
    print(
        f"workload: {args.replicas} replicas x {args.checks} checks, Zipf alpha {args.alpha} over "
        f"{args.universe} messages + {args.unique_share:.0%} one-off; {len(set(union))} distinct in "
        f"the union; {args.concurrency} in flight per replica; emulator time_scale {args.time_scale}"
    )
    emu_config = EmulatorConfig(port=0).merged(latency={"time_scale": args.time_scale})
    cluster_hit: dict[str, float] | None = None
    with tempfile.TemporaryDirectory() as redis_dir:
        redis = RedisServer(Path(redis_dir))
        redis.start()
        cluster = LocalRedisCluster(Path(redis_dir) / "cluster") if args.cluster else None
        try:
            if cluster is not None:
                cluster.start()
            # First, while the machine is quiet: the cost of one Redis hit.
            hit = await redis_hit_cost(redis.url)
            if cluster is not None:
                cluster_hit = await cluster_hit_cost(redis.url, cluster)
            async with EmulatorProcess(emu_config) as emu:
                n = args.concurrency
                rows = [
                    await scenario("memory", emu, redis, "memory", workloads, n),
                    await scenario("redis", emu, redis, "redis", workloads, n, args.timeout_ms),
                ]
                if cluster is not None:
                    rows.append(
                        await scenario("redis cluster", emu, cluster, "redis", workloads, n, args.timeout_ms)
                    )
                # one process with the same total load in flight as the N replicas
                rows.append(
                    await scenario("one replica, union", emu, redis, "memory", [union], n * len(workloads))
                )
        finally:
            redis.kill()
            if cluster is not None:
                cluster.stop()

    print(
        f"\n{'scenario':<22}{'checks':>8}{'backend calls':>15}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'wall s':>8}{'L2 hits':>9}{'L2 errors':>11}{'lease waits':>13}"
    )
    for r in rows:
        print(
            f"{r['name']:<22}{r['checks']:>8}{r['backend_calls']:>15}{r['p50_ms']:>9.2f}"
            f"{r['p99_ms']:>9.1f}{r['wall_s']:>8.1f}{r['l2_hits']:>9}{r['l2_errors']:>11}"
            f"{r['lease_waits']:>13}" + (f"   ({r['errors']} failed checks)" if r["errors"] else "")
        )
    memory, alone = rows[0], rows[-1]
    for shared in rows[1:-1]:
        print(
            f"{shared['name']}: backend calls vs memory "
            f"{shared['backend_calls'] / memory['backend_calls']:.2f}x, vs one replica alone "
            f"{shared['backend_calls'] / alone['backend_calls']:.3f} (target <= 1.02); "
            f"{shared['warning_lines']} WARNING lines logged by the {len(workloads)} replicas"
        )
    print_hit_cost(hit)
    if cluster_hit is not None:
        print_cluster_hit_cost(cluster_hit)


if __name__ == "__main__":
    asyncio.run(main())
