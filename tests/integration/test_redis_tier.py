"""TieredCache on a real redis-server: L1 -> Redis -> backend, TTL, isolation, codec, leases, stats."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from guardcache.cache import MISSING, Namespace
from guardcache.cache.redis.auth import ENVELOPE_OVERHEAD, ENVELOPE_VERSION
from guardcache.checks import codec
from tests.integration.redis_support import (
    RedisServer,
    ready_tier,
    verdict,
)

pytestmark = pytest.mark.integration

KEY = bytes(range(32))


#: How long a test waits for something that takes a round trip or two when idle: a deadline for a
#: hang, never a measure of speed (a loaded CI machine can stretch a round trip a hundredfold).
EVENTUALLY = 30.0


async def true_within(predicate: Callable[[], object], seconds: float = EVENTUALLY) -> bool:
    """Whether ``predicate()`` becomes true within ``seconds`` (polled: e.g. a tier's first request
    also connects, which a loaded CI machine can stretch far past a fixed short sleep)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.005)
    return bool(predicate())


async def gone_within(client: Any, key: str, seconds: float = EVENTUALLY) -> bool:
    """Whether ``key`` disappears from Redis within ``seconds`` (polled; the release is one round
    trip, but a loaded CI machine can delay it, so a fixed short sleep would be flaky)."""
    return await true_within(lambda: not client.exists(key), seconds)


class Backend:
    """A compute function that counts its calls (a real coroutine, no mock)."""

    def __init__(
        self, value: Any = None, *, delay: float = 0.0, fail: bool = False, gate: asyncio.Event | None = None
    ) -> None:
        self.value = value if value is not None else verdict()
        self.delay = delay
        self.fail = fail
        self.gate = gate  # if given, each call waits for it to be set
        self.calls = 0

    async def __call__(self) -> Any:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            raise RuntimeError("backend down")
        return self.value


async def test_l1_miss_is_served_from_redis_and_fills_l1(redis_server: RedisServer) -> None:
    writer, reader = await ready_tier(redis_server.url), await ready_tier(redis_server.url)
    backend = Backend()
    assert await writer.get_or_compute(KEY, backend) == verdict()
    assert backend.calls == 1

    assert not reader.contains(KEY)
    assert await reader.get_or_compute(KEY, backend) == verdict()
    assert backend.calls == 1  # a Redis hit, not a backend call
    assert reader.contains(KEY)  # ... which filled the reader's L1
    assert await reader.get_or_compute(KEY, backend) == verdict()

    stats = reader.tier_stats()
    assert (stats.l2_hits, stats.l1_hits, stats.l2_misses, stats.computations) == (1, 1, 0, 0)
    assert writer.tier_stats().l2_misses == 1
    assert writer.tier_stats().computations == 1
    assert reader.get_stats().hits == 1  # the LFU view still comes from get_stats()


async def test_a_hit_without_awaiting_is_an_l1_hit_and_a_miss_is_left_to_get_or_compute(
    redis_server: RedisServer,
) -> None:
    """``TieredCache.hit`` (the checks' hit path): an L1 hit counted as ``get_or_compute`` counts
    one; a key L1 does not hold is MISSING, counting nothing, even when Redis holds it: the
    caller's ``get_or_compute`` then reads Redis and counts that lookup once."""
    writer, reader = await ready_tier(redis_server.url), await ready_tier(redis_server.url)
    backend = Backend()
    await writer.get_or_compute(KEY, backend)
    assert reader.hit(KEY) is MISSING  # in Redis, not in this replica's L1
    assert (reader.tier_stats().lookups, reader.tier_stats().l2_hits) == (0, 0)
    assert await reader.get_or_compute(KEY, backend) == verdict()
    assert reader.hit(KEY) == verdict()
    stats = reader.tier_stats()
    assert (stats.lookups, stats.l1_hits, stats.l2_hits, stats.computations) == (2, 1, 1, 0)
    assert backend.calls == 1


async def test_redis_holds_only_keyed_digests_and_sealed_codec_bytes(redis_server: RedisServer) -> None:
    tier = await ready_tier(redis_server.url, "content_safety:abcd0123", ttl_s=60)
    ns = Namespace.of("content_safety", "nvidia/model", "tpl")
    secret = "my credit card number is 4111 1111 1111 1111"
    await tier.get_or_compute(ns.key(secret), Backend())
    client = redis_server.client()
    keys = [k.decode() for k in client.scan_iter(match="gctest:*")]
    assert len(keys) == 1
    assert re.fullmatch(r"gctest:content_safety:abcd0123:\{[0-9a-f]{64}\}", keys[0])
    assert keys[0] == tier.store.value_key(ns.key(secret))
    assert ns.key(secret).hex() not in keys[0]  # the name is an HMAC, not the computable cache key
    raw = client.get(keys[0])
    assert raw is not None and raw.startswith(ENVELOPE_VERSION)
    assert b"4111" not in raw and "4111" not in keys[0]
    assert raw[ENVELOPE_OVERHEAD:].startswith(codec.VERSION)  # the codec's bytes, sealed
    assert codec.decode(raw[ENVELOPE_OVERHEAD:]) == verdict()
    assert 0 < client.pttl(keys[0]) <= 60_000  # SET ... PX ttl
    assert client.exists(keys[0] + ":lease") == 0  # the leader released its lease


