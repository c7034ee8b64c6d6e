"""The Redis tier's test helpers: tiers built with the library codec and a test secret, and values.

The ``redis-server`` itself (``RedisServer``, ``free_port``, the ``redis_server`` / ``redis_url``
fixtures) is ``guardcache.testing``'s; the names are re-exported here for the tests that import them
from this module.
"""

from __future__ import annotations

from typing import Any

from guardcache.cache import LFUCache
from guardcache.cache.redis import RedisEndpoint, RedisSettings, TieredCache, build_tiered_cache
from guardcache.checks import codec
from guardcache.checks.verdict import CachedCheck, Verdict
from guardcache.llm.types import Usage
from guardcache.testing.redis_server import INSTALL_HINT, RedisServer, free_port

#: The secret every test tier shares unless a test says otherwise (>= 16 bytes, like production).
TEST_SECRET = b"guardcache-test-secret-0123456789abcdef"


def verdict(label: str = "safe", allowed: bool = True) -> CachedCheck:
    """A cached check value as the content-safety rail stores it."""
    return CachedCheck(
        Verdict(allowed, () if allowed else ("S1",), label), Usage(400, 6, 406, 256, "m", "nim")
    )


def make_tier(
    where: str | RedisEndpoint,
    scope: str = "content_safety:00000000",
    *,
    l1_size: int = 1000,
    **settings: object,
) -> TieredCache:
    """A tiered cache (fresh L1) on ``where`` (a standalone server's URL, or an endpoint of any mode)
    with the library codec and :data:`TEST_SECRET`; ``settings`` override :class:`RedisSettings`
    fields (e.g. ``timeout_ms=50``, ``lease_ms=300``, ``secret=b"..."``)."""
    place = {"url": where} if isinstance(where, str) else {"endpoint": where}
    opts: dict[str, object] = {
        "key_prefix": "gctest",
        # The product's timeout_ms (50 ms): connecting (a cluster's topology, Sentinel's primary, a
        # TLS handshake) is not an operation's budget. Tests of latency pass their own.
        "secret": TEST_SECRET,
        **place,
        **settings,
    }
    return build_tiered_cache(
        LFUCache(l1_size, track_stats=True),
        codec=codec,
        settings=RedisSettings(**opts),  # type: ignore[arg-type]
        scope=scope,
    )


async def ready_tier(
    where: str | RedisEndpoint,
    scope: str = "content_safety:00000000",
    *,
    l1_size: int = 1000,
    **settings: object,
) -> TieredCache:
    """:func:`make_tier`, brought up as a replica brings its tier up at start-up (``connect()``:
    connections set up, a cluster's slots read), so that its first lookups reach Redis: setting up
    is not an operation's budget, and a lookup that arrives before the tier is up misses (the tests
    of that use :func:`make_tier`)."""
    tier = make_tier(where, scope, l1_size=l1_size, **settings)
    assert await tier.connect(), f"the tier on {tier.store.settings.where.describe()} did not come up"
    return tier


def lookups_of(tier: TieredCache) -> list[Any]:
    """What each of ``tier``'s L2 lookups answered from now on: a value or lease outcome, or
    ``FAILED`` (Redis was asked and did not answer in time) or ``SKIPPED`` (the open circuit: Redis
    was not asked, at no cost) or ``CONNECTING`` (the tier was not up yet). This, not a latency, is
    what "a request did not wait on Redis" means."""
    outcomes: list[Any] = []
    real = tier.store.get_or_lease

    async def recorded(*args: Any, **kwargs: Any) -> Any:
        outcome = await real(*args, **kwargs)
        outcomes.append(outcome)
        return outcome

    tier.store.get_or_lease = recorded  # type: ignore[method-assign]
    return outcomes


__all__ = [
    "INSTALL_HINT",
    "TEST_SECRET",
    "RedisServer",
    "free_port",
    "lookups_of",
    "make_tier",
    "ready_tier",
    "verdict",
]
