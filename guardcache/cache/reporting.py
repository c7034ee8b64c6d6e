"""The stats line written on access, as NeMo Guardrails' cache writes it: the clock and the wrapped
hot paths. (The other way, a reporter thread, is :class:`~guardcache.cache.stats.StatsReporter`.)

Only caches with an interval and no reporter get the wrapped hot paths (~one clock read and a frame
more per call); the others keep their policy's bare closures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import Any

from guardcache.cache.policy import HotPaths


class LineClock:
    """When a cache that logs on access last wrote its stats line (``time.time()`` seconds)."""

    __slots__ = ("interval", "last")

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.last = time.time()


def with_line_check(hot: HotPaths, clock: LineClock, due: Callable[[float], None]) -> HotPaths:
    """``get`` and ``put`` that first call ``due(now)`` once ``clock.interval`` has passed since
    ``clock.last`` (or the clock went back), as NeMo Guardrails' cache does on every call.

    ``time.time`` is looked up on each call, not bound here, so that a test's ``patch("time.time")``
    drives the schedule as it does NeMo's.
    """
    get, put, counts = hot.get, hot.put, hot.counts
    wall = time

    def checked_get(key: Hashable, default: Any = None) -> Any:
        now = wall.time()
        if not 0.0 <= now - clock.last < clock.interval:
            due(now)
        return get(key, default)

    def checked_put(key: Hashable, value: Any) -> None:
        now = wall.time()
        if not 0.0 <= now - clock.last < clock.interval:
            due(now)
        put(key, value)

    return HotPaths(checked_get, checked_put, counts)


__all__ = ["LineClock", "with_line_check"]