async def test_entries_expire_after_the_ttl(redis_server: RedisServer) -> None:
    backend = Backend()
    writer = await ready_tier(redis_server.url, ttl_s=1.0)
    await writer.get_or_compute(KEY, backend)
    client = redis_server.client()
    assert 0 < client.pttl(writer.store.value_key(KEY)) <= 1000  # SET ... PX ttl
    assert await (await ready_tier(redis_server.url)).aget(KEY) == verdict()
    # Redis drops the entry once the TTL has passed: waited for, however late this process runs.
    assert await gone_within(client, writer.store.value_key(KEY))
    late = await ready_tier(redis_server.url)
    assert await late.aget(KEY) is None
    await late.get_or_compute(KEY, backend)
    assert backend.calls == 2


async def test_models_templates_and_scopes_never_share_entries(redis_server: RedisServer) -> None:
    prompt = "How do I bake bread?"
    spaces = [
        Namespace.of("content_safety", "model-a", "template-1"),
        Namespace.of("content_safety", "model-b", "template-1"),  # another model
        Namespace.of("content_safety", "model-a", "template-2"),  # another template
        Namespace.of("topic_control", "model-a", "template-1"),  # another model type
    ]
    tier = await ready_tier(redis_server.url)
    backends = [Backend(verdict(f"label-{i}")) for i in range(len(spaces))]
    for ns, backend in zip(spaces, backends, strict=True):
        await tier.get_or_compute(ns.key(prompt), backend)
    fresh = await ready_tier(redis_server.url)
    for i, ns in enumerate(spaces):
        assert (await fresh.aget(ns.key(prompt))).verdict.label == f"label-{i}"
    assert [b.calls for b in backends] == [1, 1, 1, 1]

    # The same digest under two scopes: two entries, and clearing one scope keeps the other.
    a, b = (
        await ready_tier(redis_server.url, "content_safety:aaaa0000"),
        await ready_tier(redis_server.url, "x:1"),
    )
    await a.get_or_compute(KEY, Backend(verdict("in-a")))
    assert await b.aget(KEY) is None
    await b.aput(KEY, verdict("in-b"))
    assert (
        await (await ready_tier(redis_server.url, "content_safety:aaaa0000")).aget(KEY)
    ).verdict.label == "in-a"


@pytest.mark.parametrize(
    "garbage", [b"\x09" + b'{"a":1}', codec.VERSION + b"{not json", codec.VERSION, codec.VERSION + b'{"a":1}']
)
async def test_a_corrupt_but_authentic_value_is_a_miss_and_is_overwritten(
    redis_server: RedisServer, garbage: bytes
) -> None:
    """Sealed with the right secret but unreadable by the codec (e.g. another codec version)."""
    tier = await ready_tier(redis_server.url)
    await (await ready_tier(redis_server.url)).store.set(KEY, garbage)  # the store seals what it is given
    backend = Backend()
    assert await tier.get_or_compute(KEY, backend) == verdict()
    assert backend.calls == 1
    stats = tier.tier_stats()
    assert (stats.l2_corrupt, stats.l2_misses, stats.l2_hits, stats.l2_auth_failures) == (1, 1, 0, 0)
    raw = redis_server.client().get(tier.store.value_key(KEY))
    assert codec.decode(raw[ENVELOPE_OVERHEAD:]) == verdict()  # overwritten
    assert await (await ready_tier(redis_server.url)).aget(KEY) == verdict()


async def test_concurrent_askers_in_one_process_share_one_load(redis_server: RedisServer) -> None:
    tier = await ready_tier(redis_server.url)
    backend = Backend(delay=0.05)
    results = await asyncio.gather(*(tier.get_or_compute(KEY, backend) for _ in range(50)))
    assert results == [verdict()] * 50
    stats = tier.tier_stats()
    assert backend.calls == 1
    assert (stats.coalesced, stats.l2_misses, stats.lease_waits) == (49, 1, 0)


