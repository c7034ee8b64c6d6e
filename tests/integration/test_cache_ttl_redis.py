"""``cache.ttl`` with the Redis tier: Redis keeps a verdict min(cache.ttl, cache.redis.ttl), and a
verdict another replica judged keeps, in this replica's memory, only the life it has left.

Real parts: a ``redis-server``, the NIM emulator, the rails built from a config. Time in memory is an
injected clock moved by hand; no test sleeps.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from guardcache import LLMRails, RailsConfig
from guardcache.cache import make_cache
from guardcache.cache.redis import RedisSettings, TieredCache, build_tiered_cache
from guardcache.checks import codec
from guardcache.emulator import DEFAULT_MODEL, EmulatorServer
from tests.clocks import FakeClock
from tests.integration.redis_support import TEST_SECRET, RedisServer, verdict

pytestmark = pytest.mark.integration

KEY = bytes(range(32))


@pytest.fixture(autouse=True)
def redis_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDCACHE_REDIS_SECRET", TEST_SECRET.decode())


def config_text(base_url: str, redis_url: str, cache_ttl: float | None, redis_ttl: int) -> str:
    ttl = f"\n      ttl: {cache_ttl}" if cache_ttl is not None else ""
    return f"""
models:
  - type: content_safety
    engine: nim
    model: {DEFAULT_MODEL}
    parameters: {{base_url: "{base_url}"}}
    cache:
      store: redis{ttl}
      redis: {{url: '{redis_url}', ttl: {redis_ttl}, key_prefix: gcttl}}
rails:
  input:
    flows:
      - content safety check input $model=content_safety
"""


@pytest.mark.parametrize(
    ("cache_ttl", "redis_ttl", "low_ms", "high_ms"),
    [
        pytest.param(60, 86400, 0, 60_000, id="cache-ttl-shorter"),
        pytest.param(100_000, 300, 60_000, 300_000, id="redis-ttl-shorter"),
        pytest.param(None, 300, 60_000, 300_000, id="no-cache-ttl"),
    ],
)
async def test_redis_keeps_a_verdict_the_shorter_of_the_two_ttls(
    cache_ttl: float | None,
    redis_ttl: int,
    low_ms: int,
    high_ms: int,
    emulator: EmulatorServer,
    redis_server: RedisServer,
) -> None:
    config = RailsConfig.from_content(config_text(emulator.base_url, redis_server.url, cache_ttl, redis_ttl))
    rails = LLMRails(config)
    try:
        result = await rails.check_async([{"role": "user", "content": "What is the capital of France?"}])
        assert result.input[0].error is None and result.input[0].allowed
    finally:
        await rails.aclose()
    client = redis_server.client()
    values = [k for k in client.scan_iter(match="gcttl:*") if k.endswith(b"}")]
    assert len(values) == 1, values  # the verdict, written when it was judged
    # A bound, not a timing: the key was set moments ago, and its life only shrinks from there.
    assert low_ms < client.pttl(values[0]) <= high_ms


def reader_tier(redis_url: str, clock: Any) -> TieredCache:
    l1 = make_cache("lfu", 100, track_stats=True, ttl=100.0, clock=clock)
    settings = RedisSettings(url=redis_url, secret=TEST_SECRET, key_prefix="gcttl", ttl_s=100.0)
    return build_tiered_cache(l1, codec=codec, settings=settings, scope="content_safety:00000000")


@pytest.mark.parametrize("path", ["get_or_compute", "aget"])
async def test_a_verdict_from_redis_lives_in_memory_only_what_it_has_left(
    path: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    """A verdict judged 70 s ago under a 100 s ttl (30 s left in Redis) is served from this
    replica's memory for those 30 s, not for a fresh 100 s: then it is read from Redis again."""
    writer = reader_tier(redis_server.url, FakeClock(50.0))
    assert await writer.connect()
    expires_at_ms = time.time_ns() // 1_000_000 + 30_000
    assert await writer.store.set(KEY, codec.encode(verdict()), expires_at_ms=expires_at_ms)

    clock = FakeClock(50.0)
    reader = reader_tier(redis_server.url, clock)
    assert await reader.connect()
    calls: list[int] = []

    async def backend() -> Any:
        calls.append(1)
        return verdict("unsafe", allowed=False)

    async def ask() -> Any:
        if path == "aget":
            return await reader.aget(KEY)
        return await reader.get_or_compute(KEY, backend)

    assert await ask() == verdict()  # from Redis
    clock.now += 20.0  # 10 s margin for however long this test took since the write
    assert await ask() == verdict()  # from memory
    assert reader.tier_stats().l2_hits == 1
    clock.now += 10.0  # 30 s since it was read: the verdict's life is over in memory
    assert await ask() == verdict()  # ... and Redis (its own clock: the 30 s have not passed) again
    stats = reader.tier_stats()
    assert stats.l2_hits == 2 and stats.computations == 0 and calls == []
    assert reader.get_stats().expirations == 1
    await reader.aclose()
    await writer.aclose()
