"""Authenticated Redis tier on a real redis-server: whoever can write Redis cannot plant a verdict.

Every attack here writes raw bytes with a plain client, as someone holding Redis credentials (but not
the tier's secret) could: values under names computed from the public config, values at the right
name with an absent, forged or moved tag, tampered and kept-past-expiry values, values at lease keys.
None is ever served; each is a miss that is overwritten by the next computed verdict. Then what the
secret must still allow: replicas with one secret share, replicas with different ones do not, and a
key rotation serves and re-writes the previous secret's entries.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

from guardcache.cache.redis.auth import ENVELOPE_OVERHEAD, ENVELOPE_VERSION, TAG_BYTES
from guardcache.cache.redis.keys import key_hex
from guardcache.checks import codec
from guardcache.config import RailsConfig
from guardcache.errors import ConfigError
from guardcache.rails import LLMRails
from tests.integration.redis_support import TEST_SECRET, RedisServer, make_tier, ready_tier, verdict

pytestmark = pytest.mark.integration

TIER_LOG = "guardcache.cache.redis"
KEY = bytes(range(32))  # the cache key of the "harmful" text: its true verdict is unsafe
BENIGN = b"\x07" * 32  # the cache key of a benign text: its true verdict is safe
OTHER_SECRET = b"a-different-secret-0123456789abcdef"
NEW_SECRET = b"the-new-secret-after-rotation-0123456789"

SAFE = verdict("safe", allowed=True)
UNSAFE = verdict("unsafe", allowed=False)
PLANTED = codec.encode(SAFE)  # the attacker's goal: "safe" served for the harmful text


class Backend:
    """The guard model: counts its calls and gives the true verdict."""

    def __init__(self, value: Any = UNSAFE) -> None:
        self.value = value
        self.calls = 0

    async def __call__(self) -> Any:
        self.calls += 1
        return self.value


async def true_within(predicate: Callable[[], object], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.005)
    return bool(predicate())


def opened(raw: bytes | None) -> Any:
    """The verdict inside an envelope (no authentication: a test's look at what Redis holds)."""
    assert raw is not None and raw.startswith(ENVELOPE_VERSION)
    return codec.decode(raw[ENVELOPE_OVERHEAD:])


async def assert_served_true_verdict_and_overwrote(redis_server: RedisServer, tier: Any) -> None:
    backend = Backend()
    assert await tier.get_or_compute(KEY, backend) == UNSAFE
    assert backend.calls == 1  # the planted value was a miss: the model was asked
    assert opened(redis_server.client().get(tier.store.value_key(KEY))) == UNSAFE  # overwritten
    fresh = await ready_tier(redis_server.url)  # another replica now gets the true verdict from Redis
    assert await fresh.get_or_compute(KEY, Backend(SAFE)) == UNSAFE
    assert fresh.tier_stats().l2_hits == 1 and fresh.tier_stats().l2_auth_failures == 0


async def test_a_value_planted_under_a_name_computed_from_the_config_is_never_read(
    redis_server: RedisServer,
) -> None:
    tier = await ready_tier(redis_server.url)
    client = redis_server.client()
    computable = tier.store.keys.value_key(key_hex(KEY))  # the pre-authentication layout
    assert computable != tier.store.value_key(KEY)
    client.set(computable, PLANTED)
    client.set(tier.store.keys.value_key(key_hex(KEY)) + ":lease", b"x", px=1)  # noise
    backend = Backend()
    assert await tier.get_or_compute(KEY, backend) == UNSAFE
    assert backend.calls == 1
    stats = tier.tier_stats()
    assert (stats.l2_hits, stats.l2_misses, stats.l2_auth_failures) == (0, 1, 0)  # never even read
    assert client.get(computable) == PLANTED  # left alone; nothing ever reads it


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(lambda name, now: PLANTED, id="bare-codec-bytes"),
        pytest.param(
            lambda name, now: ENVELOPE_VERSION + (now + 60_000).to_bytes(8, "big") + PLANTED, id="no-tag"
        ),
        pytest.param(
            lambda name, now: (
                ENVELOPE_VERSION + (now + 60_000).to_bytes(8, "big") + b"\x00" * TAG_BYTES + PLANTED
            ),
            id="absent-tag",
        ),
        pytest.param(
            lambda name, now: (
                ENVELOPE_VERSION
                + (now + 60_000).to_bytes(8, "big")
                + bytes.fromhex("5f" * TAG_BYTES)
                + PLANTED
            ),
            id="forged-tag",
        ),
        pytest.param(
            lambda name, now: make_tier("redis://unused:1/0", secret=OTHER_SECRET).store._auth.seal(
                name, PLANTED, now + 60_000
            ),
            id="sealed-with-another-secret",
        ),
    ],
)
async def test_a_value_planted_at_the_right_name_without_a_valid_tag_is_a_miss_and_overwritten(
    redis_server: RedisServer, forge: Callable[[str, int], bytes], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=TIER_LOG)
    tier = await ready_tier(redis_server.url)
    name = tier.store.value_key(KEY)  # even knowing the name (e.g. seen with SCAN)
    redis_server.client().set(name, forge(name, time.time_ns() // 1_000_000))
    await assert_served_true_verdict_and_overwrote(redis_server, tier)
    stats = tier.tier_stats()
    assert (stats.l2_auth_failures, stats.l2_misses, stats.l2_hits, stats.l2_corrupt) == (1, 1, 0, 0)
    assert stats.format_line().endswith("| L2 Auth Failures: 1")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "failed authentication" in warnings[0]
    assert name not in warnings[0] and '"safe"' not in warnings[0]  # no key, no value, no user text


async def test_a_genuine_value_moved_to_another_key_is_rejected(redis_server: RedisServer) -> None:
    """A "safe" verdict the tier itself wrote for a benign text, copied onto the harmful text's entry."""
    writer = await ready_tier(redis_server.url)
    await writer.get_or_compute(BENIGN, Backend(SAFE))
    client = redis_server.client()
    genuine = client.get(writer.store.value_key(BENIGN))
    assert opened(genuine) == SAFE
    client.set(writer.store.value_key(KEY), genuine)
    tier = await ready_tier(redis_server.url)
    await assert_served_true_verdict_and_overwrote(redis_server, tier)
    assert tier.tier_stats().l2_auth_failures == 1


async def test_a_tampered_value_is_a_miss_and_is_overwritten_with_a_valid_one(
    redis_server: RedisServer,
) -> None:
    writer = await ready_tier(redis_server.url)
    await writer.get_or_compute(KEY, Backend(UNSAFE))
    client = redis_server.client()
    name = writer.store.value_key(KEY)
    genuine = client.get(name)
    assert genuine is not None
    # Rewrite the verdict inside the envelope, keeping its tag (the payload is plain JSON).
    tampered = genuine.replace(b'"a":0', b'"a":1').replace(b'"unsafe"', b'"safe"')
    assert tampered != genuine and opened(tampered).verdict.allowed
    client.set(name, tampered, keepttl=True)
    tier = await ready_tier(redis_server.url)
    await assert_served_true_verdict_and_overwrote(redis_server, tier)
    assert tier.tier_stats().l2_auth_failures == 1
    # aget (no lease, no backend) rejects it too
    client.set(name, tampered)
    reader = await ready_tier(redis_server.url)
    assert await reader.aget(KEY, "absent") == "absent"
    assert (reader.tier_stats().l2_auth_failures, reader.tier_stats().l2_misses) == (1, 1)


async def test_a_genuine_value_kept_past_its_expiry_is_rejected(redis_server: RedisServer) -> None:
    """PERSIST (or a re-insert after it expired) cannot keep a verdict alive past its TTL."""
    writer = await ready_tier(redis_server.url, ttl_s=1.0)
    await writer.get_or_compute(KEY, Backend(SAFE))
    client = redis_server.client()
    name = writer.store.value_key(KEY)
    captured = client.get(name)
    client.persist(name)
    assert captured is not None and client.ttl(name) == -1  # kept, with no expiry of its own
    # Past the expiry sealed in the envelope (wall clock, ms), whenever this process got here.
    expires_at_ms = int.from_bytes(captured[len(ENVELOPE_VERSION) : ENVELOPE_OVERHEAD - TAG_BYTES], "big")
    await asyncio.sleep(max(0.0, expires_at_ms / 1000 - time.time()) + 0.05)
    assert client.get(name) == captured  # still in Redis ...
    tier = await ready_tier(redis_server.url)
    await assert_served_true_verdict_and_overwrote(redis_server, tier)  # ... but not served
    assert tier.tier_stats().l2_auth_failures == 1


async def test_a_value_at_a_lease_key_is_never_served(redis_server: RedisServer) -> None:
    """A lease key holds a token: whatever is written there only delays (it reads as a held lease)."""
    writer = await ready_tier(redis_server.url)
    await writer.get_or_compute(BENIGN, Backend(SAFE))
    client = redis_server.client()
    genuine = client.get(writer.store.value_key(BENIGN))
    tier = await ready_tier(redis_server.url, lease_ms=200, wait_margin_ms=50)
    lease = tier.store.lease_key(KEY)
    for planted in (PLANTED, genuine):
        client.delete(tier.store.value_key(KEY))
        client.set(lease, planted, px=60_000)  # outlives the waiter's patience (lease + margin)
        backend = Backend()
        fresh = await ready_tier(redis_server.url, lease_ms=200, wait_margin_ms=50)
        assert await fresh.get_or_compute(KEY, backend) == UNSAFE
        assert backend.calls == 1
        assert fresh.tier_stats().lease_waits == 1 and fresh.tier_stats().l2_hits == 0
    assert opened(client.get(tier.store.value_key(KEY))) == UNSAFE


async def test_a_writer_swapping_forgeries_cannot_keep_a_load_looping(redis_server: RedisServer) -> None:
    """Each read finds a new forged value: the load gives up on Redis after a few and computes."""
    tier = await ready_tier(redis_server.url)
    client = redis_server.client()
    name = tier.store.value_key(KEY)
    real = tier.store.get_or_lease
    reads = 0

    async def racing_attacker(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        client.set(name, PLANTED + str(reads).encode())  # a new forgery before every read
        return await real(*args, **kwargs)

    tier.store.get_or_lease = racing_attacker  # type: ignore[method-assign]
    backend = Backend()
    assert await tier.get_or_compute(KEY, backend) == UNSAFE
    assert backend.calls == 1 and reads == 3
    assert tier.tier_stats().l2_auth_failures == 3
    assert opened(client.get(name)) == UNSAFE  # overwritten without the lease


async def test_replicas_with_the_same_secret_share_verdicts(redis_server: RedisServer) -> None:
    a, b = await ready_tier(redis_server.url), await ready_tier(redis_server.url)
    backend = Backend()
    assert await a.get_or_compute(KEY, backend) == UNSAFE
    assert await b.get_or_compute(KEY, backend) == UNSAFE
    assert backend.calls == 1 and b.tier_stats().l2_hits == 1


async def test_replicas_with_different_secrets_share_nothing(redis_server: RedisServer) -> None:
    a = await ready_tier(redis_server.url)
    b = await ready_tier(redis_server.url, secret=OTHER_SECRET)
    backend = Backend()
    await a.get_or_compute(KEY, backend)
    await b.get_or_compute(KEY, backend)
    assert backend.calls == 2  # b could not use a's entry ...
    assert b.tier_stats().l2_auth_failures == 0  # ... it never even found it: another name
    assert a.store.value_key(KEY) != b.store.value_key(KEY)
    client = redis_server.client()
    assert len(list(client.scan_iter(match=a.store.keys.value_pattern))) == 2
    # and what b wrote is no use to a (or to someone copying it across)
    client.set(a.store.value_key(KEY), client.get(b.store.value_key(KEY)))
    c = await ready_tier(redis_server.url)
    await c.get_or_compute(KEY, backend)
    assert backend.calls == 3 and c.tier_stats().l2_auth_failures == 1


async def test_a_rotation_serves_previous_entries_and_rewrites_them_with_their_expiry(
    redis_server: RedisServer,
) -> None:
    keys = [bytes([i]) * 32 for i in range(5)]
    old = await ready_tier(redis_server.url, ttl_s=60)  # the fleet before the rotation
    for key in keys:
        await old.get_or_compute(key, Backend())
    client = redis_server.client()
    old_ttls = [client.pttl(old.store.value_key(key)) for key in keys]

    rotating = await ready_tier(redis_server.url, ttl_s=60, secret=NEW_SECRET, previous_secret=TEST_SECRET)
    assert rotating.store.previous_value_key(keys[0]) == old.store.value_key(keys[0])
    backend = Backend(SAFE)
    for key in keys:
        assert await rotating.get_or_compute(key, backend) == UNSAFE  # the old entry, not a model call
    assert backend.calls == 0
    stats = rotating.tier_stats()
    assert (stats.l2_hits, stats.l2_previous_hits, stats.l2_misses, stats.lease_waits) == (5, 5, 0, 0)
    for key, old_ttl in zip(keys, old_ttls, strict=True):
        raw = client.get(rotating.store.value_key(key))  # re-written under the new name ...
        assert opened(raw) == UNSAFE
        assert 0 < client.pttl(rotating.store.value_key(key)) <= old_ttl  # ... without a longer life
        assert client.exists(rotating.store.lease_key(key)) == 0  # and its lease released

    # After the rotation (previous secret dropped) the re-written entries are plain hits.
    after = await ready_tier(redis_server.url, secret=NEW_SECRET)
    for key in keys:
        assert await after.get_or_compute(key, backend) == UNSAFE
    assert backend.calls == 0 and after.tier_stats().l2_hits == 5
    # aget rotates too
    await old.aput(b"\xee" * 32, UNSAFE)
    reader = await ready_tier(redis_server.url, secret=NEW_SECRET, previous_secret=TEST_SECRET)
    assert await reader.aget(b"\xee" * 32) == UNSAFE
    assert reader.tier_stats().l2_previous_hits == 1
    assert opened(client.get(reader.store.value_key(b"\xee" * 32))) == UNSAFE


async def test_a_rotation_prefers_the_new_entry_and_rejects_forgeries_under_the_old_name(
    redis_server: RedisServer,
) -> None:
    old = await ready_tier(redis_server.url)
    rotating = await ready_tier(redis_server.url, secret=NEW_SECRET, previous_secret=TEST_SECRET)
    client = redis_server.client()
    # Forged under the old name: a miss, computed, written under the new name.
    client.set(old.store.value_key(KEY), PLANTED)
    backend = Backend()
    assert await rotating.get_or_compute(KEY, backend) == UNSAFE
    assert backend.calls == 1 and rotating.tier_stats().l2_auth_failures == 1
    assert opened(client.get(rotating.store.value_key(KEY))) == UNSAFE
    # Both names hold a value: the new one wins, the old one is not even opened.
    await old.aput(BENIGN, verdict("old-label"))
    await (await ready_tier(redis_server.url, secret=NEW_SECRET)).aput(BENIGN, verdict("new-label"))
    reader = await ready_tier(redis_server.url, secret=NEW_SECRET, previous_secret=TEST_SECRET)
    assert (await reader.get_or_compute(BENIGN, Backend())).verdict.label == "new-label"
    assert reader.tier_stats().l2_previous_hits == 0
    # adelete removes both names, so a rotating read cannot bring the old one back
    assert await reader.adelete(BENIGN) is True
    assert client.exists(old.store.value_key(BENIGN), reader.store.value_key(BENIGN)) == 0


async def test_auth_failures_reach_the_shared_counters(redis_server: RedisServer) -> None:
    tier = await ready_tier(redis_server.url)
    redis_server.client().set(tier.store.value_key(KEY), PLANTED)
    await tier.get_or_compute(KEY, Backend())
    shared = await tier.flush_stats()
    assert shared is not None and shared.l2_auth_failures == 1
    assert await true_within(
        lambda: redis_server.client().hget(tier.store.keys.stats_key, "l2_auth_failures") == b"1", 30.0
    )


def test_rails_do_not_start_without_the_secret(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    monkeypatch.delenv("GUARDCACHE_REDIS_SECRET", raising=False)
    config = RailsConfig.from_content(
        f"""
models:
  - type: content_safety
    engine: nim
    model: m
    parameters: {{base_url: "http://127.0.0.1:9/v1"}}
    cache: {{enabled: true, store: redis, redis: {{url: "{redis_url}"}}}}
"""
    )
    with pytest.raises(ConfigError, match="secret_env_var: environment variable GUARDCACHE_REDIS_SECRET"):
        LLMRails(config)
    monkeypatch.setenv("GUARDCACHE_REDIS_SECRET", "too-short")
    with pytest.raises(ConfigError, match="is 9 bytes; it needs at least 16"):
        LLMRails(config)