async def test_two_tiers_share_one_backend_call_through_the_lease(redis_server: RedisServer) -> None:
    # b would give up on a's lease only after a minute: it ends by picking a's value up.
    a, b = (
        await ready_tier(redis_server.url, lease_ms=60_000),
        await ready_tier(redis_server.url, lease_ms=60_000),
    )
    gate = asyncio.Event()
    backend = Backend(gate=gate)
    client = redis_server.client()
    # Each step is waited for, not assumed after a fixed sleep: a holds the lease (its computation
    # is parked on the gate), then b is waiting on that lease, then a's computation finishes.
    leader = asyncio.create_task(a.get_or_compute(KEY, backend))
    assert await true_within(lambda: client.exists(a.store.lease_key(KEY)))
    waiter = asyncio.create_task(b.get_or_compute(KEY, backend))
    assert await true_within(lambda: b.tier_stats().lease_waits == 1)
    await asyncio.sleep(0.2)  # a's computation goes on: b keeps waiting, it does not compute itself
    assert backend.calls == 1 and not waiter.done()
    gate.set()
    assert await asyncio.gather(leader, waiter) == [verdict()] * 2
    assert backend.calls == 1
    # b picked a's value up by polling while a still held the lease: an L2 hit, neither a takeover
    # (after the lease's expiry) nor a computation of its own after giving up on it.
    sb = b.tier_stats()
    assert (sb.lease_waits, sb.l2_hits, sb.computations) == (1, 1, 0)
    assert (sb.lease_takeovers, sb.lease_timeouts) == (0, 0)


async def test_a_waiter_takes_over_a_lease_whose_holder_died(redis_server: RedisServer) -> None:
    # A waiter gives up on a lease after lease_ms + margin (here over a minute): only a takeover,
    # once the dead leader's lease has expired, ends this test.
    tier = await ready_tier(redis_server.url, lease_ms=60_000)
    client = redis_server.client()
    lease_key = tier.store.lease_key(KEY)
    leases_seen: list[bytes | None] = []

    async def compute() -> Any:
        leases_seen.append(client.get(lease_key))  # whose lease the computation runs under
        return verdict()

    # A "leader" that crashed after taking the lease: the lease exists, the value never comes.
    client.set(lease_key, "dead-leader", px=600_000)
    task = asyncio.create_task(tier.get_or_compute(KEY, compute))
    assert await true_within(lambda: tier.tier_stats().lease_waits == 1)  # waiting on it ...
    client.pexpire(lease_key, 1)  # ... when the dead leader's lease runs out
    assert await asyncio.wait_for(task, EVENTUALLY) == verdict()
    # It waited for the dead leader's lease to expire, then computed under a lease of its own.
    assert len(leases_seen) == 1 and leases_seen[0] not in (None, b"dead-leader")
    stats = tier.tier_stats()
    assert (stats.lease_waits, stats.lease_takeovers, stats.lease_timeouts) == (1, 1, 0)
    assert await (await ready_tier(redis_server.url)).aget(KEY) == verdict()


async def test_a_waiter_never_waits_longer_than_lease_plus_margin(redis_server: RedisServer) -> None:
    tier = await ready_tier(redis_server.url, lease_ms=200, wait_margin_ms=100)
    client = redis_server.client()
    lease_key = tier.store.lease_key(KEY)
    client.set(lease_key, "stuck", px=600_000)  # a lease that outlives the test by far
    backend = Backend()
    # Waiting for the stuck lease would take 10 minutes; giving up after lease + margin (0.3 s) ends
    # long before the deadline, however loaded the machine.
    assert await asyncio.wait_for(tier.get_or_compute(KEY, backend), EVENTUALLY) == verdict()
    stats = tier.tier_stats()
    assert (stats.lease_waits, stats.lease_timeouts, stats.lease_takeovers) == (1, 1, 0)
    assert backend.calls == 1  # computed without the lease ...
    assert client.get(lease_key) == b"stuck"  # ... which it neither took over nor released


async def test_a_failed_leader_releases_its_lease_and_caches_nothing(redis_server: RedisServer) -> None:
    a, b = await ready_tier(redis_server.url), await ready_tier(redis_server.url)
    with pytest.raises(RuntimeError, match="backend down"):
        await a.get_or_compute(KEY, Backend(fail=True))
    client = redis_server.client()
    assert client.exists(a.store.lease_key(KEY), a.store.value_key(KEY)) == 0
    assert not a.contains(KEY)
    backend = Backend()
    assert await b.get_or_compute(KEY, backend) == verdict()
    # No waiting on a leftover lease: b took the lease at once and computed.
    sb = b.tier_stats()
    assert (sb.lease_waits, sb.l2_misses, sb.computations) == (0, 1, 1)
    assert backend.calls == 1


