"""The one place a cache's numbers are counted: a :class:`StatsRecorder`, after Caffeine's StatsCounter.

Every counter of a model's cache lives in its recorder: the LFU's hits, misses, puts, updates and
evictions, the single flight's coalesced askers and its loads (successes, failures, time spent), and
the Redis tier's L2 outcomes, errors, authentication failures and leases. The stats line and
``get_stats()`` of the LFU, ``tier_stats()`` and the tier's line of a tiered cache, and the counters a
tiered cache shares through Redis are all read from :meth:`StatsRecorder.snapshot`, and a metrics
endpoint reads the same snapshot.

Two implementations:

- :class:`ConcurrentStatsRecorder`: counts, safely from any thread. Its ``record_*`` methods take the
  recorder's lock (a few hundred nanoseconds: for events that cost a Redis round trip or a backend
  call anyway). The one cache that owns the recorder counts its hot path (lookups, puts, loads)
  itself, in integers it increments under its own lock, which it holds there anyway, and hands the
  recorder a reader of them (:meth:`~ConcurrentStatsRecorder.bind`) that every snapshot adds in: a hit then
  costs one integer increment, not a method call and a second lock (measured on CPython 3.11: a
  call ~9% more instructions per hit, a second lock ~45%). This is LongAdder's idea, with one cell
  per lock instead of per CPU.
- :data:`DISABLED_RECORDER` (:class:`DisabledStatsRecorder`): counts nothing. A cache given it
  (``enabled`` is False) never calls it and counts nothing itself: it reads ``enabled`` once, when
  it is built, and takes a ``get`` without counter lines and loads without clock reads.

A snapshot is consistent: it is taken holding the owning cache's lock (then the recorder's), so no
event is half-counted in it (a joined asker is in ``hits`` and ``coalesced`` or in neither) and
``hits + misses`` is exactly the lookups answered so far. Lock order is always the owner's lock, then
the recorder's; the recorder never takes another lock while holding its own.

Counters are totals since creation; :meth:`~StatsRecorder.reset` moves the baseline that
:meth:`~StatsRecorder.snapshot` subtracts (a Prometheus exporter reads snapshots and never resets).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, fields
from typing import Any, Protocol

# Indices of the counters in a recorder's lists and in what a bound reader returns. Module constants
# (not an enum): the hot path reads them as plain ints.
HITS = 0
MISSES = 1
LOAD_SUCCESS = 2
LOAD_FAILURE = 3
LOAD_TIME_NS = 4  # nanoseconds, summed over successful and failed loads
EVICTIONS = 5
PUTS = 6
UPDATES = 7
COALESCED = 8
L2_HITS = 9
L2_PREVIOUS_HITS = 10
L2_MISSES = 11
L2_CORRUPT = 12
L2_UNAVAILABLE = 13
L2_ERRORS = 14
L2_AUTH_FAILURES = 15
COMPUTATIONS = 16
LEASE_WAITS = 17
LEASE_TAKEOVERS = 18
LEASE_TIMEOUTS = 19
EXPIRATIONS = 20
N_COUNTERS = 21

Counts = list[int]  # indexed by the constants above


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    """All counters of one recorder at one instant (since its last reset). A value: subtract two for
    the activity between them, add two to sum caches.

    - ``hits``/``misses``: lookups answered from the cache / not; an asker that joined another's
      load counts as a hit and, apart, as ``coalesced``.
    - ``load_success``/``load_failure``/``total_load_time``: computations run on a miss (by
      ``get_or_compute``): finished with a value, or failed or cancelled (nothing stored); and the
      seconds they took, both kinds together (Caffeine's totalLoadTime). In a tiered cache a load
      is the whole L2-then-backend path of one L1 miss.
    - ``evictions``: entries pushed out by a put (or removed by ``clear()``); ``puts``: new entries
      stored; ``updates``: puts that replaced the value of a stored key.
    - The Redis tier's: ``l2_hits`` (of which ``l2_previous_hits`` found under a rotated-out
      secret), ``l2_misses``, ``l2_corrupt``, ``l2_unavailable``, ``l2_errors``,
      ``l2_auth_failures``, ``computations`` (backend calls), ``lease_waits``,
      ``lease_takeovers``, ``lease_timeouts``: see :class:`~guardcache.cache.redis.stats.TierStats`.
    - ``expirations``: entries found past the cache's ``ttl`` and dropped (each lookup that found
      one is also a miss); not evictions: the policy did not choose them.

    The fields are in the order of this module's indices (``StatsSnapshot.of`` relies on it).
    """

    hits: int = 0
    misses: int = 0
    load_success: int = 0
    load_failure: int = 0
    total_load_time: float = 0.0  # seconds
    evictions: int = 0
    puts: int = 0
    updates: int = 0
    coalesced: int = 0
    l2_hits: int = 0
    l2_previous_hits: int = 0
    l2_misses: int = 0
    l2_corrupt: int = 0
    l2_unavailable: int = 0
    l2_errors: int = 0
    l2_auth_failures: int = 0
    computations: int = 0
    lease_waits: int = 0
    lease_takeovers: int = 0
    lease_timeouts: int = 0
    expirations: int = 0

    @classmethod
    def of(cls, counts: list[int]) -> StatsSnapshot:
        """From a list indexed by this module's constants (load time in nanoseconds)."""
        values: list[Any] = list(counts)
        values[LOAD_TIME_NS] = counts[LOAD_TIME_NS] / 1e9
        return cls(*values)

    @property
    def lookups(self) -> int:
        return self.hits + self.misses

    @property
    def hit_rate(self) -> float:
        """hits / lookups; 0.0 before the first lookup."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    @property
    def load_count(self) -> int:
        return self.load_success + self.load_failure

    @property
    def average_load_penalty(self) -> float:
        """Seconds an average load took (successful or not); 0.0 before the first."""
        count = self.load_success + self.load_failure
        return self.total_load_time / count if count else 0.0

    def __sub__(self, older: StatsSnapshot) -> StatsSnapshot:
        return StatsSnapshot(*(getattr(self, f.name) - getattr(older, f.name) for f in fields(self)))

    def __add__(self, other: StatsSnapshot) -> StatsSnapshot:
        return StatsSnapshot(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


class StatsRecorder(Protocol):
    """What a cache counts into. Every ``record_*`` is safe from any thread."""

    @property
    def enabled(self) -> bool:
        """False: the recorder counts nothing, and caches skip it on their hot path altogether."""
        ...

    def record_hits(self, n: int = 1) -> None: ...

    def record_misses(self, n: int = 1) -> None: ...

    def record_load_success(self, seconds: float) -> None:
        """A load (a computation on a miss) produced a value after ``seconds``."""
        ...

    def record_load_failure(self, seconds: float) -> None:
        """A load failed or was cancelled after ``seconds``; nothing was stored."""
        ...

    def record_eviction(self, n: int = 1) -> None: ...

    def record_puts(self, n: int = 1) -> None: ...

    def record_updates(self, n: int = 1) -> None: ...

    def record_coalesced(self, n: int = 1) -> None:
        """Askers that joined a load already running (they are also hits)."""
        ...

    def record_l2_hit(self, *, previous: bool = False) -> None:
        """A usable value came from Redis (``previous``: under the rotated-out secret's name)."""
        ...

    def record_l2_miss(self) -> None: ...

    def record_l2_corrupt(self) -> None:
        """A value from Redis that authenticated but could not be decoded."""
        ...

    def record_l2_unavailable(self) -> None:
        """Redis was not usable for a lookup (circuit open, or the operation failed)."""
        ...

    def record_l2_error(self) -> None:
        """A Redis operation failed (any kind: reads, writes, flushes, probes)."""
        ...

    def record_l2_auth_failure(self) -> None: ...

    def record_computation(self) -> None:
        """A backend call started (the tier's view: a load that Redis did not answer)."""
        ...

    def record_lease_wait(self) -> None: ...

    def record_lease_takeover(self) -> None: ...

    def record_lease_timeout(self) -> None: ...

    def bind(self, lock: AbstractContextManager[Any], read: Callable[[], Counts]) -> None:
        """Make the ONE cache that owns this recorder part of it: ``read()`` returns the totals that
        cache counted itself (indexed by this module's constants), and is called holding ``lock``,
        which every snapshot and reset take first."""
        ...

    def snapshot(self) -> StatsSnapshot:
        """Every counter, consistently, since the last :meth:`reset`."""
        ...

    def reset(self) -> None:
        """Start counting from zero (the totals stay; snapshots subtract them from now on)."""
        ...


class ConcurrentStatsRecorder:
    """Counts, safely from any thread; see the module doc for how the hot path stays cheap."""

    __slots__ = ("_baseline", "_lock", "_own", "_owner_lock", "_read")

    enabled = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._own: Counts = [0] * N_COUNTERS  # record_* calls, under self._lock
        self._read: Callable[[], Counts] | None = None  # the owning cache's counts, under its lock
        self._owner_lock: AbstractContextManager[Any] = nullcontext()
        self._baseline: Counts = [0] * N_COUNTERS

    def bind(self, lock: AbstractContextManager[Any], read: Callable[[], Counts]) -> None:
        with self._lock:
            if self._read is not None:
                raise ValueError(
                    "this recorder already counts for a cache; give each cache its own recorder "
                    "(snapshots add up: a + b)"
                )
            self._read = read
            self._owner_lock = lock

    def _add(self, index: int, n: int) -> None:
        with self._lock:
            self._own[index] += n

    def record_hits(self, n: int = 1) -> None:
        self._add(HITS, n)

    def record_misses(self, n: int = 1) -> None:
        self._add(MISSES, n)

    def _load(self, index: int, seconds: float) -> None:
        with self._lock:
            self._own[index] += 1
            self._own[LOAD_TIME_NS] += round(seconds * 1e9)

    def record_load_success(self, seconds: float) -> None:
        self._load(LOAD_SUCCESS, seconds)

    def record_load_failure(self, seconds: float) -> None:
        self._load(LOAD_FAILURE, seconds)

    def record_eviction(self, n: int = 1) -> None:
        self._add(EVICTIONS, n)

    def record_puts(self, n: int = 1) -> None:
        self._add(PUTS, n)

    def record_updates(self, n: int = 1) -> None:
        self._add(UPDATES, n)

    def record_coalesced(self, n: int = 1) -> None:
        self._add(COALESCED, n)

    def record_l2_hit(self, *, previous: bool = False) -> None:
        with self._lock:
            self._own[L2_HITS] += 1
            if previous:
                self._own[L2_PREVIOUS_HITS] += 1

    def record_l2_miss(self) -> None:
        self._add(L2_MISSES, 1)

    def record_l2_corrupt(self) -> None:
        self._add(L2_CORRUPT, 1)

    def record_l2_unavailable(self) -> None:
        self._add(L2_UNAVAILABLE, 1)

    def record_l2_error(self) -> None:
        self._add(L2_ERRORS, 1)

    def record_l2_auth_failure(self) -> None:
        self._add(L2_AUTH_FAILURES, 1)

    def record_computation(self) -> None:
        self._add(COMPUTATIONS, 1)

    def record_lease_wait(self) -> None:
        self._add(LEASE_WAITS, 1)

    def record_lease_takeover(self) -> None:
        self._add(LEASE_TAKEOVERS, 1)

    def record_lease_timeout(self) -> None:
        self._add(LEASE_TIMEOUTS, 1)

    def _totals(self) -> Counts:
        """Totals since creation. The caller holds the owner's lock, then ours (the one lock order)."""
        read = self._read
        if read is None:
            return self._own.copy()
        return [a + b for a, b in zip(self._own, read(), strict=True)]

    def snapshot(self) -> StatsSnapshot:
        with self._owner_lock, self._lock:
            totals = self._totals()
            baseline = self._baseline
        return StatsSnapshot.of([t - b for t, b in zip(totals, baseline, strict=True)])

    def reset(self) -> None:
        with self._owner_lock, self._lock:
            self._baseline = self._totals()

    def __repr__(self) -> str:
        return f"ConcurrentStatsRecorder({self.snapshot()!r})"


class DisabledStatsRecorder:
    """Counts nothing; its snapshot is all zeros. Caches skip it on their hot path (``enabled``)."""

    __slots__ = ()

    enabled = False

    def record_hits(self, n: int = 1) -> None:
        pass

    def record_misses(self, n: int = 1) -> None:
        pass

    def record_load_success(self, seconds: float) -> None:
        pass

    def record_load_failure(self, seconds: float) -> None:
        pass

    def record_eviction(self, n: int = 1) -> None:
        pass

    def record_puts(self, n: int = 1) -> None:
        pass

    def record_updates(self, n: int = 1) -> None:
        pass

    def record_coalesced(self, n: int = 1) -> None:
        pass

    def record_l2_hit(self, *, previous: bool = False) -> None:
        pass

    def record_l2_miss(self) -> None:
        pass

    def record_l2_corrupt(self) -> None:
        pass

    def record_l2_unavailable(self) -> None:
        pass

    def record_l2_error(self) -> None:
        pass

    def record_l2_auth_failure(self) -> None:
        pass

    def record_computation(self) -> None:
        pass

    def record_lease_wait(self) -> None:
        pass

    def record_lease_takeover(self) -> None:
        pass

    def record_lease_timeout(self) -> None:
        pass

    def bind(self, lock: AbstractContextManager[Any], read: Callable[[], Counts]) -> None:
        pass

    def snapshot(self) -> StatsSnapshot:
        return _ZERO

    def reset(self) -> None:
        pass

    def __repr__(self) -> str:
        return "DISABLED_RECORDER"


_ZERO = StatsSnapshot()

#: The recorder of a cache that counts nothing (stateless: one for every such cache).
DISABLED_RECORDER = DisabledStatsRecorder()


__all__ = [
    "DISABLED_RECORDER",
    "ConcurrentStatsRecorder",
    "Counts",
    "DisabledStatsRecorder",
    "StatsRecorder",
    "StatsSnapshot",
]
