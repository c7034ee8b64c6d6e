"""Redis down, restarted, slow or refusing: no request fails or waits on it, and the tier recovers."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from guardcache.cache.redis.store import CONNECTING, FAILED, SKIPPED
from tests.integration.redis_support import (
    RedisServer,
    free_port,
    lookups_of,
    make_tier,
    ready_tier,
    verdict,
)

pytestmark = pytest.mark.integration

TIER_LOG = "guardcache.cache.redis"


class Backend:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self) -> Any:
        self.calls += 1
        return verdict()


def tier_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == TIER_LOG and r.levelno == logging.WARNING]


async def wait_until_closed(tier: Any, within: float = 30.0) -> None:
    """Keep asking for new keys (an L1 miss is what notices a due probe) until Redis is used again."""
    deadline = time.monotonic() + within
    n = 0
    while time.monotonic() < deadline:
        n += 1
        await tier.get_or_compute(b"probe" + n.to_bytes(27, "big"), Backend())
        if not tier.store.breaker.closed:
            await asyncio.sleep(0.02)
            continue
        return
    raise AssertionError("the circuit did not close after Redis came back")


async def test_redis_killed_and_restarted_mid_run(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=TIER_LOG)
    tier = await ready_tier(redis_server.url, timeout_ms=50, breaker_base_s=0.05, breaker_cap_s=0.2)
    backend = Backend()
    for i in range(60):  # before: Redis works
        await tier.get_or_compute(bytes([i % 20]) * 32, backend)
    redis_server.kill()
    outage = lookups_of(tier)
    for i in range(400):  # the outage: every request still answered, none pays for Redis
        assert await tier.get_or_compute(i.to_bytes(2, "big") * 16, backend) == verdict()
        if i % 50 == 0:
            await asyncio.sleep(0.05)  # let probes come due during the outage
    stats = tier.tier_stats()
    assert stats.l2_errors >= 1
    assert stats.circuit_open
    assert stats.l2_unavailable >= 380  # nearly every lookup skipped Redis at no cost
    # At most one lookup asked the dead Redis (the one that opened the circuit); every other one
    # skipped it, the background probes included.
    assert len(outage) >= 380 and outage.count(FAILED) <= 1
    assert outage.count(SKIPPED) == len(outage) - outage.count(FAILED)
    warnings = tier_warnings(caplog)
    assert 1 <= len(warnings) <= 3, warnings  # throttled: not one per request or probe
    assert "unavailable" in warnings[0] and "serving from the in-process cache" in warnings[0]

    redis_server.restart()
    await wait_until_closed(tier)
    assert any("reachable again" in r.getMessage() for r in caplog.records if r.name == TIER_LOG)
    await tier.get_or_compute(b"\xaa" * 32, backend)  # written to the restarted Redis
    fresh = await ready_tier(redis_server.url)  # e.g. another replica, or this one after a restart
    calls = backend.calls
    assert await fresh.get_or_compute(b"\xaa" * 32, backend) == verdict()
    assert backend.calls == calls
    assert fresh.tier_stats().l2_hits == 1


async def test_a_slow_redis_does_not_slow_requests(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=TIER_LOG)
    tier = await ready_tier(redis_server.url, timeout_ms=50, breaker_base_s=0.05, breaker_cap_s=0.2)
    await tier.get_or_compute(b"\x00" * 32, Backend())  # connected and warm
    # Redis hangs until resumed: unlike a fixed CLIENT PAUSE, the hang cannot end before the loop
    # below does on a slow, loaded machine (which made the old "still paused" check flaky).
    before = tier.tier_stats()
    redis_server.pause()
    lookups = lookups_of(tier)
    try:
        for i in range(1, 41):
            # Redis never answers while paused: only the request's budget can end the wait.
            get = tier.get_or_compute(bytes([i]) * 32, Backend())
            assert await asyncio.wait_for(get, 30) == verdict()
            await asyncio.sleep(0.01)
    finally:
        redis_server.resume()
    # The first request paid the 50 ms budget (the log line proves that it was the request's budget
    # that cut the wait short, not redis-py's 200 ms backstop) ...
    warnings = tier_warnings(caplog)
    assert warnings and "TimeoutError: no answer within 50 ms" in warnings[0], warnings
    # ... and the open circuit made the others cost nothing: they never asked Redis.
    assert len(lookups) == 40 and lookups.count(FAILED) <= 1
    assert lookups.count(SKIPPED) == 40 - lookups.count(FAILED)
    stats = tier.tier_stats()
    assert stats.l2_errors >= 1 and stats.l2_unavailable - before.l2_unavailable == 40
    await wait_until_closed(tier)
    assert len(tier_warnings(caplog)) <= 3  # throttled


async def test_a_refusing_redis_does_not_fail_requests(redis_server: RedisServer) -> None:
    client = redis_server.client()
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", "1")  # every write is refused with OOM
    tier = await ready_tier(redis_server.url, breaker_base_s=0.05)
    backend = Backend()
    for i in range(20):
        assert await tier.get_or_compute(bytes([i]) * 32, backend) == verdict()
    assert backend.calls == 20
    assert tier.tier_stats().l2_errors >= 1


async def test_an_unreachable_redis_costs_nothing_from_the_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=TIER_LOG)
    tier = make_tier(f"redis://127.0.0.1:{free_port()}/0")  # nobody listens
    backend = Backend()
    lookups = lookups_of(tier)
    for i in range(500):
        assert await tier.get_or_compute(i.to_bytes(2, "big") * 16, backend) == verdict()
    # The tier never came up: every lookup was a miss of a tier still connecting (the first one
    # started the set-up, which failed; the others found it failed or waiting to try again). A
    # set-up that fails is not an operation of a tier that was up: the circuit stays closed.
    assert lookups == [CONNECTING] * 500
    stats = tier.tier_stats()
    assert stats.connecting and not stats.circuit_open and stats.l2_errors >= 1
    assert backend.calls == 500
    (warning,) = tier_warnings(caplog)  # throttled: one line however many attempts
    assert "not connected (ConnectionError" in warning and "connecting to 127.0.0.1:" in warning
