"""The shared tier works from a process's first check: setting up its connections (TCP, TLS, AUTH, a
cluster's slots, Sentinel's primary) is not an operation's 50 ms. A check that arrives before the
tier is up is a miss for that check only (never a trip of the circuit breaker), what it computes is
written once the tier is up, and a graceful stop writes what is still kept. Bad endpoints (a seed
node down, a Sentinel that does not know the service, slots not covered, a Redis that accepts TCP but
never answers) are a WARNING naming the node or service; checks go on, and the tier joins once the
endpoint is healthy.

The slow connection set-up is a real TCP proxy on 127.0.0.1 (``SlowConnectProxy``) that holds each
new connection 80 ms (or longer) before it carries bytes, in front of a real redis-server.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from guardcache import LLMRails, RailsConfig
from guardcache.cache.redis import RedisEndpoint
from guardcache.cache.redis.store import CONNECTING, FAILED, Lease
from guardcache.emulator import DEFAULT_MODEL
from guardcache.server.metrics import CacheCollector
from guardcache.server.settings import ServeSettings
from guardcache.server.state import ServerState
from guardcache.testing import LocalRedisCluster, SentinelSet, run_replicas, write_replica_config
from guardcache.testing.pytest_plugin import EmulatorFactory
from guardcache.testing.tcp_proxy import SlowConnectProxy
from tests.integration.redis_support import (
    TEST_SECRET,
    RedisServer,
    free_port,
    lookups_of,
    make_tier,
    verdict,
)

pytestmark = pytest.mark.integration

TIER_LOG = "guardcache.cache.redis"
EVENTUALLY = 30.0  # a deadline for a hang, never a measure of speed
SLOW = 0.08  # the set-up of every new connection through the proxy: longer than an operation's 50 ms


@pytest.fixture(autouse=True)
def redis_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDCACHE_REDIS_SECRET", TEST_SECRET.decode())


def texts(tag: str, n: int = 20) -> list[str]:
    return [f"Fresh replica {tag}: tell me something interesting about topic {i}, please." for i in range(n)]


def stored(client: Any, prefix: str) -> int:
    """Verdicts under ``prefix`` (value keys end with the brace of their hash tag; not leases, not
    the stats hash)."""
    return sum(1 for _ in client.scan_iter(match=f"{prefix}:*}}", count=1000))


def key(i: int) -> bytes:
    return i.to_bytes(32, "big")


class Backend:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self) -> Any:
        self.calls += 1
        return verdict()


def tier_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == TIER_LOG and r.levelno == logging.WARNING]


async def eventually(predicate: Callable[[], object], what: str, within: float = EVENTUALLY) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {what}")
        await asyncio.sleep(0.02)


async def joins(tier: Any, within: float = EVENTUALLY) -> None:
    """Until the tier is up (it keeps trying by itself; nothing here asks it to)."""
    await eventually(lambda: not tier.store.connecting and tier.store._clients, "the tier came up", within)


# -- a slow connection set-up in front of a real Redis ------------------------------------------------


async def test_a_fresh_replica_behind_a_slow_connection_setup_writes_every_verdict(
    tmp_path: Path, redis_server: RedisServer, emulator_factory: EmulatorFactory
) -> None:
    emulator = await emulator_factory()
    workload = texts("standalone")
    async with SlowConnectProxy(("127.0.0.1", redis_server.port), delay=SLOW) as proxy:
        config = write_replica_config(
            tmp_path / "slow",
            emulator.base_url,
            model=DEFAULT_MODEL,
            redis_url=proxy.url,
            key_prefix="gcslow",
        )
        # cold: its first checks arrive while the tier is still connecting
        (writer,) = await run_replicas(config, [workload], tmp_path, cold=True, step_timeout=60)
        assert emulator.stats().requests_total == len(workload)
        assert all(r["error"] is None for r in writer["results"])
        assert writer["redis_log"] == [] and writer["writes_dropped"] == 0  # no "unavailable", nothing lost
        assert stored(redis_server.client(), "gcslow") == len(workload)  # all 20 written
        # A second replica through the same proxy, up before its checks, one at a time (on its open
        # connection): every verdict from Redis, no call to the guard.
        (reader,) = await run_replicas(config, [workload], tmp_path, concurrency=1, step_timeout=60)
        assert proxy.accepted >= 2
    assert emulator.stats().requests_total == len(workload)
    assert reader["tier"]["l2_hits"] == len(workload) and reader["redis_log"] == []


async def test_a_fresh_replica_behind_a_slow_seed_node_writes_every_verdict(
    tmp_path: Path, redis_cluster: LocalRedisCluster, emulator_factory: EmulatorFactory
) -> None:
    emulator = await emulator_factory()
    workload = texts("cluster seed")
    seed = redis_cluster.nodes[0]
    async with SlowConnectProxy(("127.0.0.1", seed.port), delay=SLOW) as proxy:
        config = write_replica_config(
            tmp_path / "slowseed",
            emulator.base_url,
            model=DEFAULT_MODEL,
            redis_url=proxy.url,  # the documented default: one seed node
            key_prefix="gcslowseed",
            redis_extra="mode: cluster",
        )
        (writer,) = await run_replicas(config, [workload], tmp_path, cold=True, step_timeout=60)
        assert all(r["error"] is None for r in writer["results"])
        assert writer["redis_log"] == [] and writer["writes_dropped"] == 0
        assert sum(1 for _ in redis_cluster.keys("gcslowseed:*}")) == len(workload)
        (reader,) = await run_replicas(config, [workload], tmp_path, step_timeout=60)  # all at once
        assert proxy.accepted >= 2  # each replica read the slots through the slow seed
    assert emulator.stats().requests_total == len(workload)
    assert reader["tier"]["l2_hits"] == len(workload) and reader["redis_log"] == []


async def test_a_check_before_the_tier_is_up_is_a_miss_for_that_check_only(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=TIER_LOG)
    backend = Backend()
    # 300 ms per new connection: longer than any operation's budget, however stretched by a stalled loop
    async with SlowConnectProxy(("127.0.0.1", redis_server.port), delay=0.3) as proxy:
        tier = make_tier(proxy.url)
        lookups = lookups_of(tier)
        assert await tier.get_or_compute(key(1), backend) == verdict()  # the first check of a process
        assert lookups == [CONNECTING] and tier.store.pending_writes() == 1  # kept for later
        stats = tier.tier_stats()
        assert stats.connecting and not stats.circuit_open and stats.l2_errors == 0
        await joins(tier)  # the first check started its set-up; nothing else asks
        assert tier.store.breaker.closed and tier_warnings(caplog) == []
        # ... and once up, what it computed meanwhile is written
        client = redis_server.client()
        await eventually(lambda: client.exists(tier.store.value_key(key(1))), "the kept verdict written")

        # Up, with one connection open: a burst takes turns on it while the pool grows in the
        # background (each new connection is set up in 300 ms). No lookup is a failure of Redis.
        lookups.clear()
        await asyncio.gather(*(tier.get_or_compute(key(100 + i), backend) for i in range(8)))
        assert len(lookups) == 8 and FAILED not in lookups
        assert tier.store.breaker.closed and tier.tier_stats().l2_errors == 0 and tier_warnings(caplog) == []
        capacity = tier.store._client().capacity
        await eventually(lambda: capacity.open > 1 and not capacity.growing, "more connections open")
        await tier.aclose()


async def test_kept_writes_are_the_last_n_and_are_written_when_redis_comes_up(tmp_path: Path) -> None:
    port = free_port()
    tier = make_tier(f"redis://127.0.0.1:{port}/0", pending_writes=5)  # nobody listens there yet
    backend = Backend()
    for i in range(12):
        assert await tier.get_or_compute(key(i), backend) == verdict()
    assert tier.store.pending_writes() == 5 and tier.store.writes_dropped == 7  # the last 5 kept
    server = RedisServer(tmp_path, port=port)
    server.start()
    try:
        client = server.client()
        names = [tier.store.value_key(key(i)) for i in range(12)]
        # nothing asks: the tier tries again by itself, comes up and writes what it kept
        await eventually(lambda: all(client.exists(n) for n in names[7:]), "the last 5 written")
        assert not any(client.exists(n) for n in names[:7])
        assert tier.store.pending_writes() == 0 and backend.calls == 12
        await tier.aclose()
    finally:
        server.kill()


async def test_a_graceful_stop_writes_what_was_kept(redis_server: RedisServer) -> None:
    async with SlowConnectProxy(("127.0.0.1", redis_server.port), delay=0.3) as proxy:
        tier = make_tier(proxy.url)
        backend = Backend()
        await asyncio.gather(*(tier.get_or_compute(key(i), backend) for i in range(5)))
        assert tier.store.pending_writes() == 5  # the tier is still connecting
        await tier.aclose()  # waits for the set-up, writes them, then closes
    client = redis_server.client()
    assert all(client.exists(tier.store.value_key(key(i))) for i in range(5))
    assert tier.store.writes_dropped == 0


async def test_guardcache_check_writes_its_verdict_before_it_exits(
    tmp_path: Path, redis_server: RedisServer, emulator_factory: EmulatorFactory
) -> None:
    emulator = await emulator_factory()
    async with SlowConnectProxy(("127.0.0.1", redis_server.port), delay=0.3) as proxy:
        config = write_replica_config(
            tmp_path / "check",
            emulator.base_url,
            model=DEFAULT_MODEL,
            redis_url=proxy.url,
            key_prefix="gccheck",
        )
        argv = ["-m", "guardcache", "check", "A question about the weather.", "--config", str(config)]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, (out, err)
    assert stored(redis_server.client(), "gccheck") == 1  # its one verdict, written at the end
    assert b"Redis tier" not in err


def serve_config(folder: Path, base_url: str, redis_url: str, prefix: str) -> Path:
    """A served config: a main model and a content-safety rail cached in Redis (pool of 4)."""
    (folder / "config.yml").write_text(
        f"""
