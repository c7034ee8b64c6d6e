"""A clock a test moves by hand: what the caches, the Redis tier's breaker and the log limiter take
as ``clock=``, so that no test sleeps to see time pass."""

from __future__ import annotations


class FakeClock:
    """Seconds that move only when the test says so (``advance``, or setting ``now``)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
