"""The shared tier on a real Sentinel set (a primary, 2 replicas, 3 Sentinels): reads and writes reach
the current primary, a failover mid-load fails no turn, the tier serves hits again from the promoted
replica, and ``cache stats|clear`` find the primary through the Sentinels."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from guardcache import LLMRails, RailsConfig
from guardcache.cache.redis import RedisEndpoint
from guardcache.cache.redis.keys import model_scope
from guardcache.cli import main
from guardcache.emulator import DEFAULT_MODEL
from guardcache.testing import SentinelSet
from guardcache.testing.pytest_plugin import EmulatorFactory
from tests.integration.redis_support import TEST_SECRET, ready_tier, verdict

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def redis_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDCACHE_REDIS_SECRET", TEST_SECRET.decode())


def endpoint(sentinels: SentinelSet) -> RedisEndpoint:
    return RedisEndpoint(
        mode="sentinel", sentinels=tuple(sentinels.sentinels), service_name=sentinels.service_name
    )


def redis_yaml(sentinels: SentinelSet, prefix: str) -> str:
    where = ", ".join(f"'{a}'" for a in sentinels.sentinel_addresses)
    name = sentinels.service_name
    return f"{{mode: sentinel, sentinels: [{where}], service_name: {name}, key_prefix: {prefix}}}"


async def test_the_tier_reads_and_writes_the_primary_the_sentinels_name(redis_sentinel: SentinelSet) -> None:
    writer, reader = await ready_tier(endpoint(redis_sentinel)), await ready_tier(endpoint(redis_sentinel))
    await writer.aput(b"\x01" * 32, verdict())
    assert await reader.get_or_compute(b"\x01" * 32, lambda: verdict("computed")) == verdict()
    assert reader.tier_stats().l2_hits == 1
    assert redis_sentinel.primary().client().exists(writer.store.value_key(b"\x01" * 32)) == 1
    await asyncio.gather(writer.aclose(), reader.aclose())


async def test_a_failover_mid_load_fails_no_turn_and_the_new_primary_serves_hits(
    redis_sentinel: SentinelSet, emulator_factory: EmulatorFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="guardcache.cache.redis")
    guard = await emulator_factory()
    config = RailsConfig.from_content(
        f"""
models:
  - type: content_safety
    engine: nim
    model: {DEFAULT_MODEL}
    parameters: {{base_url: "{guard.base_url}"}}
    cache: {{store: redis, redis: {redis_yaml(redis_sentinel, "gcsentinelfailover")}}}
rails:
  input:
    flows:
      - content safety check input $model=content_safety
"""
    )
    rails = LLMRails(config)
    cache: Any = rails.model_caches["content_safety"]
    await cache.connect()
    results: list[Any] = []
    stop = asyncio.Event()

    async def load(worker: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            results.append(await rails.check_async([{"role": "user", "content": f"w{worker} m{i % 40}"}]))
            await asyncio.sleep(0.005)

    async def more_turns(count: int) -> int:
        """Once ``count`` more turns have ended (however fast this machine runs them)."""
        target = len(results) + count
        deadline = time.monotonic() + 30
        while len(results) < target:
            assert time.monotonic() < deadline, f"{len(results)} turns, waiting for {target}"
            await asyncio.sleep(0.02)
        return len(results)

    workers = [asyncio.create_task(load(w)) for w in range(8)]
    before = await more_turns(80)  # the load runs ...
    old = await asyncio.to_thread(redis_sentinel.kill_primary)
    new = await asyncio.to_thread(redis_sentinel.wait_for_failover, old)
    promoted = len(results)
    await more_turns(80)  # ... before, during and after the failover
    stop.set()
    await asyncio.wait_for(asyncio.gather(*workers), 60)
    assert before >= 80 and len(results) >= promoted + 80
    assert all(r.allowed and r.input[0].error is None for r in results)  # no turn failed
    assert cache.tier_stats().l2_errors >= 1

    deadline = time.monotonic() + 30
    n = 0
    while True:  # the tier recovers by itself: a verdict written now is a hit for an empty L1
        n += 1
        text = f"after the failover, message {n}"
        await rails.check_async([{"role": "user", "content": text}])
        cache.l1.clear()
        if (await rails.check_async([{"role": "user", "content": text}])).input[0].from_cache:
            break
        assert time.monotonic() < deadline, cache.tier_stats()
        await asyncio.sleep(0.1)
    assert any(new.client().scan_iter(match="gcsentinelfailover:*"))  # on the promoted replica
    await rails.aclose()


def test_cache_stats_and_clear_find_the_primary_through_the_sentinels(
    tmp_path: Path, redis_sentinel: SentinelSet, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = "gcsentinelcli"

    async def fill() -> None:
        tier = await ready_tier(
            endpoint(redis_sentinel), model_scope("content_safety", DEFAULT_MODEL), key_prefix=prefix
        )
        for i in range(30):
            await tier.get_or_compute(i.to_bytes(32, "big"), lambda: verdict())
        await tier.aclose()

    asyncio.run(fill())
    (tmp_path / "config.yml").write_text(
        f"""
models:
  - type: content_safety
    engine: nim
    model: {DEFAULT_MODEL}
    parameters: {{base_url: "http://127.0.0.1:9/v1"}}
    cache: {{store: redis, redis: {redis_yaml(redis_sentinel, prefix)}}}
""",
        encoding="utf-8",
    )
    assert main(["cache", "stats", "--config", str(tmp_path), "--json"]) == 0
    (model,) = json.loads(capsys.readouterr().out)["models"]
    assert model["entries"] == 30 and model["redis"].startswith(f"sentinel {redis_sentinel.service_name}@")
    assert main(["cache", "clear", "--config", str(tmp_path), "--all", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 31
    # emptied; what remains is the model's clear token, which tells running replicas
    left = list(redis_sentinel.client().scan_iter(match=f"{prefix}:*"))
    assert len(left) == 1 and left[0].endswith(b":cleared"), left
