"""A call's time budget: one bound over the whole call, and the phase timeouts inside it.

Why one budget: a guard check sits on the user's critical path, and a timeout that bounds one phase
of one attempt does not bound the check: a 429 asking for 30 s, a server dripping a byte a second or
a connect that is never accepted each held a check for 6-20 s at ``timeout: 2``. So a call runs
under one timeout (``llm/cancel.py``, a lean ``asyncio.timeout``, entered by
:meth:`~guardcache.llm.client.ChatClient.send`) that covers queueing for a connection, every attempt,
backoff and Retry-After waits, and slow bodies, and a wait that could not end in time is not started:
the call fails at once (:mod:`guardcache.llm.attempts`). The phase timeouts only classify a failure
early (a connect timeout is retried, a read timeout is not).

This module decides the numbers and keeps where a call stands (:class:`CallBudget`); the messages of
a call that ran out are :mod:`guardcache.llm.failures`'.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from guardcache.llm.transport_contract import Timeouts

if TYPE_CHECKING:
    import httpx2

DEFAULT_TIMEOUT = Timeouts(connect=2.0, read=10.0, write=5.0, pool=5.0)
"""Phase timeouts of a guard call, in seconds; the whole call is bounded by its read timeout (10 s).

connect 2 s: a backend on the same network connects in milliseconds; 2 s waiting for a handshake
means it is down, and failing fast lets the rail's ``on_error`` policy act. read 10 s: a verdict is
~10-30 output tokens (~0.1-0.2 s on a GPU, ~1.5 s on a small CPU server), so 10 s only trips on a
stuck or badly overloaded server. write 5 s: the request is a few KB. pool: not used while a
budget bounds the call (queueing for a connection is bounded by the budget instead); kept for a
client built with a read timeout of None.
"""

DEFAULT_CONNECT_TIMEOUT = 2.0
"""The connect phase when the timeout is one number: a dead host fails within it, and a budget
longer than it leaves time to retry the connect (see :data:`DEFAULT_TIMEOUT`)."""


def phase_timeouts(total: float | None) -> Timeouts:
    """Phase timeouts inside a whole-call budget of ``total`` seconds (None: no limits).

    The phases only classify a failure early (a connect timeout is retried, a read timeout is
    not); the budget itself is enforced around the whole call.
    """
    if total is None:
        return Timeouts()
    return Timeouts(connect=min(DEFAULT_CONNECT_TIMEOUT, total), read=total, write=total, pool=None)


def client_timeouts(
    timeout: Timeouts | httpx2.Timeout | float | None, deadline_s: float | None
) -> tuple[Timeouts, float | None]:
    """A client's phase timeouts and whole-call budget (seconds; None: unbounded) from its
    ``timeout`` and ``deadline_s`` arguments (see :class:`~guardcache.llm.client.ChatClient`).

    Raises:
        ValueError: a timeout or deadline that is not > 0 (checked at construction: start-up, not
            the first user request).
    """
    if isinstance(timeout, int | float) and not isinstance(timeout, bool):
        if not timeout > 0:
            raise ValueError(f"ChatClient: timeout must be > 0 seconds, got {timeout}")
        phases = phase_timeouts(float(timeout))
        implied: float | None = float(timeout)
    else:
        phases = Timeouts.of(timeout)
        implied = phases.read
    if deadline_s is not None and not deadline_s > 0:
        raise ValueError(f"ChatClient: deadline_s must be > 0 seconds, got {deadline_s}")
    budget = deadline_s if deadline_s is not None else implied
    if budget is not None:
        # Queueing for a connection is bounded by the call's budget, like everything else; a
        # separate pool timeout would fail a burst that could still be served in time.
        phases = dataclasses.replace(phases, pool=None)
    return phases, budget


@dataclass(slots=True)
class CallBudget:
    """Where one call stands within its budget, so that an overrun can say where it hit."""

    started: float
    end: float | None  # time.monotonic() by which the call must be over; None: unbounded
    own_budget: float | None  # the client's deadline_s when it set ``end``; None: the caller's deadline
    attempts: int = 0
    phase: str = "starting"
    last_reason: str | None = None  # the last failed attempt's, for the overrun message

    @property
    def described(self) -> str:
        """The bound in words, for messages (built only when one is written)."""
        if self.own_budget is not None:
            return f"this call's {self.own_budget:g} s budget (timeout)"
        if self.end is None:
            return "no budget"
        return f"the caller's deadline ({self.end - self.started:.3g} s away at the start)"


def bound(started: float, deadline: float | None, deadline_s: float | None) -> CallBudget:
    """The budget of a call started at ``started``: the earlier of the caller's absolute
    ``deadline`` and the client's own ``deadline_s`` from now (either may be None)."""
    if deadline_s is not None:
        own = started + deadline_s
        if deadline is None or own <= deadline:
            return CallBudget(started, own, deadline_s)
    return CallBudget(started, deadline, None)


__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "CallBudget",
    "bound",
    "client_timeouts",
    "phase_timeouts",
]
