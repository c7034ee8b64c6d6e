"""What the cache tests share: a TinyLFU on a small scale (tests/unit/test_cache_policy.py,
tests/unit/test_cache_snapshot.py)."""

from __future__ import annotations

from typing import ClassVar

from guardcache.cache import TinyLFUCache
from guardcache.cache.policy import PolicyFactory
from guardcache.cache.tinylfu import TinyLFUPolicy


class BusyPolicy(TinyLFUPolicy):
    """Ages, climbs and checks on a small scale, so a few hundred operations (or a short trace) go
    through all of it."""

    SAMPLE = 3.0
    MIN_PERIOD = 16
    CLIMB_PERIOD = 2.0
    STEP = 0.25
    MAINTAIN_EVERY = 1


class BusyCache(TinyLFUCache):
    policy_type: ClassVar[PolicyFactory] = BusyPolicy
