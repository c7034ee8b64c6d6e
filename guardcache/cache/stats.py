"""Cache counters as a value object, the stats log line, and the one reporter thread per process.

Counting happens under the cache's lock (a few integer increments); formatting and logging happen
outside it, from a snapshot. Periodic reporting is done by ONE daemon thread for all caches of the
process, holding only weak references, so a cache with an interval costs no thread and a cache that is
closed or garbage-collected simply drops out of the schedule.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

log = logging.getLogger("guardcache.cache.lfu")

_COUNTERS = ("hits", "misses", "evictions", "puts", "updates", "coalesced")


@dataclass(frozen=True, slots=True)
class CacheStats:
    """A snapshot of one cache's counters.

    ``coalesced`` counts askers that joined an in-flight computation; they are also counted as hits,
    because they were served without a backend call of their own. Subtracting two snapshots gives the
    activity between them (sizes are taken from the newer one).
    """

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    puts: int = 0
    updates: int = 0
    coalesced: int = 0
    current_size: int = 0
    maxsize: int = 0

    @property
    def lookups(self) -> int:
        return self.hits + self.misses

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
        """The counters plus ``hit_rate`` and ``capacity`` (NeMo Guardrails' name for maxsize)."""
        data = asdict(self)
        data["hit_rate"] = self.hit_rate
        data["capacity"] = self.maxsize
        return data

    def __getitem__(self, name: str) -> Any:
        """``stats["hits"]`` works as with NeMo Guardrails' dict-valued ``get_stats()``."""
        return self.as_dict()[name]

    def format_line(self) -> str:
        """The stats log line, in the exact form operators grep for."""
        return (
            f"LFU Cache Statistics - Size: {self.current_size}/{self.maxsize} | "
            f"Hits: {self.hits} | Misses: {self.misses} | Hit Rate: {self.hit_rate:.2%} | "
            f"Evictions: {self.evictions} | Puts: {self.puts} | Updates: {self.updates}"
        )


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


__all__ = ["CacheStats", "StatsReporter", "default_reporter"]
