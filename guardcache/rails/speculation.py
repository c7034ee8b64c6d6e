"""Starting the main model while the input checks run (``rails.input.during_main: true``).

On a miss the input checks cost a backend call each, and the main model could not start until they
were done: a miss turn paid input + main + output one after another. Here the main call starts the
moment a check of this turn goes to its backend (or joins another turn's backend call for the same
text, which it waits for just the same), so a miss turn costs about
max(input, main) + output. Nothing changes on a hit: every verdict is known before any backend call,
the signal never fires, and the main model starts after the verdict as usual.

A block cancels the main call: its connection is closed, its output is discarded and never reaches the
user or any cache; ``explain()`` lists it as a cancelled call with the time it ran. The trade: main
model tokens spent on turns that get blocked (measured in docs/performance.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from guardcache.checks.check import BACKEND_CALL_SIGNAL

T = TypeVar("T")
R = TypeVar("R")


async def run_with_early_start(
    checks: Callable[[], Awaitable[R]], main: Callable[[], Awaitable[T]]
) -> tuple[R, asyncio.Task[T] | None]:
    """Run ``checks``; if one of them starts a backend call before they are done, start ``main``
    alongside. Returns the checks' result and the main task (None when it was not started).

    The caller owns the task: await it for the answer or :func:`abandon` it on a block. If the
    checks raise (or this coroutine is cancelled), the main task is abandoned here.
    """
    missed = asyncio.Event()
    token = BACKEND_CALL_SIGNAL.set(missed.set)
    try:  # the task copies the context now, signal included; this context is restored at once
        running = asyncio.ensure_future(checks())
    finally:
        BACKEND_CALL_SIGNAL.reset(token)
    waiter = asyncio.ensure_future(missed.wait())
    started: asyncio.Task[T] | None = None
    try:
        await asyncio.wait((running, waiter), return_when=asyncio.FIRST_COMPLETED)
        if not running.done():  # a verdict is not known yet: a backend call is under way
            started = asyncio.ensure_future(main())
        result = await running
    except BaseException:
        running.cancel()
        if started is not None:
            await abandon(started)
        await asyncio.gather(running, return_exceptions=True)
        raise
    finally:
        waiter.cancel()
    return result, started


async def abandon(task: asyncio.Task[T]) -> None:
    """Cancel a started main call and wait until it has stopped (its connection closed)."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


__all__ = ["abandon", "run_with_early_start"]
