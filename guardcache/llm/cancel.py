"""``async with CancelAfter(seconds):``: ``asyncio.timeout`` for the hot paths that enter one per call.

Every guarded turn that reaches a backend enters one (the call's budget, ``ChatClient.send``), and
``guardcache serve`` one more while a request body is on its way. ``asyncio.timeout`` costs about five
times this per enter and exit (it looks the running loop up three times, each a ``getpid`` system
call in CPython 3.11, and keeps a state machine that supports rescheduling); here one lookup, one
timer, one flag. What it keeps of asyncio's: the cancellation it made becomes ``TimeoutError`` at the
exit only when it is what stopped the block, and a cancellation from outside (or nested inside, from
an enclosing scope) goes on as a cancellation, counted by ``Task.cancelling()`` as asyncio counts it.
What it leaves out: moving the deadline once entered.

It awaits nothing, so it is also a plain context manager: ``with CancelAfter(seconds):`` inside a
task does the same without the two coroutines ``async with`` makes per enter and exit (the client's
budget enters it on every backend call).
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class CancelAfter:
    """Cancel the task inside the block after ``seconds``; the exit turns that into ``TimeoutError``.

    :meth:`expired` tells a ``TimeoutError`` this scope raised from one raised inside it.
    """

    __slots__ = ("_cancelling", "_expired", "_handle", "_seconds", "_task")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._expired = False
        self._handle: asyncio.TimerHandle | None = None

    def expired(self) -> bool:
        """Whether the time ran out (the block was cancelled by this scope)."""
        return self._expired

    def __enter__(self) -> CancelAfter:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("CancelAfter must be entered inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._handle = task.get_loop().call_later(self._seconds, self._expire)
        return self

    async def __aenter__(self) -> CancelAfter:
        return self.__enter__()

    def _expire(self) -> None:
        self._expired = True
        self._task.cancel()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        handle = self._handle
        if handle is not None:
            handle.cancel()
            self._handle = None
        if self._expired and self._task.uncancel() <= self._cancelling and kind is asyncio.CancelledError:
            raise TimeoutError from exc

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(kind, exc, tb)


__all__ = ["CancelAfter"]