async def test_a_lease_granted_while_its_reply_is_in_flight_is_released_on_cancel(
    redis_server: RedisServer,
) -> None:
    """Redis ran the lease script (the lease is ours) but the asker is cancelled before it reads the
    reply, e.g. a parallel rail cancelled by another rail's block: the lease must still be freed."""
    tier = await ready_tier(redis_server.url, lease_ms=30_000)
    granted = asyncio.Event()
    real = tier.store.get_or_lease

    async def reply_stuck_in_flight(*args: Any, **kwargs: Any) -> Any:
        await real(*args, **kwargs)  # the real script: Redis grants the lease
        granted.set()
        await asyncio.Event().wait()  # ... but the reply never reaches the caller

    tier.store.get_or_lease = reply_stuck_in_flight  # type: ignore[method-assign]
    task = asyncio.create_task(tier.get_or_compute(KEY, Backend()))
    await asyncio.wait_for(granted.wait(), EVENTUALLY)
    lease_key = tier.store.lease_key(KEY)
    client = redis_server.client()
    assert client.exists(lease_key) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await gone_within(client, lease_key)


async def test_a_cancelled_leader_releases_its_lease(redis_server: RedisServer) -> None:
    # A lease that outlives the test by far: only a release (not expiry) can remove it in time.
    tier = await ready_tier(redis_server.url, lease_ms=30_000)
    task = asyncio.create_task(tier.get_or_compute(KEY, Backend(delay=5)))
    lease_key = tier.store.lease_key(KEY)
    client = redis_server.client()
    assert await true_within(lambda: client.exists(lease_key))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The asker returns at once; the shared computation is cancelled right after and releases the
    # lease in one more Redis round trip.
    assert await gone_within(client, lease_key)


async def test_aget_aput_adelete_use_both_tiers(redis_server: RedisServer) -> None:
    a, b = await ready_tier(redis_server.url), await ready_tier(redis_server.url)
    await a.aput(KEY, verdict("x"))
    assert a.get(KEY) == verdict("x")  # sync get: L1 only
    assert b.get(KEY) is None
    assert await b.aget(KEY) == verdict("x")
    assert b.get(KEY) == verdict("x")
    assert await a.adelete(KEY) is True
    assert await (await ready_tier(redis_server.url)).aget(KEY, "gone") == "gone"
    b.put(b"\x01" * 32, verdict("local"))  # sync put: L1 only
    assert await (await ready_tier(redis_server.url)).aget(b"\x01" * 32) is None


async def test_counters_are_shared_across_replicas(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = await ready_tier(redis_server.url), await ready_tier(redis_server.url)
    keys = [bytes([i]) * 32 for i in range(10)]
    for key in keys:
        await a.get_or_compute(key, Backend())
    for key in keys * 3:
        await b.get_or_compute(key, Backend())  # 10 L2 hits, then 20 L1 hits
    await a.flush_stats()
    g = await b.flush_stats()
    assert g is not None
    assert (g.lookups, g.computations, g.l2_hits) == (40, 10, 10)
    assert g.hit_rate == pytest.approx(0.75)
    g2 = await a.flush_stats()  # nothing new to add: the same totals
    assert g2 is not None and (g2.lookups, g2.computations) == (40, 10)

    with caplog.at_level("INFO"):
        b.log_stats_now()
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("LFU Cache Statistics - Size: 10/1000") for line in lines)
    tier_line = next(r for r in caplog.records if r.name == "guardcache.cache.redis")
    assert tier_line.getMessage() == (
        "Redis Tier Statistics - L1 Hits: 20 | L2 Hits: 10 | L2 Misses: 0 | L2 Errors: 0 | "
        "Backend Calls: 0 | Lease Waits: 0 | Coalesced: 0 | Global Hit Rate: 75.00%"
    )


async def test_stats_deltas_are_flushed_in_batches_not_per_request(redis_server: RedisServer) -> None:
    tier = await ready_tier(redis_server.url, stats_flush_events=25, stats_flush_interval_s=3600)
    client = redis_server.client()
    for i in range(24):
        await tier.get_or_compute(bytes([i]) * 32, Backend())
    await asyncio.sleep(0.02)  # a flush started by mistake would have its chance to land
    assert client.hgetall(tier.store.keys.stats_key) == {}  # nothing yet: below the batch size
    await tier.get_or_compute(bytes([99]) * 32, Backend())
    # the flush runs in the background
    assert await true_within(lambda: client.hget(tier.store.keys.stats_key, "lookups"))
    assert int(client.hget(tier.store.keys.stats_key, "lookups") or 0) == 25
