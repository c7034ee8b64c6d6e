"""The retry loop: a call's attempts, until one answers, a failure is final, or the wait before the
next one would pass the call's budget.

Why apart from the policy (:mod:`guardcache.llm.retry`, values that say whether and how long to
wait) and from the client (:mod:`guardcache.llm.client`, which sends one attempt): the loop is where
the three meet the budget (:mod:`guardcache.llm.budget`), and a wait that cannot end in time is not
started: waiting would only turn the last failure into a timeout later, so the call fails at once
with that failure, saying why it was not retried.

A retry writes a WARNING on the client's :class:`~guardcache.llm.logs.RateLimitedLog` (at most one
line per interval during an outage, the rest counted).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from guardcache.llm.budget import CallBudget
from guardcache.llm.failures import Failure, backend_error, wait_passes_budget
from guardcache.llm.logs import RateLimitedLog
from guardcache.llm.retry import RetryPolicy
from guardcache.llm.types import ChatResult

Attempt = Callable[[Mapping[str, Any], CallBudget], Awaitable[ChatResult | Failure]]
"""One HTTP request of a call: its result (duration not yet filled in) or a classified failure."""


async def run_attempts(
    attempt: Attempt,
    body: Mapping[str, Any],
    call: CallBudget,
    retry: RetryPolicy,
    sleep: Callable[[float], Awaitable[None]],
    log: RateLimitedLog,
    url: str,
    model: str,
    first: ChatResult | Failure | None = None,
) -> ChatResult:
    """Send ``body`` by ``attempt`` until it answers; the result's ``duration`` covers every attempt
    and wait since ``call.started``, its ``attempts`` how many were sent. ``first``: the outcome of
    the first attempt when the caller sent it (``call.attempts`` already counts it).

    Raises:
        BackendError: the last failure's typed error (see :mod:`guardcache.llm.failures`), when it
            is not retryable, the attempts are used up, or the next wait would pass the budget.
    """
    max_attempts = retry.max_retries + 1
    while True:
        if first is not None:
            outcome, first = first, None
        else:
            call.attempts += 1
            outcome = await attempt(body, call)
        if isinstance(outcome, ChatResult):
            return ChatResult(  # positional: a frozen dataclass costs twice as much from keywords
                outcome.content,
                outcome.usage,
                time.monotonic() - call.started,
                outcome.finish_reason,
                call.attempts,
                outcome.tool_calls,
            )
        failure = outcome
        call.last_reason = failure.reason
        if not failure.retryable or call.attempts >= max_attempts:
            raise backend_error(failure, call.attempts, url) from failure.cause
        if failure.retry_after is not None:
            # Compared as the server sent it: a server that will not serve before the
            # deadline is not asked again (cutting its wait only buys another refusal).
            wait = failure.retry_after
            delay = retry.retry_after_delay(wait)
        else:
            wait = delay = retry.backoff_delay(call.attempts - 1)
        if call.end is not None:
            left = call.end - time.monotonic()
            if wait >= left:
                note = wait_passes_budget(failure, wait, left, call)
                raise backend_error(failure, call.attempts, url, note) from failure.cause
        log.warning(
            "LLM call to %s (model %s) failed: %s; attempt %d of %d, retrying in %.3f s",
            url,
            model,
            failure.reason,
            call.attempts,
            max_attempts,
            delay,
        )
        call.phase = "waiting to retry"
        await sleep(delay)


__all__ = ["Attempt", "run_attempts"]
