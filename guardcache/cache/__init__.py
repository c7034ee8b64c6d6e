"""In-process and shared result caches. Nothing here imports the rest of guardcache."""

from guardcache.cache.interface import MISSING, CacheInterface, ComputeFn
from guardcache.cache.keys import Namespace, make_key, normalize_messages, normalize_text
from guardcache.cache.lfu import CacheEntry, LFUCache
from guardcache.cache.singleflight import SingleFlight
from guardcache.cache.stats import CacheStats, StatsReporter, default_reporter

__all__ = [
    "MISSING",
    "CacheEntry",
    "CacheInterface",
    "CacheStats",
    "ComputeFn",
    "LFUCache",
    "Namespace",
    "SingleFlight",
    "StatsReporter",
    "default_reporter",
    "make_key",
    "normalize_messages",
    "normalize_text",
]
