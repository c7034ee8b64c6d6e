"""How big TinyLFU's window should be: a hill climber on the hit rate, after Caffeine's.

Why climb: a small window suits traffic whose popular keys stay popular (the admission filter keeps
one-off keys out of main), a large one suits traffic whose keys are asked for a few times in a short
while and then no more (sessions, retries: they need to be held on recency alone, as an LRU would).
Which one a cache sees is only known by trying: each period the climber compares the period's hit
rate with the last measured one and keeps moving the window the same way while that pays, turns
round when it does not.

Caffeine's climber, with two changes that ``benchmarks/bench_policy.py`` and a session-shaped trace
(keys asked for four times within a few thousand requests) decided:

- the period after a move is not measured (it mixes the old size and the new one, and its change
  read as noise turned the climber round half the time: on the session trace at 10,000 entries the
  window oscillated between 0 and 12% for 42% hits; measured every other period it grew to ~50%,
  48%, near LRU's 51%);
- a step that paid is followed by a larger one (x1.5, up to a quarter of the capacity), so a window
  that must cross half the capacity does it in a few periods rather than a dozen. A step that did
  not pay turns round, shrunk x0.98 as in Caffeine, and a change of the hit rate by 5 points (the
  traffic changed) restarts at the first step.
"""

from __future__ import annotations


class HillClimber:
    """The window's moves, one decision per period (see the module doc)."""

    __slots__ = (
        "accel",
        "capacity",
        "decay",
        "first",
        "last_rate",
        "max_step",
        "restart",
        "settling",
        "step",
    )

    def __init__(
        self,
        capacity: int,
        *,
        step: float = 0.0625,
        accel: float = 1.5,
        max_step: float = 0.25,
        decay: float = 0.98,
        restart: float = 0.05,
    ) -> None:
        self.capacity = capacity
        self.first = step * capacity  # entries
        self.accel = accel
        self.max_step = max_step * capacity
        self.decay = decay
        self.restart = restart
        self.last_rate = 0.0
        self.step = -self.first  # as Caffeine, the first move shrinks the window
        self.settling = False

    def adjust(self, hits: int, misses: int) -> int:
        """The window's change (entries; negative shrinks it) after a period of ``hits`` and
        ``misses``: 0 for a period that is not measured."""
        total = hits + misses
        if self.settling or not total:
            self.settling = False
            return 0
        rate = hits / total
        change = rate - self.last_rate
        amount = self.step if change >= 0 else -self.step
        if abs(change) >= self.restart:
            step = self.first if amount >= 0 else -self.first
        elif change >= 0:
            step = max(-self.max_step, min(self.max_step, self.accel * amount))
        else:
            step = self.decay * amount
        self.step = step
        self.last_rate = rate
        moved = int(amount)
        self.settling = moved != 0
        return moved


__all__ = ["HillClimber"]
