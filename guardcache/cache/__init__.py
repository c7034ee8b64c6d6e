"""In-process and shared result caches. Nothing here imports the rest of guardcache.

The in-process caches are one :class:`PolicyCache` around an eviction policy each: ``LFUCache``
(the default) and ``TinyLFUCache`` (W-TinyLFU, adaptive); :func:`make_cache` builds one by policy
name (:data:`POLICY_NAMES`).

The Redis tier (``TieredCache``, ``RedisSettings``, ``TierStats``, ``build_tiered_cache``) is
re-exported lazily: importing this package never needs the ``redis`` extra.
"""

from typing import TYPE_CHECKING, Any

from guardcache.cache.interface import MISSING, CacheInterface, ComputeFn
from guardcache.cache.keys import Namespace, make_key, normalize_messages, normalize_text
from guardcache.cache.lfu import CacheEntry, LFUCache
from guardcache.cache.policy import EvictionPolicy, HotPaths
from guardcache.cache.policy_cache import PolicyCache
from guardcache.cache.recorder import (
    DISABLED_RECORDER,
    ConcurrentStatsRecorder,
    StatsRecorder,
    StatsSnapshot,
)
from guardcache.cache.registry import POLICY_NAMES, cache_class, make_cache
from guardcache.cache.singleflight import SingleFlight
from guardcache.cache.stats import CacheStats, StatsReporter, default_reporter
from guardcache.cache.tinylfu import TinyLFUCache

if TYPE_CHECKING:
    from guardcache.cache.redis import (
        GlobalTierStats,
        RedisSettings,
        TieredCache,
        TierStats,
        build_tiered_cache,
    )

_LAZY = {"GlobalTierStats", "RedisSettings", "TierStats", "TieredCache", "build_tiered_cache"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from guardcache.cache import redis as _redis_tier

        return getattr(_redis_tier, name)
    raise AttributeError(f"module 'guardcache.cache' has no attribute {name!r}")


__all__ = [
    "DISABLED_RECORDER",
    "MISSING",
    "POLICY_NAMES",
    "CacheEntry",
    "CacheInterface",
    "CacheStats",
    "ComputeFn",
    "ConcurrentStatsRecorder",
    "EvictionPolicy",
    "GlobalTierStats",
    "HotPaths",
    "LFUCache",
    "Namespace",
    "PolicyCache",
    "RedisSettings",
    "SingleFlight",
    "StatsRecorder",
    "StatsReporter",
    "StatsSnapshot",
    "TierStats",
    "TieredCache",
    "TinyLFUCache",
    "build_tiered_cache",
    "cache_class",
    "default_reporter",
    "make_cache",
    "make_key",
    "normalize_messages",
    "normalize_text",
]
