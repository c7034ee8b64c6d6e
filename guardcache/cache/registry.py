"""Caches by policy name: what ``cache.policy`` in a config, ``guardcache demo --policy`` and the
benchmarks choose from.

Adding a policy is a module (a class honouring :class:`~guardcache.cache.policy.EvictionPolicy` and
its :class:`~guardcache.cache.policy_cache.PolicyCache` subclass), a line here, and its name in the
config's ``cache.policy`` choices (``guardcache.config.models``; a test keeps the two lists equal).
"""

from __future__ import annotations

from guardcache.cache.expiry import Clock
from guardcache.cache.lfu import LFUCache
from guardcache.cache.policy_cache import PolicyCache
from guardcache.cache.recorder import StatsRecorder
from guardcache.cache.slots import clock as slot_clock
from guardcache.cache.stats import StatsReporter
from guardcache.cache.tinylfu import TinyLFUCache

#: Policy name -> the cache class evicting by it; the first is the default.
POLICIES: dict[str, type[PolicyCache]] = {"lfu": LFUCache, "tinylfu": TinyLFUCache}
#: The names, default first.
POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)
DEFAULT_POLICY = "lfu"


def cache_class(policy: str) -> type[PolicyCache]:
    """The cache class of ``policy``; an unknown name is a ``ValueError`` naming the choices."""
    try:
        return POLICIES[policy]
    except KeyError:
        choices = ", ".join(POLICY_NAMES)
        raise ValueError(f"unknown cache policy {policy!r}; choose one of: {choices}") from None


def make_cache(
    policy: str,
    maxsize: int,
    track_stats: bool = False,
    stats_logging_interval: float | None = None,
    *,
    reporter: StatsReporter | None = None,
    recorder: StatsRecorder | None = None,
    ttl: float | None = None,
    clock: Clock = slot_clock,
) -> PolicyCache:
    """A cache of ``maxsize`` entries evicting by ``policy`` (``"lfu"``, ``"tinylfu"``), its entries
    served for ``ttl`` seconds (None: until evicted); the other arguments are
    :class:`~guardcache.cache.policy_cache.PolicyCache`'s."""
    return cache_class(policy)(
        maxsize,
        track_stats,
        stats_logging_interval,
        reporter=reporter,
        recorder=recorder,
        ttl=ttl,
        clock=clock,
    )


__all__ = ["DEFAULT_POLICY", "POLICIES", "POLICY_NAMES", "cache_class", "make_cache"]
