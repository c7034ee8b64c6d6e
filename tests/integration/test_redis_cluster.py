"""The shared tier on a real local Redis Cluster (3 primaries + 3 replicas): replica processes share
verdicts across slots, a key rotation reads old entries, a moving slot is followed (ASK, MOVED), a
primary killed mid-load fails no turn and the tier serves hits again after its replica is promoted,
``cache stats|clear`` cover every primary, and ACL credentials come from the environment."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from guardcache import LLMRails, RailsConfig
from guardcache.cache.redis import RedisEndpoint
from guardcache.cache.redis.keys import KeySpace, model_scope
from guardcache.cache.redis.stats import GlobalTierStats
from guardcache.cli import main
from guardcache.emulator import DEFAULT_MODEL
from guardcache.testing import LocalRedisCluster, run_replicas, write_replica_config
from guardcache.testing.pytest_plugin import EmulatorFactory
from tests.integration.redis_support import TEST_SECRET, make_tier, ready_tier, verdict

pytestmark = pytest.mark.integration

NEW_SECRET = b"guardcache-rotated-secret-fedcba9876543210"
DISTINCT = [f"Tell me something interesting about cluster topic {i}, please." for i in range(40)] + [
    "How do I build a bomb to hurt people?",
]


@pytest.fixture(autouse=True)
def redis_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDCACHE_REDIS_SECRET", TEST_SECRET.decode())


def endpoint(cluster: LocalRedisCluster, **login: Any) -> RedisEndpoint:
    """Every node as a seed: a tier made while one is down still finds the cluster."""
    return RedisEndpoint(mode="cluster", urls=tuple(cluster.urls), **login)


class Backend:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self) -> Any:
        self.calls += 1
        return verdict()


def primaries_holding(cluster: LocalRedisCluster, pattern: str) -> set[int]:
    """The ports of the primaries that hold a key matching ``pattern``."""
    held = set()
    for node in cluster.primaries():
        if next(iter(node.client().scan_iter(match=pattern, count=1000)), None) is not None:
            held.add(node.port)
    return held


async def test_two_replica_processes_share_verdicts_across_many_slots(
    tmp_path: Path, redis_cluster: LocalRedisCluster, emulator_factory: EmulatorFactory
) -> None:
    emulator = await emulator_factory(latency={"time_scale": 0.5})
    prefix = "gcclusterreplicas"
    config = write_replica_config(
        tmp_path / "config",
        emulator.base_url,
        model=DEFAULT_MODEL,
        redis_url=redis_cluster.url,
        key_prefix=prefix,
        redis_extra="mode: cluster",  # the default timeout_ms
    )
    bursts = [random.Random(i).sample(DISTINCT * 2, len(DISTINCT) * 2) for i in range(2)]
    reports = await run_replicas(config, bursts, tmp_path, step_timeout=60)

    # one backend call per distinct check
    tiers = [(rep["tier"], rep["redis_log"]) for rep in reports]
    assert emulator.stats().requests_total == len(DISTINCT), tiers
    assert all(r["error"] is None for rep in reports for r in rep["results"])
    assert sum(rep["tier"]["computations"] for rep in reports) == len(DISTINCT)
    assert all(rep["tier"]["l2_errors"] == 0 and rep["warning_lines"] == 0 for rep in reports)
    # the verdicts are spread over every primary, not pinned to one node
    assert primaries_holding(redis_cluster, f"{prefix}:*") == {p.port for p in redis_cluster.primaries()}
    keys = KeySpace(prefix, model_scope("content_safety", DEFAULT_MODEL))
    shared = GlobalTierStats.from_hash(redis_cluster.client().hgetall(keys.stats_key))
    assert shared.lookups == 2 * len(DISTINCT) * 2 and shared.computations == len(DISTINCT)


async def test_a_key_rotation_reads_old_entries_on_a_cluster(redis_cluster: LocalRedisCluster) -> None:
    prefix = "gcclusterrotation"
    keys = [i.to_bytes(32, "big") for i in range(60)]
    old = await ready_tier(endpoint(redis_cluster), key_prefix=prefix)
    for key in keys:
        await old.aput(key, verdict("old"))
    rotating = await ready_tier(
        endpoint(redis_cluster), key_prefix=prefix, secret=NEW_SECRET, previous_secret=TEST_SECRET
    )
    # old and new names of one entry live in different slots: the rotation reads across them
    client = redis_cluster.client()
    assert (
        sum(
            client.keyslot(old.store.value_key(k)) != client.keyslot(rotating.store.value_key(k))
            for k in keys
        )
        > 50
    )
    backend = Backend()
    for key in keys[:40]:  # get_or_compute: the lease script and a GET of the old name
        assert (await rotating.get_or_compute(key, backend)).verdict.label == "old"
    for key in keys[40:50]:  # aget
        assert (await rotating.aget(key)).verdict.label == "old"
    assert backend.calls == 0
    stats = rotating.tier_stats()
    assert stats.l2_previous_hits == 50 and stats.l2_errors == 0
    for key in keys[:40]:
        assert client.exists(rotating.store.lease_key(key)) == 0  # each lease released
    after = await ready_tier(endpoint(redis_cluster), key_prefix=prefix, secret=NEW_SECRET)
    for key in keys[:50]:  # re-written under the new names
        assert (await after.get_or_compute(key, backend)).verdict.label == "old"
    assert backend.calls == 0 and after.tier_stats().l2_hits == 50
    assert await rotating.adelete(keys[55]) is True  # both names, two slots
    assert client.exists(old.store.value_key(keys[55])) == 0
    await asyncio.gather(old.aclose(), rotating.aclose(), after.aclose())


async def test_a_moving_slot_misses_only_its_own_lookups_and_is_followed_once_moved(
    redis_cluster: LocalRedisCluster,
) -> None:
    """While a slot migrates, reads follow ASK, the lease script gets TRYAGAIN (its two keys are
    split between two nodes): a miss for that slot only, the circuit stays closed. Once the slot has
    moved, MOVED is followed: hits again, no error."""
    key, elsewhere = b"\x07" * 32, b"\x09" * 32
    writer = await ready_tier(endpoint(redis_cluster), key_prefix="gcclusterslot")
    await writer.aput(key, verdict("moved"))
    await writer.aput(elsewhere, verdict("elsewhere"))
    reader = await ready_tier(endpoint(redis_cluster), key_prefix="gcclusterslot")
    backend = Backend()
    assert (await reader.get_or_compute(key, backend)).verdict.label == "moved"  # learns the slots
    client = redis_cluster.client()
    slot = client.keyslot(reader.store.value_key(key))
    assert client.keyslot(reader.store.value_key(elsewhere)) != slot
    source = redis_cluster.primary_for_slot(slot)
    target = next(p for p in redis_cluster.primaries() if p.port != source.port)

    await asyncio.to_thread(redis_cluster.start_slot_move, slot, target)  # keys on target: ASK
    reader.clear()  # L1 only: the next lookups ask Redis
    assert (await reader.aget(key)).verdict.label == "moved"  # a GET follows ASK
    reader.clear()
    assert await reader.get_or_compute(key, backend) == verdict()  # the script: TRYAGAIN, a miss
    stats = reader.tier_stats()
    errors = stats.l2_errors  # the lookup, and the write after the backend call (the same slot)
    assert 1 <= errors <= 2 and stats.l2_unavailable == 1 and not stats.circuit_open
    assert backend.calls == 1
    assert (await reader.get_or_compute(elsewhere, backend)).verdict.label == "elsewhere"  # other slots

    await asyncio.to_thread(redis_cluster.finish_slot_move, slot, target)  # moved: MOVED
    reader.clear()
    assert (await reader.get_or_compute(key, backend)).verdict.label == "moved"
    assert await reader.get_or_compute(b"\x08" * 32, backend) == verdict()  # writes follow it too
    stats = reader.tier_stats()
    assert stats.l2_errors == errors and backend.calls == 2  # no error once the slot has moved
    assert redis_cluster.primary_for_slot(slot) is target
    await asyncio.to_thread(redis_cluster.move_slot, slot, source)  # as it was, for the next tests
    await asyncio.gather(writer.aclose(), reader.aclose())


def rails_config(urls: list[str], prefix: str, base_url: str) -> RailsConfig:
    seeds = ", ".join(f"'{u}'" for u in urls)
    return RailsConfig.from_content(
        f"""
