"""Single flight: concurrent askers of one key share ONE computation.

Askers may be asyncio tasks on one loop, tasks on other loops (other threads), or plain threads. The
shared result lives in a ``concurrent.futures.Future`` (thread-safe); each event loop gets ONE asyncio
view of it, which all askers on that loop await through ``asyncio.shield``.

Rules the tests pin down:
- The computation runs in its own task, not inside the first asker, so cancelling any asker (the
  first included) never cancels the work for the others.
- When the LAST async asker leaves, the computation is cancelled: nobody wants it, and a cancelled
  call is never stored. An asker that was not itself cancelled but finds the shared computation
  cancelled (a race with the last leaver, or the leader's loop shutting down) starts over, so a key is
  never left stuck and nobody hangs.
- An exception reaches every asker and nothing is stored.

The host (a cache) supplies ``lookup``/``store`` and a list to count in (which its recorder reads,
see :mod:`~guardcache.cache.recorder`); all of them are used under the host's lock, which is held
only for dictionary updates: computations, awaits and future callbacks run outside it.

Counted here: a stored value is a hit; the asker that starts a computation counts a miss, the askers
that join it a hit each and, apart, a ``coalesced``; every computation ends as a load success (stored,
in the same critical section) or a load failure (an exception or a cancellation), with the time it
took. A host that counts nothing passes no list: then no clock is read either.

Each call answers ``(value, loaded)``: ``loaded`` is True for the asker whose own ``compute_fn`` ran
(it paid for the computation, whether or not it succeeded), False for a hit or a joined asker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from guardcache.cache.interface import MISSING, ComputeFn
from guardcache.cache.recorder import (
    COALESCED,
    HITS,
    LOAD_FAILURE,
    LOAD_SUCCESS,
    LOAD_TIME_NS,
    MISSES,
    Counts,
)

_ns = time.perf_counter_ns


class _Call:
    """One in-flight computation."""

    __slots__ = ("future", "loop", "loop_futures", "task", "waiters")

    def __init__(self) -> None:
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.waiters = 0
        self.task: asyncio.Task[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_futures: dict[asyncio.AbstractEventLoop, asyncio.Future[Any]] = {}


class SingleFlight:
    """Coalesces concurrent computations per key for one host cache."""

    def __init__(
        self,
        lock: threading.RLock,
        lookup: Callable[[Hashable], Any],
        store: Callable[[Hashable, Any], None],
        counts: Counts | None,
    ) -> None:
        self._lock = lock
        self._lookup = lookup  # the stored value (an access), or MISSING; counts nothing
        self._store = store
        self._counts = counts  # None: the host's recorder is disabled, count nothing
        self._calls: dict[Hashable, _Call] = {}

    def in_flight(self) -> int:
        """How many computations are running now."""
        with self._lock:
            return len(self._calls)

    def hit(self, key: Hashable) -> Any:
        """The stored value, counted as a hit (as :meth:`_join` counts one), or ``MISSING``
        counting nothing: for a caller that asks :meth:`get_or_load` on a miss (which counts it),
        so a hit needs no coroutine."""
        with self._lock:
            value = self._lookup(key)
            if value is not MISSING and self._counts is not None:
                self._counts[HITS] += 1
            return value

    def _join(self, key: Hashable) -> tuple[Any, _Call | None, bool]:
        """Under the lock: (stored value, None, False) or (MISSING, call, is_leader)."""
        with self._lock:
            counts = self._counts
            value = self._lookup(key)
            if value is not MISSING:
                if counts is not None:
                    counts[HITS] += 1
                return value, None, False
            call = self._calls.get(key)
            leader = call is None
            if call is None:
                call = self._calls[key] = _Call()
                if counts is not None:
                    counts[MISSES] += 1
            elif counts is not None:
                counts[HITS] += 1
                counts[COALESCED] += 1
            call.waiters += 1
            return MISSING, call, leader

    def _finish(
        self, key: Hashable, call: _Call, value: Any, exc: BaseException | None, started_ns: int
    ) -> None:
        elapsed_ns = _ns() - started_ns if started_ns else 0
        with self._lock:
            if exc is None:
                self._store(key, value)
            if self._calls.get(key) is call:
                del self._calls[key]
            counts = self._counts
            if counts is not None:
                counts[LOAD_SUCCESS if exc is None else LOAD_FAILURE] += 1
                counts[LOAD_TIME_NS] += elapsed_ns
        if exc is None:
            call.future.set_result(value)
        elif isinstance(exc, asyncio.CancelledError | concurrent.futures.CancelledError):
            call.future.cancel()
        else:
            call.future.set_exception(exc)

    async def _run(self, key: Hashable, call: _Call, compute_fn: ComputeFn) -> None:
        started = _ns() if self._counts is not None else 0  # no clock reads when not counting
        try:
            result = compute_fn()
            if inspect.isawaitable(result):
                result = await result
        except asyncio.CancelledError as exc:
            self._finish(key, call, None, exc, started)
            raise
        except Exception as exc:
            self._finish(key, call, None, exc, started)
        except BaseException as exc:  # KeyboardInterrupt and friends still free the key
            self._finish(key, call, None, exc, started)
            raise
        else:
            self._finish(key, call, result, None, started)

    def _leave(self, call: _Call) -> None:
        """An async asker was cancelled: cancel the work when nobody is left waiting for it."""
        with self._lock:
            call.waiters -= 1
            abandon = call.waiters == 0 and not call.future.done()
        task, loop = call.task, call.loop
        if not abandon or task is None or loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            task.cancel()
        elif not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)

    async def get_or_load(
        self, key: Hashable, compute_fn: ComputeFn, default: Any = MISSING
    ) -> tuple[Any, bool]:
        """``(value, loaded)``: the stored value, or the shared result of one ``compute_fn()`` (see
        the module doc)."""
        loop = None
        while True:
            value, call, leader = self._join(key)
            if call is None:
                return value, False  # a hit: no loop lookup, no task, no future
            if loop is None:
                loop = asyncio.get_running_loop()
            if leader:
                call.loop = loop
                call.task = loop.create_task(self._run(key, call, compute_fn))
            view = call.loop_futures.get(loop)
            if view is None:
                view = call.loop_futures[loop] = asyncio.wrap_future(call.future, loop=loop)
            try:
                return await asyncio.shield(view), leader
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if view.cancelled() and not (current and current.cancelling()):
                    continue  # the shared work was cancelled under us: start over
                self._leave(call)
                raise
            except Exception:
                if default is not MISSING:
                    return default, leader
                raise

    def get_or_load_sync(
        self, key: Hashable, compute_fn: Callable[[], Any], default: Any = MISSING
    ) -> tuple[Any, bool]:
        """Blocking flavour for threads; joins async computations of other loops too."""
        while True:
            value, call, leader = self._join(key)
            if call is None:
                return value, False
            if leader:
                started = _ns() if self._counts is not None else 0
                try:
                    result = compute_fn()
                    if inspect.isawaitable(result):
                        close = getattr(result, "close", None)
                        if close:
                            close()
                        raise TypeError(
                            "get_or_compute_sync needs a plain function; "
                            "await get_or_compute() for coroutine functions"
                        )
                except BaseException as exc:
                    self._finish(key, call, None, exc, started)
                    if default is not MISSING and isinstance(exc, Exception):
                        return default, True
                    raise
                self._finish(key, call, result, None, started)
                return result, True
            self._refuse_self_deadlock(call)
            try:
                return call.future.result(), False
            except concurrent.futures.CancelledError:
                continue
            except Exception:
                if default is not MISSING:
                    return default, False
                raise

    @staticmethod
    def _refuse_self_deadlock(call: _Call) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            return
        if running is call.loop:
            raise RuntimeError(
                "get_or_compute_sync would block the event loop that runs the computation; "
                "use 'await cache.get_or_compute(...)' inside a coroutine"
            )


__all__ = ["SingleFlight"]
