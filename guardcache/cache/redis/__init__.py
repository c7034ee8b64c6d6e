"""The shared Redis tier: its public names and the builder the rails use.

Needs the ``redis`` extra (``pip install 'guardcache[redis]'``); ``import guardcache.cache`` does not.
The pieces, one job each:

- :mod:`~guardcache.cache.redis.keys`    key layout (``{prefix}:{scope}:{<hex digest>}``), scopes
- :mod:`~guardcache.cache.redis.auth`    key names and value tags (HMAC-SHA256 under the secret)
- :mod:`~guardcache.cache.redis.health`  circuit breaker and throttled warnings (pure, clock-driven)
- :mod:`~guardcache.cache.redis.clients` where Redis is (``RedisEndpoint``: standalone, cluster,
  Sentinel) and the redis-py clients of each mode
- :mod:`~guardcache.cache.redis.store`   the Redis operations, each within ``timeout_ms``, never raising
- :mod:`~guardcache.cache.redis.stats`   ``TierStats`` and the counters shared through Redis
- :mod:`~guardcache.cache.redis.tiered`  ``TieredCache``: L1 -> Redis -> backend, leases, stats flushing
- :mod:`~guardcache.cache.redis.clearing` a clear that reaches every replica (clear tokens, ``ClearWatch``)

Like the rest of ``guardcache.cache`` this knows nothing of config files or LLMs: it takes plain
settings (including the secret) and a codec (``guardcache.config.redis_env`` resolves the settings
from ``ModelConfig`` and the environment, ``guardcache.rails.caches`` does the wiring). Its command,
``guardcache cache stats|clear``, reads configs, so it lives above them: ``guardcache.commands.cache``.
"""

from __future__ import annotations

from guardcache.cache.policy_cache import PolicyCache
from guardcache.cache.redis.clients import RedisEndpoint
from guardcache.cache.redis.keys import KeySpace, model_scope
from guardcache.cache.redis.stats import GlobalTierStats, TierStats
from guardcache.cache.redis.store import Lease, RedisSettings, RedisStore
from guardcache.cache.redis.tiered import Codec, TieredCache
from guardcache.cache.stats import StatsReporter


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
    "RedisEndpoint",
    "RedisSettings",
    "RedisStore",
    "TierStats",
    "TieredCache",
    "build_tiered_cache",
    "model_scope",
]
