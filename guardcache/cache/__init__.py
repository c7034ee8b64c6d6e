"""In-process and shared result caches. Nothing here imports the rest of guardcache.

The Redis tier (``TieredCache``, ``RedisSettings``, ``TierStats``, ``build_tiered_cache``) is
re-exported lazily: importing this package never needs the ``redis`` extra.
"""

from typing import TYPE_CHECKING, Any

from guardcache.cache.interface import MISSING, CacheInterface, ComputeFn
from guardcache.cache.keys import Namespace, make_key, normalize_messages, normalize_text
from guardcache.cache.lfu import CacheEntry, LFUCache
from guardcache.cache.recorder import (
    DISABLED_RECORDER,
    ConcurrentStatsRecorder,
    StatsRecorder,
    StatsSnapshot,
)
from guardcache.cache.singleflight import SingleFlight
from guardcache.cache.stats import CacheStats, StatsReporter, default_reporter

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
    "CacheEntry",
    "CacheInterface",
    "CacheStats",
    "ComputeFn",
    "ConcurrentStatsRecorder",
    "GlobalTierStats",
    "LFUCache",
    "Namespace",
    "RedisSettings",
    "SingleFlight",
    "StatsRecorder",
    "StatsReporter",
    "StatsSnapshot",
    "TierStats",
    "TieredCache",
    "build_tiered_cache",
    "default_reporter",
    "make_key",
    "normalize_messages",
    "normalize_text",
]
