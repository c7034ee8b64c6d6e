"""LFUCache: least-frequently-used eviction, least-recently-used among equal frequencies, O(1).

The policy (the order and the hot paths) is :class:`~guardcache.cache.lfu_core.LFUPolicy`; the rest
of the cache (lock, single flight, stats, the stats line, introspection) is
:class:`~guardcache.cache.policy_cache.PolicyCache`, shared with every other policy.
"""

from __future__ import annotations

from typing import ClassVar

from guardcache.cache.lfu_core import LFUPolicy
from guardcache.cache.policy import PolicyFactory
from guardcache.cache.policy_cache import CacheEntry, PolicyCache


class LFUCache(PolicyCache):
    """A bounded cache evicting the least frequently used entry, the least recent among ties.

    Plain LFU never forgets: an entry's count is every access since it was stored, which is right
    for a stable popularity law and slow to follow traffic that moves on
    (:class:`~guardcache.cache.tinylfu.TinyLFUCache` adapts). ``entry(key).frequency`` is that
    count. Everything else (constructor, stats, single flight, the stats line ``LFU Cache
    Statistics - ...``) is :class:`~guardcache.cache.policy_cache.PolicyCache`'s.
    """

    policy_type: ClassVar[PolicyFactory] = LFUPolicy


__all__ = ["CacheEntry", "LFUCache"]
