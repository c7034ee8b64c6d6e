"""guardcache: cached guardrails for LLM applications."""

from guardcache.cache import CacheInterface, CacheStats, LFUCache
from guardcache.errors import BackendError, ConfigError, GuardcacheError

__all__ = [
    "BackendError",
    "CacheInterface",
    "CacheStats",
    "ConfigError",
    "GuardcacheError",
    "LFUCache",
]