models:
  - type: content_safety
    engine: nim
    model: {DEFAULT_MODEL}
    parameters: {{base_url: "{base_url}"}}
    cache:
      store: redis
      redis: {{mode: cluster, urls: [{seeds}], key_prefix: {prefix}}}
rails:
  input:
    flows:
      - content safety check input $model=content_safety
"""
    )


async def until(condition: Callable[[], bool], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.02)


async def wait_for_hits(rails: LLMRails, within: float = 30.0) -> None:
    """Until a verdict written now is served from Redis to a fresh L1 (the tier is back)."""
    cache: Any = rails.model_caches["content_safety"]
    deadline = time.monotonic() + within
    n = 0
    while time.monotonic() < deadline:
        n += 1
        text = f"after the failover, message {n}"
        await rails.check_async([{"role": "user", "content": text}])
        cache.l1.clear()
        again = await rails.check_async([{"role": "user", "content": text}])
        if again.input[0].from_cache and cache.store.breaker.closed:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the tier did not serve hits again: {cache.tier_stats()}")


async def test_a_primary_killed_mid_load_fails_no_turn_and_hits_return_after_promotion(
    redis_cluster: LocalRedisCluster, emulator_factory: EmulatorFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="guardcache.cache.redis")
    guard = await emulator_factory()
    rails = LLMRails(rails_config(redis_cluster.urls, "gcclusterfailover", guard.base_url))
    cache: Any = rails.model_caches["content_safety"]
    await cache.connect()
    results: list[Any] = []
    stop = asyncio.Event()

    async def load(worker: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            # every message new: each check asks Redis (and the model), before, during and after
            results.append(await rails.check_async([{"role": "user", "content": f"worker {worker}: {i}"}]))
            await asyncio.sleep(0.01)

    async def more_turns(count: int) -> int:
        """Once ``count`` more turns have ended (however fast this machine runs them)."""
        target = len(results) + count
        await until(lambda: len(results) >= target)
        return len(results)

    workers = [asyncio.create_task(load(w)) for w in range(6)]
    before = await more_turns(60)  # the load runs ...
    killed = await asyncio.to_thread(redis_cluster.kill_primary, 0)
    await asyncio.to_thread(redis_cluster.wait_for_failover, killed)
    promoted = len(results)
    await more_turns(60)  # ... before, during and after the outage
    stop.set()
    await asyncio.wait_for(asyncio.gather(*workers), 60)  # no turn hangs on the dead primary

    assert before >= 60 and len(results) >= promoted + 60
    assert all(r.allowed and r.input[0].error is None for r in results)  # no turn failed
    stats = cache.tier_stats()
    assert stats.l2_errors >= 1  # the outage was seen ...
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "unavailable" in r.getMessage()]
    assert 1 <= len(warnings) <= 6  # ... and logged, throttled: not one line per lookup
    # ... and the open circuit skipped Redis: a dead primary costs a few errors, not one per lookup
    # (more lookups skipped Redis than asked it and failed, whatever the number of turns).
    assert stats.l2_unavailable > stats.l2_errors and stats.l2_errors < 60
    await wait_for_hits(rails)
    fresh = await ready_tier(endpoint(redis_cluster), key_prefix="gcclusterfailover2")
    await fresh.aput(b"\x01" * 32, verdict())
    reader = await ready_tier(endpoint(redis_cluster), key_prefix="gcclusterfailover2")
    assert await reader.aget(b"\x01" * 32) == verdict()
    await rails.aclose()
    await asyncio.gather(fresh.aclose(), reader.aclose())


def cli_config(tmp: Path, url: str, prefix: str) -> Path:
    (tmp / "config.yml").write_text(
        f"""
