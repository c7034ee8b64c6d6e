"""Cache stats as a value object, the stats log line, and the one reporter thread per process.

The numbers are counted by the cache's :class:`~guardcache.cache.recorder.StatsRecorder` and read from
one snapshot of it (taken under the cache's lock); formatting and logging happen outside the lock. A
cache given a :class:`StatsReporter` is reported by that reporter's ONE daemon thread (shared by all
such caches of the process, holding only weak references), so a cache with an interval costs no
thread and a cache that is closed or garbage-collected simply drops out of the schedule. (A cache
with an interval and no reporter logs on access instead, as NeMo Guardrails' does: see
:class:`~guardcache.cache.policy_cache.PolicyCache`.)
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, NoReturn, Protocol, cast

from guardcache.cache.recorder import StatsSnapshot

log = logging.getLogger("guardcache.cache.lfu")


def line_format(policy: str) -> str:
    """The stats line of a cache evicting by ``policy`` is ``line_format(policy) % body``, e.g.
    ``TinyLFU Cache Statistics - Size: ...``: the seed's line with the policy's name in front, so
    operators grep one shape and still see which policy a cache runs."""
    return f"{policy} Cache Statistics - %s"


#: The LFU's stats line is ``LINE_FORMAT % stats.format_body()``; logged with that format and
#: argument, so a handler (or a test patching ``log.info``) sees the fields apart, as in NeMo
#: Guardrails' own call.
LINE_FORMAT = line_format("LFU")

_COUNTERS = (
    "hits",
    "misses",
    "evictions",
    "puts",
    "updates",
    "coalesced",
    "load_success",
    "load_failure",
    "total_load_time",
    "expirations",
)


def _read_only(*_: Any, **__: Any) -> NoReturn:
    raise TypeError("CacheStats is a read-only snapshot; dict(stats) gives a copy you can change")


def _rebuild(data: dict[str, Any]) -> CacheStats:
    """Unpickling and copying (the mutators are closed, so the default protocol cannot refill it)."""
    stats = CacheStats.__new__(CacheStats)
    dict.update(stats, data)
    return stats


class CacheStats(dict[str, Any]):
    """A snapshot of one cache's counters: a read-only dict whose keys are also attributes.

    The keys are ``hits``, ``misses``, ``evictions``, ``puts``, ``updates``, ``coalesced``,
    ``current_size``, ``maxsize``, the derived ``hit_rate`` and ``capacity`` (NeMo Guardrails'
    name for maxsize), and the loads: ``load_success``, ``load_failure``, ``total_load_time``
    (seconds) and the derived ``average_load_penalty`` (seconds per load), as Caffeine names them;
    ``expirations``: entries found past the cache's ``ttl`` and dropped (each such lookup was also
    a miss; always 0 without a ``ttl``). The stats line shows none of the loads nor
    ``expirations``: it stays the seed's, which operators grep.
    So code written for NeMo's dict-valued ``get_stats()`` reads it unchanged (``stats["hits"]``,
    ``isinstance(stats, dict)``, ``json.dumps(stats)``) and guardcache code reads ``stats.hits``.
    ``lookups`` and ``load_count`` are attributes only.

    ``coalesced`` counts askers that joined an in-flight computation; they are also counted as hits,
    because they were served without a backend call of their own. A load is one computation started
    on a miss by ``get_or_compute``: it succeeds (its value is stored) or fails (an exception or a
    cancellation: nothing is stored). Subtracting two snapshots gives the activity between them
    (sizes are taken from the newer one); adding two sums them. Snapshots are values: equal when
    their items are, hashable, and closed to item assignment.
    """

    __slots__ = ()

    def __init__(
        self,
        hits: int = 0,
        misses: int = 0,
        evictions: int = 0,
        puts: int = 0,
        updates: int = 0,
        coalesced: int = 0,
        current_size: int = 0,
        maxsize: int = 0,
        load_success: int = 0,
        load_failure: int = 0,
        total_load_time: float = 0.0,
        expirations: int = 0,
    ) -> None:
        total = hits + misses
        loads = load_success + load_failure
        super().__init__(
            hits=hits,
            misses=misses,
            evictions=evictions,
            puts=puts,
            updates=updates,
            coalesced=coalesced,
            current_size=current_size,
            maxsize=maxsize,
            hit_rate=hits / total if total else 0.0,
            capacity=maxsize,
            load_success=load_success,
            load_failure=load_failure,
            total_load_time=total_load_time,
            average_load_penalty=total_load_time / loads if loads else 0.0,
            expirations=expirations,
        )

    @classmethod
    def of(cls, snapshot: StatsSnapshot, current_size: int, maxsize: int) -> CacheStats:
        """The LFU's view of a recorder's snapshot, with the cache's size."""
        return cls(
            hits=snapshot.hits,
            misses=snapshot.misses,
            evictions=snapshot.evictions,
            puts=snapshot.puts,
            updates=snapshot.updates,
            coalesced=snapshot.coalesced,
            current_size=current_size,
            maxsize=maxsize,
            load_success=snapshot.load_success,
            load_failure=snapshot.load_failure,
            total_load_time=snapshot.total_load_time,
            expirations=snapshot.expirations,
        )

    @classmethod
    def unsupported(cls, message: str) -> CacheStats:
        """NeMo's answer of a cache that keeps no counters: ``{"message": ...}`` alone (the
        attributes then read 0)."""
        stats = cls.__new__(cls)
        dict.update(stats, message=message)
        return stats

    def _count(self, name: str) -> int:
        return cast(int, self.get(name, 0))

    @property
    def hits(self) -> int:
        return self._count("hits")

    @property
    def misses(self) -> int:
        return self._count("misses")

    @property
    def evictions(self) -> int:
        return self._count("evictions")

    @property
    def puts(self) -> int:
        return self._count("puts")

    @property
    def updates(self) -> int:
        return self._count("updates")

    @property
    def coalesced(self) -> int:
        return self._count("coalesced")

    @property
    def current_size(self) -> int:
        return self._count("current_size")

    @property
    def maxsize(self) -> int:
        return self._count("maxsize")

    @property
    def load_success(self) -> int:
        return self._count("load_success")

    @property
    def load_failure(self) -> int:
        return self._count("load_failure")

    @property
    def expirations(self) -> int:
        """Entries dropped because they outlived the cache's ``ttl``."""
        return self._count("expirations")

    @property
    def total_load_time(self) -> float:
        """Seconds spent in loads, successful or not."""
        return cast(float, self.get("total_load_time", 0.0))

    @property
    def lookups(self) -> int:
        return self.hits + self.misses

    @property
    def load_count(self) -> int:
        return self.load_success + self.load_failure

    @property
    def average_load_penalty(self) -> float:
        """total_load_time / load_count; 0.0 before the first load."""
        loads = self.load_success + self.load_failure
        return self.total_load_time / loads if loads else 0.0

    @property
    def hit_rate(self) -> float:
        """hits / (hits + misses); 0.0 before the first lookup."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def __sub__(self, older: CacheStats) -> CacheStats:
        diff = {name: getattr(self, name) - getattr(older, name) for name in _COUNTERS}
        return CacheStats(**diff, current_size=self.current_size, maxsize=self.maxsize)

    def __add__(self, other: CacheStats) -> CacheStats:
        total = {name: getattr(self, name) + getattr(other, name) for name in _COUNTERS}
        return CacheStats(
            **total,
            current_size=self.current_size + other.current_size,
            maxsize=self.maxsize + other.maxsize,
        )

    def as_dict(self) -> dict[str, Any]:
        """A plain, changeable copy: the counters plus the derived ``hit_rate``, ``capacity`` and
        ``average_load_penalty``."""
        return dict(self)

    # A value: no item assignment (attributes have no setters either).
    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _read_only

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (dict(self),))

    def __copy__(self) -> CacheStats:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> CacheStats:
        return self

    def __repr__(self) -> str:
        return f"CacheStats({', '.join(f'{k}={v!r}' for k, v in self.items())})"

    def format_body(self) -> str:
        """The fields of the stats line, after its ``<policy> Cache Statistics - `` prefix."""
        return (
            f"Size: {self.current_size}/{self.maxsize} | "
            f"Hits: {self.hits} | Misses: {self.misses} | Hit Rate: {self.hit_rate:.2%} | "
            f"Evictions: {self.evictions} | Puts: {self.puts} | Updates: {self.updates}"
        )

    def format_line(self) -> str:
        """The LFU's stats log line, in the exact form operators grep for."""
        return LINE_FORMAT % self.format_body()


