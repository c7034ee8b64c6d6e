"""When and how long the LLM client waits before trying again.

A guard call sits on the critical path of every user request, so the policy is tuned for latency,
not for eventual success at any cost: few retries, short backoff, and timeouts of a slow server are
NOT retried by default (see :attr:`RetryPolicy.retry_read_timeouts`).
"""

from __future__ import annotations

import email.utils
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

DEFAULT_RETRY_STATUSES: frozenset[int] = frozenset({429, 500, 502, 503, 504})
"""Statuses that say "try again": overload (429, 503), gateway trouble (502, 504), crashes (500)."""

RETRY_AFTER_STATUSES: frozenset[int] = frozenset({429, 503})
"""Statuses whose ``Retry-After`` header is honoured (RFC 9110 defines it for these)."""


@dataclass(slots=True, frozen=True)
class RetryPolicy:
    """Exponential backoff with FULL jitter, bounded in count and in delay.

    Retry ``n`` (0-based) waits ``uniform(0, cap(n))`` seconds, where
    ``cap(n) = min(backoff_max, backoff_initial * backoff_multiplier**n)``; but when the server
    sent a ``Retry-After`` with a 429 or 503, that delay is honoured instead, cut to
    ``max_retry_after``.

    Why full jitter rather than decorrelated jitter: both spread a herd of clients that failed at
    the same moment (a backend restart fails every in-flight guard call at once), and AWS's
    comparison found them close in total work. Full jitter is stateless (the delay depends only on
    ``n``), so its bounds are trivial to state and to test, and its expected delay is half the
    exponential one, which matters on a latency-critical path. ``jitter=False`` waits ``cap(n)``
    exactly (deterministic tests; rarely what production wants).

    Attributes:
        max_retries: retries after the first attempt; 2 means at most 3 HTTP requests.
        backoff_initial: the cap of the first retry's delay, in seconds.
        backoff_max: no backoff delay exceeds this, in seconds.
        backoff_multiplier: growth of the cap per retry.
        jitter: draw the delay uniformly in ``[0, cap]`` (True) or wait the cap itself (False).
        retry_on_status: HTTP statuses that are retried. Other 4xx are never retried: the same
            request would fail the same way (a 401 stays a 401).
        max_retry_after: the longest ``Retry-After`` honoured, in seconds; longer values are cut
            to it, so a server asking for a minute cannot stall a user request for a minute. The
            call's budget comes first: when the server's own value is longer than the time left,
            the call fails at once rather than retrying early (see ``ChatClient.complete``).
        retry_connect_errors: retry when the connection could not be made (refused, DNS, connect
            timeout) or was dropped before a response (a stale keep-alive connection the server had
            closed). Safe: the server never produced an answer, and a completion has no side effect.
        retry_read_timeouts: retry when the server accepted the request but did not answer in
            time (read/write timeout). Off by default: a server that timed out once is usually
            overloaded, a retry adds another full read timeout to the user's wait (10 s -> 20 s+)
            and more load to the server that is already behind, and the first request may still be
            running there. A rail that times out decides by its ``on_error`` policy instead.
    """

    max_retries: int = 2
    backoff_initial: float = 0.05
    backoff_max: float = 2.0
    backoff_multiplier: float = 2.0
    jitter: bool = True
    retry_on_status: frozenset[int] = field(default=DEFAULT_RETRY_STATUSES)
    max_retry_after: float = 5.0
    retry_connect_errors: bool = True
    retry_read_timeouts: bool = False

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"RetryPolicy.max_retries must be >= 0, got {self.max_retries}")
        if self.backoff_initial < 0 or self.backoff_max < 0 or self.max_retry_after < 0:
            raise ValueError(
                "RetryPolicy delays (backoff_initial, backoff_max, max_retry_after) must be >= 0"
            )
        if self.backoff_multiplier < 1:
            raise ValueError(f"RetryPolicy.backoff_multiplier must be >= 1, got {self.backoff_multiplier}")
        # Accept any iterable of ints (a set literal in a config) but store it frozen.
        object.__setattr__(self, "retry_on_status", frozenset(self.retry_on_status))

    def backoff_cap(self, retry_index: int) -> float:
        """The upper bound of the delay before retry ``retry_index`` (0-based), in seconds."""
        cap = self.backoff_initial
        for _ in range(retry_index):  # iterative, so a huge index cannot overflow a float power
            if cap >= self.backoff_max:
                break
            cap *= self.backoff_multiplier
        return min(cap, self.backoff_max)

    def backoff_delay(self, retry_index: int, rand: Callable[[], float] = random.random) -> float:
        """The delay before retry ``retry_index`` (0-based) when the server gave no Retry-After.

        ``rand`` returns a float in ``[0, 1)``; inject it to make the jitter deterministic.
        """
        cap = self.backoff_cap(retry_index)
        return cap * rand() if self.jitter else cap

    def retry_after_delay(self, retry_after: float) -> float:
        """A server-requested delay, cut to ``max_retry_after`` (and never negative)."""
        return min(max(retry_after, 0.0), self.max_retry_after)


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait according to a ``Retry-After`` header, or None when absent or unreadable.

    The header is either delay-seconds (``"3"``; fractional values are accepted because some
    servers send them) or an HTTP date (``"Wed, 21 Oct 2015 07:28:00 GMT"``). A date in the past
    means "now" (0). ``now`` is for tests.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if math.isnan(seconds) or math.isinf(seconds):
            return None
        return max(seconds, 0.0)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT; a zone-less one is read as UTC
        when = when.replace(tzinfo=UTC)
    reference = now if now is not None else datetime.now(UTC)
    return max((when - reference).total_seconds(), 0.0)


__all__ = ["DEFAULT_RETRY_STATUSES", "RETRY_AFTER_STATUSES", "RetryPolicy", "parse_retry_after"]