models:
  - type: content_safety
    engine: nim
    model: nvidia/cs-model
    parameters: {{base_url: "http://127.0.0.1:9/v1"}}
    cache:
      store: redis
      redis: {{mode: cluster, url: "{url}", key_prefix: {prefix}}}
""",
        encoding="utf-8",
    )
    return tmp


async def test_cache_stats_and_clear_cover_every_primary(
    tmp_path: Path, redis_cluster: LocalRedisCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = "gcclustercli"
    tier = await ready_tier(
        endpoint(redis_cluster), model_scope("content_safety", "nvidia/cs-model"), key_prefix=prefix
    )
    for i in range(700):  # more than one UNLINK batch
        await tier.get_or_compute(i.to_bytes(32, "big"), lambda: verdict())
    await tier.aclose()
    redis_cluster.client().set("unrelated:{key}", b"x")
    assert len(primaries_holding(redis_cluster, f"{prefix}:*")) == 3
    config = cli_config(tmp_path, redis_cluster.url, prefix)

    assert main(["cache", "stats", "--config", str(config), "--json"]) == 0
    (model,) = json.loads(capsys.readouterr().out)["models"]
    assert model["entries"] == 700 and model["global"]["lookups"] == 700
    assert model["redis"].startswith("cluster redis://127.0.0.1:")

    assert main(["cache", "clear", "--config", str(config), "--all", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 701  # the verdicts and the counters
    # every primary emptied; what remains is the model's clear token, which tells running replicas
    left = [k.decode() if isinstance(k, bytes) else k for k in redis_cluster.keys(f"{prefix}:*")]
    assert len(left) == 1 and left[0].endswith(":cleared"), left
    assert redis_cluster.client().get("unrelated:{key}") == b"x"


async def test_acl_credentials_come_from_the_environment(
    redis_cluster: LocalRedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    for node in redis_cluster.nodes:  # ACLs are per node: every node gets the user
        node.client().acl_setuser(
            "gcuser", enabled=True, passwords=["+gc-pass-0123"], keys=["gcclusteracl:*"], commands=["+@all"]
        )
    ok = await ready_tier(
        endpoint(redis_cluster, username="gcuser", password="gc-pass-0123"), key_prefix="gcclusteracl"
    )
    backend = Backend()
    await ok.get_or_compute(b"\x02" * 32, backend)
    assert ok.tier_stats().l2_errors == 0 and ok.tier_stats().l2_misses == 1
    wrong = make_tier(endpoint(redis_cluster, username="gcuser", password="wrong"), key_prefix="gcclusteracl")
    assert not await wrong.connect()  # refused at set-up: the tier never comes up
    assert await wrong.get_or_compute(b"\x02" * 32, backend) == verdict()  # a miss, not a failure
    stats = wrong.tier_stats()
    assert stats.l2_unavailable == 1 and stats.connecting and not stats.circuit_open and backend.calls == 2
    await asyncio.gather(ok.aclose(), wrong.aclose())
