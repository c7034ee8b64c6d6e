"""The shared Redis tier: its public names and the builder the rails use.

Needs the ``redis`` extra (``pip install 'guardcache[redis]'``); ``import guardcache.cache`` does not.
The pieces, one job each:

- :mod:`~guardcache.cache.redis_keys`   key layout (``{prefix}:{scope}:{<hex digest>}``), scopes
- :mod:`~guardcache.cache.redis_auth`   key names and value tags (HMAC-SHA256 under the secret)
- :mod:`~guardcache.cache.redis_health` circuit breaker and throttled warnings (pure, clock-driven)
- :mod:`~guardcache.cache.redis_store`  the Redis operations, each within ``timeout_ms``, never raising
- :mod:`~guardcache.cache.redis_stats`  ``TierStats`` and the counters shared through Redis
- :mod:`~guardcache.cache.tiered`       ``TieredCache``: L1 -> Redis -> backend, leases, stats flushing

Like the rest of ``guardcache.cache`` this knows nothing of config files or LLMs: it takes plain
settings (including the secret) and a codec (``guardcache.rails.caches`` does the wiring from
``ModelConfig`` and the environment).
"""

from __future__ import annotations

from guardcache.cache.policy_cache import PolicyCache
from guardcache.cache.redis_keys import KeySpace, model_scope
from guardcache.cache.redis_stats import GlobalTierStats, TierStats
from guardcache.cache.redis_store import Lease, RedisSettings, RedisStore
from guardcache.cache.stats import StatsReporter
from guardcache.cache.tiered import Codec, TieredCache


def build_tiered_cache(
    l1: PolicyCache,
    *,
    codec: Codec,
    settings: RedisSettings,
    scope: str,
    stats_logging_interval: float | None = None,
    reporter: StatsReporter | None = None,
) -> TieredCache:
    """``l1`` in front of Redis under ``{settings.key_prefix}:{scope}:``.

    ``scope`` names the model for operators (see :func:`model_scope`); give ``l1`` no logging
    interval of its own: with ``stats_logging_interval`` the tiered cache logs the LFU line and the
    tier line together. No connection is made here: each event loop connects on first use.
    """
    store = RedisStore(settings, KeySpace(settings.key_prefix, scope))
    return TieredCache(l1, store, codec, stats_logging_interval=stats_logging_interval, reporter=reporter)


__all__ = [
    "Codec",
    "GlobalTierStats",
    "KeySpace",
    "Lease",
    "RedisSettings",
    "RedisStore",
    "TierStats",
    "TieredCache",
    "build_tiered_cache",
    "model_scope",
]
