"""The Redis tier counts into its L1's recorder: one snapshot holds the L1's lookups and loads, the
tier's L2 outcomes and the store's errors, on a real redis-server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from guardcache.cache import LFUCache
from guardcache.cache.recorder import DISABLED_RECORDER
from guardcache.cache.redis import RedisSettings, build_tiered_cache
from guardcache.checks import codec
from tests.integration.redis_support import (
    TEST_SECRET,
    RedisServer,
    free_port,
    make_tier,
    ready_tier,
    verdict,
)

pytestmark = pytest.mark.integration

KEY = bytes(range(32))


class Backend:
    """Counts its calls (a real coroutine, no mock)."""

    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail

    async def __call__(self) -> Any:
        self.calls += 1
        await asyncio.sleep(0.01)
        if self.fail:
            raise RuntimeError("backend down")
        return verdict()


async def test_one_snapshot_holds_l1_loads_and_l2_outcomes(redis_server: RedisServer) -> None:
    writer, reader = await ready_tier(redis_server.url), await ready_tier(redis_server.url)
    backend = Backend()
    assert writer.store.recorder is writer.recorder is writer.l1.recorder
    assert await writer.get_or_load(KEY, backend) == (verdict(), True)  # computed
    assert await reader.get_or_load(KEY, backend) == (verdict(), False)  # from Redis: no backend call
    assert await reader.get_or_load(KEY, backend) == (verdict(), False)  # from L1
    assert backend.calls == 1

    w = writer.recorder.snapshot()
    assert (w.misses, w.load_success, w.l2_misses, w.computations, w.l2_hits) == (1, 1, 1, 1, 0)
    assert w.total_load_time >= 0.01  # the whole L2-then-backend path of the L1 miss
    r = reader.recorder.snapshot()
    assert (r.misses, r.hits, r.load_success, r.l2_hits, r.l2_misses, r.computations) == (1, 1, 1, 1, 0, 0)
    # The stats views are made from the same snapshot: they agree.
    tier, lfu = reader.tier_stats(), reader.get_stats()
    assert (tier.lookups, tier.l1_hits, tier.l2_hits) == (lfu.lookups, lfu.hits, 1)
    assert lfu.load_success == 1 and lfu.total_load_time == r.total_load_time

    reader.reset_stats()
    assert reader.tier_stats().l2_hits == 0 and reader.get_stats().load_success == 0


async def test_a_failed_backend_call_is_a_load_failure_and_a_computation(redis_server: RedisServer) -> None:
    tier = await ready_tier(redis_server.url)
    with pytest.raises(RuntimeError):
        await tier.get_or_compute(KEY, Backend(fail=True))
    s = tier.recorder.snapshot()
    assert (s.load_failure, s.load_success, s.computations, s.l2_misses) == (1, 0, 1, 1)


async def test_store_errors_are_counted_in_the_same_recorder() -> None:
    tier = make_tier(f"redis://127.0.0.1:{free_port()}/0")  # nobody listens there
    backend = Backend()
    assert await tier.get_or_load(KEY, backend) == (verdict(), True)
    s = tier.recorder.snapshot()
    assert s.l2_errors >= 1 and s.l2_unavailable == 1 and s.computations == 1 and s.load_success == 1
    assert tier.tier_stats().l2_errors == s.l2_errors
    await tier.aclose(flush=False)


async def test_a_tier_over_a_disabled_recorder_counts_nothing(redis_server: RedisServer) -> None:
    tier = build_tiered_cache(
        LFUCache(10, recorder=DISABLED_RECORDER),
        codec=codec,
        settings=RedisSettings(url=redis_server.url, key_prefix="gctest", secret=TEST_SECRET),
        scope="content_safety:disabled0",
    )
    assert await tier.get_or_load(KEY, Backend()) == (verdict(), True)
    stats = tier.tier_stats()
    assert (stats.lookups, stats.l2_misses, stats.computations) == (0, 0, 0)