models:
  - type: main
    engine: nim
    model: {DEFAULT_MODEL}
    parameters: {{base_url: "{base_url}"}}
  - type: content_safety
    engine: nim
    model: {DEFAULT_MODEL}
    parameters: {{base_url: "{base_url}"}}
    cache: {{store: redis, redis: {{url: '{redis_url}', key_prefix: {prefix}, pool_size: 4}}}}
rails:
  input:
    flows:
      - content safety check input $model=content_safety
""",
        encoding="utf-8",
    )
    return folder


async def test_serve_brings_the_tier_up_at_warm_up_and_reports_it(
    tmp_path: Path, redis_server: RedisServer, emulator_factory: EmulatorFactory
) -> None:
    guard = await emulator_factory()
    async with SlowConnectProxy(("127.0.0.1", redis_server.port), delay=SLOW) as proxy:
        config = serve_config(tmp_path, guard.base_url, proxy.url, "gcserve")
        rails = LLMRails(RailsConfig.from_path(str(config)))
        state = ServerState(ServeSettings(config=str(config), ready_main="off"), {"default": rails})

        def gauge() -> float | None:
            for family in CacheCollector(state.caches).collect():
                if family.name == "guardcache_redis_connecting":
                    return float(family.samples[0].value)
            return None

        cache: Any = rails.model_caches["content_safety"]
        assert gauge() == 0.0 and not cache.tier_stats().connecting  # nothing asked it yet
        await state.start()  # warm-up: the readiness round and the tier, together
        try:
            assert not cache.tier_stats().connecting and gauge() == 0.0
            assert proxy.accepted >= 4  # its pool opened (pool_size 4), each through the slow set-up
            lookups = lookups_of(cache)
            checks = await asyncio.gather(
                *(rails.check_async([{"role": "user", "content": f"first {i}"}]) for i in range(4))
            )
            assert all(c.allowed for c in checks) and lookups == [Lease.ACQUIRED] * 4  # Redis answered
        finally:
            await state.stop()


async def test_serve_writes_what_it_kept_when_it_stops(
    tmp_path: Path, redis_server: RedisServer, emulator_factory: EmulatorFactory
) -> None:
    guard = await emulator_factory()
    async with SlowConnectProxy(("127.0.0.1", redis_server.port), delay=0.3) as proxy:
        config = serve_config(tmp_path, guard.base_url, proxy.url, "gcservestop")
        rails = LLMRails(RailsConfig.from_path(str(config)))
        settings = ServeSettings(config=str(config), warm_up=False, ready_main="off")
        state = ServerState(settings, {"default": rails})
        await state.start()  # no warm-up: the first lookup starts the tier
        try:
            checks = await rails.check_async([{"role": "user", "content": "kept until serve stops"}])
            assert checks.allowed
            cache: Any = rails.model_caches["content_safety"]
            assert cache.store.pending_writes() == 1  # the tier was still connecting
        finally:
            await state.stop()  # the shutdown writes it
    assert stored(redis_server.client(), "gcservestop") == 1


# -- bad endpoints: a WARNING naming the node or service; checks go on; the tier joins once healthy --


async def test_a_seed_node_that_is_down_is_named_and_another_one_serves(
    redis_cluster: LocalRedisCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=TIER_LOG)
    dead = free_port()
    seeds = (f"redis://127.0.0.1:{dead}/0", redis_cluster.url)
    tier = make_tier(RedisEndpoint(mode="cluster", urls=seeds), key_prefix="gcdeadseed")
    assert await tier.connect()  # through the other seed
    backend = Backend()
    assert await tier.get_or_compute(key(1), backend) == verdict()
    tier.clear()
    assert await tier.get_or_compute(key(1), backend) == verdict() and backend.calls == 1  # from Redis

    def named() -> bool:
        return any(f"127.0.0.1:{dead}" in w and "seed node" in w for w in tier_warnings(caplog))

    await eventually(named, "a WARNING naming the seed node that is down")
    assert tier.store.breaker.closed
    await tier.aclose()


async def test_a_sentinel_that_does_not_know_the_service_is_named_and_the_tier_joins_once_it_does(
    redis_sentinel: SentinelSet, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=TIER_LOG)
    service = "gcnotyet"
    where = RedisEndpoint(mode="sentinel", sentinels=tuple(redis_sentinel.sentinels), service_name=service)
    tier = make_tier(where, key_prefix="gcunknownservice")
    backend = Backend()
    lookups = lookups_of(tier)
    assert not await tier.connect()
    for i in range(5):  # checks go on, from the guard
        assert await asyncio.wait_for(tier.get_or_compute(key(i), backend), EVENTUALLY) == verdict()
    assert lookups == [CONNECTING] * 5 and backend.calls == 5 and tier.store.breaker.closed
    warnings = tier_warnings(caplog)
    assert warnings and "MasterNotFoundError" in warnings[0] and repr(service) in warnings[0], warnings

    primary = redis_sentinel.primary()
    watchers = [s.client() for s in redis_sentinel.watchers]
    try:
        for watcher in watchers:  # now the Sentinels monitor it
            watcher.execute_command("SENTINEL", "MONITOR", service, "127.0.0.1", primary.port, 2)
        await joins(tier)
        client = primary.client()
        await eventually(
            lambda: all(client.exists(tier.store.value_key(key(i))) for i in range(5)),
            "kept verdicts written",
        )
        tier.clear()
        lookups.clear()
        assert await tier.get_or_compute(key(0), backend) == verdict() and backend.calls == 5  # from Redis
        assert any("is connected" in r.getMessage() for r in caplog.records if r.name == TIER_LOG)
    finally:
        for watcher in watchers:
            watcher.execute_command("SENTINEL", "REMOVE", service)
        await tier.aclose()


async def test_a_cluster_whose_slots_are_not_all_covered_is_named_and_joins_once_they_are(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=TIER_LOG)
    node = RedisServer(
        tmp_path,
        args=[
            "--cluster-enabled", "yes", "--cluster-config-file", str(tmp_path / "nodes.conf"),
            "--cluster-port", str(free_port()),
        ],
    )  # fmt: skip
    node.start_on_free_port()
    try:
        admin = node.client()
        admin.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 8000)  # half the slots have no primary
        tier = make_tier(RedisEndpoint(mode="cluster", urls=(node.url,)), key_prefix="gcuncovered")
        backend = Backend()
        lookups = lookups_of(tier)
        assert not await tier.connect()
        for i in range(3):
            assert await asyncio.wait_for(tier.get_or_compute(key(i), backend), EVENTUALLY) == verdict()
        assert lookups == [CONNECTING] * 3 and tier.store.breaker.closed
        warnings = tier_warnings(caplog)
        assert warnings and "8001 of 16384 slots" in warnings[0] and "8001-16383" in warnings[0], warnings
        assert f"127.0.0.1:{node.port}" in warnings[0]  # where: the seed node

        admin.execute_command("CLUSTER", "ADDSLOTSRANGE", 8001, 16383)  # now every slot is served
        await joins(tier)
        await eventually(
            lambda: all(admin.exists(tier.store.value_key(key(i))) for i in range(3)), "kept verdicts written"
        )
        lookups.clear()
        assert await tier.get_or_compute(key(9), backend) == verdict()
        assert lookups == [Lease.ACQUIRED]  # Redis answered
        await tier.aclose()
    finally:
        node.kill()


async def test_a_redis_that_accepts_tcp_but_never_answers_is_named_and_joins_once_it_answers(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=TIER_LOG)
    redis_server.pause()  # the kernel still accepts connections; nothing answers
    try:
        tier = make_tier(redis_server.url, key_prefix="gcsilent")
        backend = Backend()
        lookups = lookups_of(tier)
        for i in range(5):
            assert await asyncio.wait_for(tier.get_or_compute(key(i), backend), EVENTUALLY) == verdict()
        assert lookups == [CONNECTING] * 5  # each within its budget; none a failure
        assert not await tier.connect()  # the set-up times out (connect_timeout_ms)
        assert tier.store.breaker.closed
        await eventually(lambda: tier_warnings(caplog), "a WARNING")
        warning = tier_warnings(caplog)[0]
        assert f"connection set-up with 127.0.0.1:{redis_server.port} took longer than 1000 ms" in warning
    finally:
        redis_server.resume()
    await joins(tier)
    client = redis_server.client()
    await eventually(lambda: all(client.exists(tier.store.value_key(key(i))) for i in range(5)), "written")
    await tier.aclose()