class Reportable(Protocol):
    """What the reporter needs of a cache."""

    def log_stats_now(self) -> None: ...


class StatsReporter:
    """Writes each registered cache's stats line every interval, from one shared daemon thread.

    ``clock`` and ``start_thread`` exist for tests: with a fake clock and no thread, a test calls
    :meth:`run_pending` itself and sees exactly which lines are due.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, start_thread: bool = True) -> None:
        self._clock = clock
        self._start_thread = start_thread
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, weakref.ref[Reportable], float]] = []
        self._cancelled: set[int] = set()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def register(self, cache: Reportable, interval: float) -> int:
        """Schedule ``cache`` every ``interval`` seconds; returns a handle for :meth:`unregister`."""
        if interval <= 0:
            raise ValueError(f"stats_logging_interval must be > 0 (got {interval!r})")
        handle = next(self._seq)
        with self._cond:
            heapq.heappush(self._heap, (self._clock() + interval, handle, weakref.ref(cache), interval))
            if self._start_thread and self._thread is None:
                self._thread = threading.Thread(target=self._run, name="guardcache-stats", daemon=True)
                self._thread.start()
            self._cond.notify()
        return handle

    def unregister(self, handle: int) -> None:
        with self._cond:
            self._cancelled.add(handle)
            self._cond.notify()

    def scheduled(self) -> int:
        """How many caches are still scheduled (dead and closed ones are dropped as they come due)."""
        with self._cond:
            return sum(1 for _, handle, _, _ in self._heap if handle not in self._cancelled)

    def run_pending(self) -> float | None:
        """Log every cache that is due; returns the seconds until the next one (None: nothing left)."""
        due: list[Reportable] = []
        with self._cond:
            now = self._clock()
            while self._heap and self._heap[0][0] <= now:
                when, handle, ref, interval = heapq.heappop(self._heap)
                cache = ref()
                if handle in self._cancelled or cache is None:
                    self._cancelled.discard(handle)
                    continue
                due.append(cache)
                # Skip missed slots instead of bursting after a stall.
                nxt = when + interval
                if nxt <= now:
                    nxt = now + interval
                heapq.heappush(self._heap, (nxt, handle, ref, interval))
            wait = self._heap[0][0] - now if self._heap else None
        for cache in due:  # outside our lock: logging and the cache's lock are not held together
            try:
                cache.log_stats_now()
            except Exception:  # a broken handler must not stop reporting for the others
                log.exception("stats reporting failed")
        del due
        return wait

    def _run(self) -> None:
        while True:
            wait = self.run_pending()
            with self._cond:
                if wait is None and not self._heap:
                    self._cond.wait()
                elif wait is not None and wait > 0:
                    self._cond.wait(timeout=wait)


_default_reporter: StatsReporter | None = None
_default_lock = threading.Lock()


def default_reporter() -> StatsReporter:
    """The process-wide reporter, created on first use."""
    global _default_reporter
    with _default_lock:
        if _default_reporter is None:
            _default_reporter = StatsReporter()
        return _default_reporter


__all__ = ["LINE_FORMAT", "CacheStats", "StatsReporter", "default_reporter", "line_format"]
