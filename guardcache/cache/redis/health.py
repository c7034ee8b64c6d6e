"""How the shared tier behaves when Redis is down, slow or refusing: a circuit breaker and a
throttled warning, both driven by an injectable clock so their schedules are unit-tested.

Why a breaker: without one, a dead Redis costs every request a failed round trip (or a whole
``timeout_ms`` when packets are black-holed). With it, the first error opens the circuit and
requests skip Redis entirely; after a backoff ONE background probe (a PING, never a request) decides
whether to close it again. Backoffs double up to a cap, so a long outage costs a probe every few
seconds and nothing per request.

Why a throttled log: one WARNING per failed request would flood the log exactly when operators need
it. The first error logs at once; later ones are counted and summarised in the next line, whose
quiet period doubles up to ~30 s (and restarts only after ~30 s without errors, so a flapping Redis
is throttled too). Recovery is logged at INFO, at most once per WARNING.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from types import TracebackType

Clock = Callable[[], float]


class Backoff:
    """Exponential delays ``base, 2*base, 4*base, ...`` capped at ``cap``."""

    def __init__(self, base: float, cap: float) -> None:
        if base <= 0 or cap < base:
            raise ValueError(f"need 0 < base <= cap (got base={base}, cap={cap})")
        self.base = base
        self.cap = cap
        self._next = base

    def next(self) -> float:
        """The delay to use now; the following one doubles."""
        delay = self._next
        self._next = min(self.cap, delay * 2)
        return delay

    def reset(self) -> None:
        self._next = self.base


class CircuitBreaker:
    """Closed: Redis is used. Open: Redis is skipped until a probe succeeds.

    - :meth:`allow` is the per-request check: one attribute read, no lock.
    - The first failure while closed opens the circuit for ``base`` seconds. Failures of operations
      that were already in flight do not lengthen the backoff (a burst of 16 concurrent errors at
      the moment Redis dies is one outage, not 16).
    - When the backoff is over, :meth:`probe_due` returns True exactly once; the caller probes and
      reports with :meth:`record_success` (closes) or :meth:`record_failure` (reopens for the next,
      doubled, backoff).
    """

    def __init__(self, *, base: float = 0.1, cap: float = 5.0, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self._backoff = Backoff(base, cap)
        self._lock = threading.Lock()
        self._retry_at: float | None = None  # None: closed
        self._probing = False
        self._failures = 0  # since the circuit opened

    @property
    def closed(self) -> bool:
        return self._retry_at is None

    def allow(self) -> bool:
        """Whether a request may use Redis now."""
        return self._retry_at is None

    def probe_due(self) -> bool:
        """True once per backoff period, when the circuit is open and its backoff is over."""
        if self._retry_at is None or self._probing:
            return False
        with self._lock:
            if self._retry_at is None or self._probing or self._clock() < self._retry_at:
                return False
            self._probing = True
            return True

    def retry_in(self) -> float:
        """Seconds until the next probe (0 when closed or due)."""
        retry_at = self._retry_at
        return 0.0 if retry_at is None else max(0.0, retry_at - self._clock())

    def record_failure(self, *, probe: bool = False) -> bool:
        """Count a failed operation (``probe=True`` for a failed probe); True when it opened the
        circuit (a closed -> open transition)."""
        with self._lock:
            self._failures += 1
            if self._retry_at is None:
                self._retry_at = self._clock() + self._backoff.next()
                return True
            if probe:
                self._probing = False
                self._retry_at = self._clock() + self._backoff.next()
            return False

    def record_success(self) -> int:
        """Close the circuit; returns how many failures the outage had (0 if it was closed)."""
        if self._retry_at is None:
            return 0
        with self._lock:
            failures = self._failures if self._retry_at is not None else 0
            self._retry_at = None
            self._probing = False
            self._failures = 0
            self._backoff.reset()
            return failures


class ThrottledLog:
    """WARNINGs about one recurring problem, at most one per (doubling) quiet period.

    A flapping Redis (down, up, down...) must not restart the schedule on every recovery, so the
    quiet period only starts over after ``cap`` seconds without any error (a new incident), and
    the recovery INFO line is written only when a WARNING was written since the last one.
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        base: float = 1.0,
        cap: float = 30.0,
        clock: Clock = time.monotonic,
    ) -> None:
        self._log = logger
        self._clock = clock
        self._cap = cap
        self._backoff = Backoff(base, cap)
        self._lock = threading.Lock()
        self._next_at = 0.0
        self._last_error = -float("inf")
        self._suppressed = 0
        self._errors = 0  # since the last recovery line
        self._warned = False  # a WARNING was written since the last recovery line
        self.emitted = 0  # WARNING lines written (tests and tier stats read it)

    def warning(self, message: str) -> bool:
        """Log ``message`` now, or count it for the next line; True when it was logged."""
        with self._lock:
            now = self._clock()
            if now - self._last_error > self._cap:  # calm for a while: a new incident
                self._backoff.reset()
                self._next_at = 0.0
            self._last_error = now
            self._errors += 1
            if now < self._next_at:
                self._suppressed += 1
                return False
            suppressed, self._suppressed = self._suppressed, 0
            quiet = self._backoff.next()
            self._next_at = now + quiet
            self._warned = True
            self.emitted += 1
        extra = f" ({suppressed} similar errors suppressed)" if suppressed else ""
        self._log.warning("%s%s; next report in >= %.0f s", message, extra, quiet)
        return True

    def recovered(self, message: str) -> None:
        """Log ``message`` at INFO, with the error count, if a WARNING was written since the last
        recovery line."""
        with self._lock:
            if not self._warned:
                return
            errors, self._errors, self._warned = self._errors, 0, False
        self._log.info("%s after %d errors", message, errors)


