"""A WARNING that repeats during an outage, written at most once per interval with a count.

Why: during an outage every guard call fails and retries, and one line per retry would flood the
log exactly when operators read it (hundreds of identical lines a second). The first line is written
at once, so an incident is visible immediately; the ones that follow within ``interval`` seconds are
only counted, and the next line written says how many were left out. The same idea as the Redis
tier's ``ThrottledLog`` (guardcache.cache.redis.health), without its doubling schedule: the client
has no recovery event to reset one, and a fixed interval is easier to read in a log.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable


class RateLimitedLog:
    """At most one record per ``interval`` seconds on ``logger``; thread-safe.

    The count of suppressed records is carried into the next written one (as
    ``"; N similar lines suppressed in the last S s"``); counts still pending when failures stop
    are dropped with the limiter, since there is nothing new to report.
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval < 0:
            raise ValueError(f"RateLimitedLog.interval must be >= 0, got {interval}")
        self.logger = logger
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._next_at = -float("inf")
        self._last_at = -float("inf")
        self._suppressed = 0
        self.emitted = 0  # records written (for tests and stats)

    def warning(self, message: str, *args: object) -> bool:
        """Log ``message % args`` at WARNING now, or count it; True when it was written."""
        return self.log(logging.WARNING, message, *args)

    def log(self, level: int, message: str, *args: object) -> bool:
        if not self.logger.isEnabledFor(level):
            return False
        with self._lock:
            now = self._clock()
            if now < self._next_at:
                self._suppressed += 1
                return False
            suppressed, self._suppressed = self._suppressed, 0
            since = now - self._last_at
            self._last_at = now
            self._next_at = now + self.interval
            self.emitted += 1
        if suppressed:
            message += "; %d similar lines suppressed in the last %.0f s"
            args = (*args, suppressed, since)
        self.logger.log(level, message, *args)
        return True


__all__ = ["RateLimitedLog"]
