"""Counters of the tiered cache: this replica's view and the view shared by all replicas.

This replica's counters are the cache's recorder's (:mod:`~guardcache.cache.recorder`): L1, tier and
store count into the same one, and :class:`TierStats` is made from one snapshot of it. The shared
(global) view lives in one
Redis hash per scope; every replica adds its deltas with HINCRBY in batches (see
``TieredCache.flush_stats``), never one round trip per request, and reads the totals back in the same
pipeline. So ``TierStats.global_stats`` is at most one flush interval old.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Any

from guardcache.cache.recorder import StatsSnapshot

log = logging.getLogger("guardcache.cache.redis")

#: Fields of the shared hash; each replica adds its deltas to them.
GLOBAL_FIELDS = (
    "lookups",
    "computations",
    "l2_hits",
    "l2_errors",
    "l2_auth_failures",
    "lease_waits",
    "lease_takeovers",
)


@dataclass(frozen=True, slots=True)
class GlobalTierStats:
    """Totals over every replica sharing the scope, as last read from Redis."""

    lookups: int = 0
    computations: int = 0
    l2_hits: int = 0
    l2_errors: int = 0
    l2_auth_failures: int = 0
    lease_waits: int = 0
    lease_takeovers: int = 0
    fetched_at: float = 0.0  # time.time() of the read

    @property
    def hit_rate(self) -> float:
        """Share of lookups, across replicas, served without a backend call."""
        return (self.lookups - self.computations) / self.lookups if self.lookups else 0.0

    @classmethod
    def from_hash(cls, data: dict[Any, Any], fetched_at: float | None = None) -> GlobalTierStats:
        """From an HGETALL reply (bytes or str keys and values; unknown fields ignored)."""
        values: dict[str, int] = {}
        for raw_key, raw_value in data.items():
            name = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
            if name in GLOBAL_FIELDS:
                try:
                    values[name] = int(raw_value)
                except (TypeError, ValueError):
                    continue
        return cls(**values, fetched_at=time.time() if fetched_at is None else fetched_at)


@dataclass(frozen=True, slots=True)
class TierStats:
    """A snapshot of one tiered cache: where each lookup was answered, and Redis' health.

    - ``lookups`` = L1 hits + L1 misses (the LFU's view); ``l1_hits`` excludes ``coalesced`` askers
      (joined an in-flight load in this process).
    - Every L1 miss that reached Redis is an ``l2_hits`` or ``l2_misses`` (absent, expired,
      ``l2_corrupt`` or failed authentication) or ``l2_unavailable`` (circuit open, the operation
      failed, or the tier was still connecting). ``l2_previous_hits`` (part of ``l2_hits``):
      values found under the previous secret during a key rotation, and re-written under the
      current one.
    - ``l2_auth_failures``: values read from Redis whose authentication failed (forged, tampered,
      moved from another key, sealed with another secret, kept past their expiry); each is a miss.
      Anything above zero means something other than the replicas writes to Redis (or a replica
      runs with another secret), and it is logged (rate-limited) as a WARNING.
    - ``l2_errors`` counts failed Redis operations of any kind (reads, writes, stats flushes, probes).
    - ``computations`` counts backend calls started here (failed ones included).
    - ``lease_waits``: loads that waited for another replica's lease; ``lease_takeovers``: loads
      that took a lease over after its holder let it expire; ``lease_timeouts``: waits that gave up
      after ``lease_ms`` + margin and computed without the lease.
    - ``connecting``: the tier is not up yet (its connection being set up, or set-up failing and
      tried again with backoff); ``circuit_open``: it was up, and its circuit breaker skips it.
    """

    lookups: int = 0
    l1_hits: int = 0
    coalesced: int = 0
    l2_hits: int = 0
    l2_misses: int = 0
    l2_corrupt: int = 0
    l2_auth_failures: int = 0
    l2_previous_hits: int = 0
    l2_errors: int = 0
    l2_unavailable: int = 0
    computations: int = 0
    lease_waits: int = 0
    lease_takeovers: int = 0
    lease_timeouts: int = 0
    warnings_logged: int = 0
    circuit_open: bool = False
    connecting: bool = False
    global_stats: GlobalTierStats | None = None

    @classmethod
    def of(
        cls,
        snapshot: StatsSnapshot,
        *,
        warnings_logged: int = 0,
        circuit_open: bool = False,
        connecting: bool = False,
        global_stats: GlobalTierStats | None = None,
    ) -> TierStats:
        """The tier's view of one snapshot of the cache's recorder."""
        s = snapshot
        return cls(
            lookups=s.lookups,
            l1_hits=s.hits - s.coalesced,
            coalesced=s.coalesced,
            l2_hits=s.l2_hits,
            l2_misses=s.l2_misses,
            l2_corrupt=s.l2_corrupt,
            l2_auth_failures=s.l2_auth_failures,
            l2_previous_hits=s.l2_previous_hits,
            l2_errors=s.l2_errors,
            l2_unavailable=s.l2_unavailable,
            computations=s.computations,
            lease_waits=s.lease_waits,
            lease_takeovers=s.lease_takeovers,
            lease_timeouts=s.lease_timeouts,
            warnings_logged=warnings_logged,
            circuit_open=circuit_open,
            connecting=connecting,
            global_stats=global_stats,
        )

    @property
    def hit_rate(self) -> float:
        """Share of this replica's lookups served without a backend call."""
        return (self.lookups - self.computations) / self.lookups if self.lookups else 0.0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["hit_rate"] = self.hit_rate
        if self.global_stats is not None:
            data["global_stats"]["hit_rate"] = self.global_stats.hit_rate
        return data

    def format_line(self) -> str:
        """The tier's log line, written next to the LFU line."""
        g = self.global_stats
        global_rate = f"{g.hit_rate:.2%}" if g is not None and g.lookups else "n/a"
        return (
            f"Redis Tier Statistics - L1 Hits: {self.l1_hits} | L2 Hits: {self.l2_hits} | "
            f"L2 Misses: {self.l2_misses} | L2 Errors: {self.l2_errors} | "
            f"Backend Calls: {self.computations} | Lease Waits: {self.lease_waits} | "
            f"Coalesced: {self.coalesced} | Global Hit Rate: {global_rate}"
            + (f" | L2 Auth Failures: {self.l2_auth_failures}" if self.l2_auth_failures else "")
            + (" | Circuit: open" if self.circuit_open else "")
            + (" | Redis: connecting" if self.connecting else "")
        )


__all__ = ["GLOBAL_FIELDS", "GlobalTierStats", "TierStats", "log"]
