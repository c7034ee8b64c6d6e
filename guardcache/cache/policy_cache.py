"""PolicyCache: the cache around an eviction policy, written once for every policy.

A policy (:mod:`guardcache.cache.policy`) keeps the entries in order and supplies the two hot paths;
this class is everything else of the public face: the contract of :class:`CacheInterface`, one
``threading.RLock`` guarding everything (only list and dict updates run under it), single-flight
loading, stats (counted by the cache's :class:`~guardcache.cache.recorder.StatsRecorder`), the
stats line and its schedule, and introspection. :class:`~guardcache.cache.lfu.LFUCache` and
:class:`~guardcache.cache.tinylfu.TinyLFUCache` are this class with a policy each.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, ClassVar

from guardcache.cache.expiry import Clock, check_ttl, with_expiry
from guardcache.cache.interface import MISSING, CacheInterface, ComputeFn
from guardcache.cache.policy import EvictionPolicy, HotPaths, PolicyFactory, PolicyState
from guardcache.cache.recorder import (
    EVICTIONS,
    EXPIRATIONS,
    HITS,
    MISSES,
    N_COUNTERS,
    PUTS,
    UPDATES,
    ConcurrentStatsRecorder,
    Counts,
    StatsRecorder,
)
from guardcache.cache.reporting import LineClock, with_line_check
from guardcache.cache.singleflight import SingleFlight
from guardcache.cache.slots import clock as slot_clock
from guardcache.cache.slots import wall_time
from guardcache.cache.stats import CacheStats, StatsReporter, line_format, log


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """A read-only view of one entry; reading it is not an access."""

    key: Hashable
    value: Any
    frequency: int  # what the policy keeps of the entry's popularity (LFU: its accesses)
    # Wall-clock seconds (time.time() scale). Stored as monotonic readings, converted on read: see
    # slots.wall_time. So a step of the system clock after the put does not reorder entries.
    created_at: float  # when the value was stored (or last replaced)
    accessed_at: float  # the last get hit or put


class PolicyCache(CacheInterface):
    """A bounded, thread-safe cache whose eviction order is its policy's (``policy_type``).

    - A ``get`` hit and a ``put`` of an existing key each count as one access.
    - ``put`` of an existing key replaces the value, counts as an update, and keeps the entry.
    - ``maxsize == 0`` stores nothing; ``maxsize < 0`` is a ``ValueError``.
    - Counting goes to ``recorder`` (default: a new
      :class:`~guardcache.cache.recorder.ConcurrentStatsRecorder`, counting whether or not
      ``track_stats`` is on, so ``get_stats()`` and metrics always work); give it
      :data:`~guardcache.cache.recorder.DISABLED_RECORDER` to count nothing: nothing reads the hot
      paths' closure counters then, and the single flight reads no clock. ``track_stats`` turns on
      reporting: :meth:`log_stats_now` writes the stats line only then, as in NeMo Guardrails.
    - With ``track_stats`` and ``stats_logging_interval`` the line is written periodically, until
      :meth:`close` or garbage collection, in one of two ways:

      - by default, as NeMo Guardrails' cache does: the first ``get``/``put``/``get_or_compute``
        at least ``stats_logging_interval`` seconds (wall clock) after the last line writes it,
        before doing its own work (outside the lock). An idle cache writes nothing. Such a cache's
        ``get``/``put`` read the clock on each call; caches without an interval do not.
      - with ``reporter`` (e.g. :func:`~guardcache.cache.stats.default_reporter`, the process's
        one daemon thread): every interval from that thread, also while the cache is idle, and
        nothing on the request path.
    - The cache is truthy even when empty (``len()`` is the number of entries).
    - With ``ttl`` (seconds), an entry that old is a miss wherever it is looked up (``get``,
      ``get_or_compute``, ``entry()``, ``contains()``), is removed then and counted as an
      expiration (see :mod:`~guardcache.cache.expiry`). Without one (the default) nothing expires
      and no lookup reads a clock for it. ``clock`` (monotonic seconds, on the scale of the
      entries' stamps) is for tests: ``lambda: time.monotonic() + offset`` moves time forward.

    **The hot path.** ``cache.hot`` holds this cache's own ``get`` and ``put``: the policy's
    closures over its containers (see :mod:`~guardcache.cache.policy` for why closures).
    ``__init__`` also stores them as the instance's ``get`` and ``put`` attributes, so ``cache.get``
    *is* ``cache.hot.get`` and a call costs one closure call; the :meth:`get` and :meth:`put`
    defined below document them and run only when called through the class
    (``LFUCache.get(cache, key)``: they call ``self.hot``).
    """

    #: The policy a subclass caches with (a class honouring
    #: :class:`~guardcache.cache.policy.EvictionPolicy`).
    policy_type: ClassVar[PolicyFactory]

    def __init__(
        self,
        maxsize: int,
        track_stats: bool = False,
        stats_logging_interval: float | None = None,
        *,
        reporter: StatsReporter | None = None,
        recorder: StatsRecorder | None = None,
        ttl: float | None = None,
        clock: Clock = slot_clock,
    ) -> None:
        if maxsize < 0:
            raise ValueError(f"maxsize must be >= 0 (got {maxsize})")
        if stats_logging_interval is not None and stats_logging_interval <= 0:
            raise ValueError(f"stats_logging_interval must be > 0 (got {stats_logging_interval})")
        self._maxsize = maxsize
        self._ttl = check_ttl(ttl)
        self._clock = clock
        #: Loads whose value must be stored older than new (``expire_load_after``): key -> age (s).
        self._load_ages: dict[Hashable, float] = {}
        self.track_stats = track_stats
        self.stats_logging_interval = stats_logging_interval
        self._lock = threading.RLock()
        #: The policy: the entries, their order and the bare hot paths.
        self._s: EvictionPolicy = type(self).policy_type(maxsize, self._lock)
        self._line = line_format(self._s.name)
        #: Where this cache counts; read with ``recorder.snapshot()`` (or :meth:`get_stats`).
        self.recorder: StatsRecorder = ConcurrentStatsRecorder() if recorder is None else recorder
        # The recorder is asked once, here: a disabled one is never called again. Counted by this
        # cache itself, under its lock: the hot paths (in their closures' cells), the single flight
        # and clear() (in _counts); the recorder reads both through _read_counts.
        counting = self.recorder.enabled
        self._counts: Counts | None = [0] * N_COUNTERS if counting else None
        bare = self._s.hot
        if self._ttl is None:  # today's paths, untouched: no clock read, no extra call
            self._flight = SingleFlight(self._lock, self._lookup, bare.put, self._counts)
        else:
            bare = with_expiry(bare, self._s, self._lock, self._ttl, clock, self._remove_expired)
            self._flight = SingleFlight(self._lock, self._lookup_fresh, self._store_loaded, self._counts)
            self.contains = self._contains_fresh  # type: ignore[method-assign]
        #: The put loads store with (the policy's, stamped with ``clock`` when there is a ttl).
        self._store = bare.put
        if counting:
            self.recorder.bind(self._lock, self._read_counts)
        self._reporter: StatsReporter | None = None
        self._report_handle: int | None = None
        self._line_clock: LineClock | None = None
        #: This cache's ``get`` and ``put`` (see "The hot path" above).
        self.hot: HotPaths = bare
        if track_stats and stats_logging_interval is not None:
            if reporter is not None:
                self._reporter = reporter
                self._report_handle = reporter.register(self, stats_logging_interval)
                weakref.finalize(self, reporter.unregister, self._report_handle)
            else:  # on access: get/put check the clock first (the single flight keeps the bare put)
                self._line_clock = LineClock(stats_logging_interval)
                self.hot = with_line_check(bare, self._line_clock, self._line_due)
        # Bound over the methods below, on this instance only: a call skips their frame.
        self.get, self.put = self.hot.get, self.hot.put  # type: ignore[method-assign, assignment]

    # -- the public face -------------------------------------------------------------------------

    def get(self, key: Hashable, default: Any = None) -> Any:
        """Return the value for ``key`` (a hit: counts an access), else ``default`` (a miss).

        ``cache.get`` is ``cache.hot.get`` (bound in ``__init__``); this body runs only when called
        through the class."""
        return self.hot.get(key, default)

    def put(self, key: Hashable, value: Any) -> None:
        """Store ``value``; an existing key is replaced (an update), a new one may evict another
        (or, under an admission policy, be evicted at once).

        ``cache.put`` is ``cache.hot.put`` (bound in ``__init__``); this body runs only when called
        through the class."""
        self.hot.put(key, value)

    def delete(self, key: Hashable) -> bool:
        """Remove ``key`` (not an eviction); returns whether it was there."""
        with self._lock:
            return self._s.remove(key)

    def contains(self, key: Hashable) -> bool:
        """Whether ``key`` is stored (and, with a ``ttl``, not expired: ``__init__`` binds
        :meth:`_contains_fresh` then); not a lookup: counts no hit or miss."""
        with self._lock:
            return key in self._s.index

    def __contains__(self, key: Hashable) -> bool:
        return self.contains(key)

    def entry(self, key: Hashable) -> CacheEntry | None:
        """The entry's value and metadata, without counting an access; None when absent (or
        expired: then it is removed and counted as an expiration)."""
        s = self._s
        with self._lock:
            if self._ttl is not None:
                self._drop_expired(key)
            i = s.index.get(key)
            if i is None:
                return None
            created = s.created[i]
            accessed = s.accessed[i]
            if accessed is None:
                accessed = created
            return CacheEntry(key, s.values[i], s.frequency(i), wall_time(created), wall_time(accessed))

    def size(self) -> int:
        return len(self._s.index)

    def __len__(self) -> int:
        return len(self._s.index)

    def __bool__(self) -> bool:  # not len(): NeMo's actions test ``if cache:`` on an empty cache
        return True

    def is_empty(self) -> bool:
        return not self._s.index

    def clear(self) -> None:
        """Remove every entry; they count as evictions."""
        with self._lock:
            if self._counts is not None:
                self._counts[EVICTIONS] += len(self._s.index)
            self._s.reset()

    @property
    def maxsize(self) -> int:
        return self._maxsize

    @property
    def ttl(self) -> float | None:
        """Seconds an entry is served for from when it was stored (judged); None: until evicted."""
        return self._ttl

    @property
    def capacity(self) -> int:
        """NeMo Guardrails' name for :attr:`maxsize`."""
        return self._maxsize

    @property
    def policy(self) -> str:
        """The eviction policy's name, as the stats line shows it (``LFU``, ``TinyLFU``)."""
        return self._s.name

    def keys_in_eviction_order(self) -> list[Hashable]:
        """Keys from the next victim to the safest; O(n), for tests and debugging."""
        with self._lock:
            return self._s.eviction_order()

    def export_state(self) -> PolicyState:
        """The entries, their order and the policy's state (for a snapshot file), taken under the
        lock: a walk of the entries (O(n), ~10 ms for 50,000), no encoding; the values are shared,
        not copied (they are immutable)."""
        with self._lock:
            return self._s.export_state()

    def restore_state(self, state: PolicyState) -> int:
        """Fill this empty cache from ``state`` (see :meth:`EvictionPolicy.restore_state`); how many
        entries it holds. The restored entries count as puts (so puts - evictions stays the size);
        hits, misses and loads start at zero: they are this process's."""
        with self._lock:
            n = self._s.restore_state(state)
            s, ttl = self._s, self._ttl
            if ttl is not None and s.deadline is not None:  # each entry keeps its age
                for i in s.index.values():
                    s.deadline[i] = s.created[i] + ttl
            return n

    # -- stats -----------------------------------------------------------------------------------

    def get_stats(self) -> CacheStats:
        """A snapshot of the recorder (all zeros but the sizes when it is disabled), with the size
        read under the same lock."""
        with self._lock:
            snapshot = self.recorder.snapshot()
            size = len(self._s.index)
        return CacheStats.of(snapshot, size, self._maxsize)

    def reset_stats(self) -> None:
        self.recorder.reset()

    def _read_counts(self) -> Counts:
        """What this cache counted itself since creation (the recorder calls it under the lock).
        Puts are derived: each new entry is still here, or was evicted, deleted or cleared."""
        counts = list(self._counts or [0] * N_COUNTERS)
        hits, misses, evictions, updates = self.hot.counts()
        counts[HITS] += hits
        counts[MISSES] += misses
        counts[UPDATES] += updates
        counts[PUTS] = len(self._s.index) + evictions + self._s.removed + counts[EVICTIONS]
        counts[EVICTIONS] += evictions
        return counts

    def log_stats_now(self) -> None:
        """Write the stats line now if ``track_stats`` is on (else nothing, as in NeMo Guardrails);
        a cache that logs on access counts its next interval from here."""
        if not self.track_stats:
            return
        stats = self.get_stats()  # snapshot under the lock, log outside it
        if self._line_clock is not None:
            self._line_clock.last = time.time()
        log.info(self._line, stats.format_body())

    def supports_stats_logging(self) -> bool:
        return self.track_stats and self.stats_logging_interval is not None

    def _line_due(self, now: float) -> None:
        """A call found the line due (``now`` is its ``time.time()``): write it, once."""
        clock = self._line_clock
        if clock is None:
            return
        with self._lock:
            elapsed = now - clock.last
            if elapsed < 0.0:  # the clock went back: the interval starts again from now
                clock.last = now
                return
            if elapsed < clock.interval:  # another thread wrote it meanwhile
                return
            clock.last = now
            stats = self.get_stats()
        log.info(self._line, stats.format_body())

    def _check_line(self) -> None:
        clock = self._line_clock
        if clock is not None:
            now = time.time()
            if not 0.0 <= now - clock.last < clock.interval:
                self._line_due(now)

    def close(self) -> None:
        """Stop periodic reporting (entries and stats stay readable)."""
        if self._reporter is not None and self._report_handle is not None:
            self._reporter.unregister(self._report_handle)
            self._report_handle = None
        if self._line_clock is not None:
            self._line_clock.interval = math.inf

    # -- loading (single flight) -----------------------------------------------------------------

    def _lookup(self, key: Hashable) -> Any:
        """Under the lock: the value (an access, counted by the single flight), or MISSING."""
        s = self._s
        i = s.index.get(key)
        if i is None:
            return MISSING
        s.touch(i)
        return s.values[i]

    # -- expiry (only with a ttl: __init__ binds these instead of the plain paths) ----------------

    def _drop_expired(self, key: Hashable) -> bool:
        """Under the lock: remove ``key`` if it is ``ttl`` old, counting an expiration; whether it was."""
        s, ttl = self._s, self._ttl
        i = s.index.get(key)
        if i is None or ttl is None or s.deadline is None or self._clock() < s.deadline[i]:
            return False
        self._remove_expired(key)
        return True

    def _remove_expired(self, key: Hashable) -> None:
        """Under the lock: drop ``key``, which the caller found expired, counting an expiration
        (the expiring ``get`` paths call it holding the lock, right after their own check)."""
        self._s.remove(key)
        if self._counts is not None:
            self._counts[EXPIRATIONS] += 1

    def _lookup_fresh(self, key: Hashable) -> Any:
        """:meth:`_lookup`, for a cache with a ttl: an expired entry is dropped (counted) and is
        MISSING; one lookup and one clock read (the age and the access stamp)."""
        s = self._s
        i = s.index.get(key)
        if i is None:
            return MISSING
        now = self._clock()
        if now >= s.deadline[i]:  # type: ignore[index]  # only bound with a ttl (deadlines kept)
            self._remove_expired(key)
            return MISSING
        s.touch(i, now)
        return s.values[i]

    def _contains_fresh(self, key: Hashable) -> bool:
        with self._lock:
            self._drop_expired(key)
            return key in self._s.index

    def _store_loaded(self, key: Hashable, value: Any) -> None:
        """The single flight's store, for a cache with a ttl (under the lock): the bare put, aged
        as :meth:`expire_load_after` asked."""
        self._store(key, value)
        age = self._load_ages.pop(key, None)
        if age is not None:
            self._age(key, age)

    def _age(self, key: Hashable, age: float) -> None:
        """Under the lock: make ``key``'s entry ``age`` seconds older (its stamp earlier)."""
        s = self._s
        i = s.index.get(key)
        if i is not None:
            s.created[i] -= age
            if s.deadline is not None:
                s.deadline[i] -= age

    def _age_for(self, remaining: float) -> float:
        """How much older than now an entry with ``remaining`` seconds of life left is stored."""
        ttl = self._ttl or 0.0  # only called with a ttl
        return min(max(ttl - remaining, 0.0), ttl)

    def put_expiring(self, key: Hashable, value: Any, remaining: float) -> None:
        """Store ``value`` to be served at most ``remaining`` more seconds (and at most ``ttl``).

        For a verdict judged earlier elsewhere (a shared tier): its life is counted from when it
        was judged, not from when this process got it. Without a ``ttl``, a plain :meth:`put`."""
        if self._ttl is None:
            self.hot.put(key, value)
            return
        with self._lock:
            self.hot.put(key, value)
            self._age(key, self._age_for(remaining))

    def expire_load_after(self, key: Hashable, remaining: float) -> None:
        """The value the running load of ``key`` (``get_or_compute``) returns is to be served at
        most ``remaining`` more seconds, as :meth:`put_expiring`; call it from the load, just before
        it returns. Nothing without a ``ttl``."""
        if self._ttl is not None:
            with self._lock:
                self._load_ages[key] = self._age_for(remaining)

    def hit(self, key: Hashable) -> Any:
        """The stored value (an access, counted as a hit, as the single flight counts one), or
        ``MISSING`` counting nothing: the caller then asks :meth:`get_or_compute`, which counts the
        miss. No coroutine: a check answers its hits without awaiting."""
        self._check_line()
        return self._flight.hit(key)

    async def get_or_compute(self, key: Hashable, compute_fn: ComputeFn, default: Any = MISSING) -> Any:
        self._check_line()
        return (await self._flight.get_or_load(key, compute_fn, default))[0]

    async def get_or_load(
        self, key: Hashable, compute_fn: ComputeFn, default: Any = MISSING
    ) -> tuple[Any, bool]:
        self._check_line()
        return await self._flight.get_or_load(key, compute_fn, default)

    def get_or_compute_sync(
        self, key: Hashable, compute_fn: Callable[[], Any], default: Any = MISSING
    ) -> Any:
        """Like :meth:`get_or_compute`, for threads: blocks until the shared result is ready."""
        self._check_line()
        return self._flight.get_or_load_sync(key, compute_fn, default)[0]

    def get_or_load_sync(
        self, key: Hashable, compute_fn: Callable[[], Any], default: Any = MISSING
    ) -> tuple[Any, bool]:
        """Like :meth:`get_or_load`, for threads: blocks until the shared result is ready."""
        self._check_line()
        return self._flight.get_or_load_sync(key, compute_fn, default)

    def in_flight(self) -> int:
        """How many computations are running now (0 when the cache is idle)."""
        return self._flight.in_flight()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(maxsize={self._maxsize}, size={len(self._s.index)})"


__all__ = ["CacheEntry", "PolicyCache"]