_SETTLE_ROUNDS = 4  # loop iterations between a missed deadline and the cancellation

_SCHEDSTAT: dict[int, tuple[int, int]] = {}  # native thread id -> (pid, fd of its schedstat, or -1)
_SCHEDSTAT_MAX = 64


def runqueue_wait() -> float | None:
    """Seconds the calling thread has spent runnable but waiting for a CPU (Linux's
    ``/proc/self/task/<tid>/schedstat``; None where it cannot be read). The file stays open per
    thread (at most ``_SCHEDSTAT_MAX`` of them): one ``pread``, about a microsecond. Never raises:
    a deadline must not fail for want of a statistic."""
    tid = threading.get_native_id()
    pid = os.getpid()
    entry = _SCHEDSTAT.get(tid)
    if entry is None or entry[0] != pid:  # first use in this thread, or a forked child
        if len(_SCHEDSTAT) >= _SCHEDSTAT_MAX:  # threads come and go: never hold more files than this
            for _, old in _SCHEDSTAT.values():
                if old >= 0:
                    with contextlib.suppress(OSError):
                        os.close(old)
            _SCHEDSTAT.clear()
        try:
            fd = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
        except OSError:
            fd = -1
        entry = _SCHEDSTAT[tid] = (pid, fd)
    if entry[1] < 0:
        return None
    try:
        return int(os.pread(entry[1], 64, 0).split()[1]) / 1e9
    except (OSError, ValueError, IndexError):  # e.g. a reused thread id whose old task is gone
        with contextlib.suppress(OSError):
            os.close(entry[1])
        _SCHEDSTAT.pop(tid, None)
        return None


class StallTolerantTimeout:
    """``async with StallTolerantTimeout(budget):`` like ``asyncio.timeout(budget)``, except when the
    event loop ITSELF was stalled past the deadline.

    Why: a process's first requests (lazy imports, TLS setup), a GC pause or a CPU-starved host can
    block the loop for longer than a 50 ms budget. Redis answered in 0.2 ms and the reply is sitting
    in the socket, but a plain timeout fires first (timers run before the woken reader task), the
    operation "fails", the circuit opens, and every replica computes on its own for a while. So when
    the deadline callback runs more than ``stall_s`` late, or the loop's thread waited for a CPU for
    more than ``stall_s`` since the operation began (:func:`runqueue_wait`: on a busy host the loop
    is descheduled in slices of a few milliseconds, none late enough alone), the loop (not Redis)
    was slow: the deadline moves ``budget`` further, up to ``grace`` times. Otherwise the
    cancellation still waits a few loop iterations (microseconds), so a reply that has already
    arrived is read. A slow Redis still times out on time.
    """

    def __init__(self, budget: float, *, grace: int = 2, stall_s: float | None = None) -> None:
        self.budget = budget
        self.grace = grace
        self.stall_s = stall_s if stall_s is not None else max(0.005, budget / 4)
        self.extended = 0  # deadlines moved because of a stalled loop
        self._expired = False
        self._task: asyncio.Task[object] | None = None
        self._handle: asyncio.Handle | None = None
        self._cancelling = 0
        self._deadline = 0.0
        self._waited: float | None = None  # the thread's run-queue wait when last looked at

    async def __aenter__(self) -> StallTolerantTimeout:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("StallTolerantTimeout needs a running task")
        loop = asyncio.get_running_loop()
        self._task = task
        self._cancelling = task.cancelling()
        self._waited = runqueue_wait()
        self._deadline = loop.time() + self.budget
        self._handle = loop.call_at(self._deadline, self._on_deadline)
        return self

    def _on_deadline(self) -> None:
        assert self._task is not None
        loop = self._task.get_loop()
        now = loop.time()
        starved = 0.0
        if self._waited is not None:
            waited = runqueue_wait()
            if waited is not None:
                starved, self._waited = waited - self._waited, waited
        if (now - self._deadline > self.stall_s or starved > self.stall_s) and self.extended < self.grace:
            self.extended += 1
            self._deadline = now + self.budget
            self._handle = loop.call_at(self._deadline, self._on_deadline)
            return
        self._handle = loop.call_soon(self._expire, _SETTLE_ROUNDS)

    def _expire(self, rounds: int) -> None:
        """Cancel after a few more loop iterations: timers run before the I/O of their iteration
        is delivered, so an answer already in the socket gets these rounds to reach the task."""
        assert self._task is not None
        if rounds > 0:
            self._handle = self._task.get_loop().call_soon(self._expire, rounds - 1)
            return
        self._expired = True
        self._task.cancel()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
        # Our cancel is taken back whatever it surfaced as (uncancel() comes before the type test,
        # as in asyncio.timeout): redis-py may turn it into a ConnectionError on its way out, and
        # a cancel left counted would read as the caller's own later (RedisStore._run: cancelled).
        if (
            self._expired
            and self._task is not None
            and self._task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError(f"no answer within {self.budget * 1000:.0f} ms") from exc


__all__ = ["Backoff", "CircuitBreaker", "Clock", "StallTolerantTimeout", "ThrottledLog", "runqueue_wait"]
