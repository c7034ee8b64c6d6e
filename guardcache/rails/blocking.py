"""``RunnableRails``' blocking calls (``invoke``, ``stream``, ``batch``) on a private event loop of
their own: LangChain's sync API must work in plain code and in a notebook (a thread already running a
loop, where ``asyncio.run`` cannot), and each call closes the connections it opened, as
``LLMRails.generate()`` does.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Coroutine
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, TypeVar

from guardcache.rails.runner import TurnRunner

T = TypeVar("T")


class BlockingLoop:
    """Runs a blocking call's coroutines on one private event loop, in this thread; in a worker
    thread when this thread already runs a loop (a notebook), where ``asyncio.run`` cannot. On
    close, the loop's connections are closed, as ``LLMRails.generate()`` does."""

    def __init__(self, rails: TurnRunner) -> None:
        self._rails = rails
        self._loop = asyncio.new_event_loop()
        self._worker: ThreadPoolExecutor | None = None
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="guardcache-runnable")

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._worker is None:
            return self._loop.run_until_complete(coro)
        context = contextvars.copy_context()  # the caller's (LangChain's run config among them)
        return self._worker.submit(context.run, self._loop.run_until_complete, coro).result()

    def close(self) -> None:
        try:
            self.run(self._rails.aclose(flush=False))
            self.run(self._loop.shutdown_asyncgens())
        finally:
            if self._worker is None:
                self._loop.close()
            else:
                self._worker.submit(self._loop.close).result()
                self._worker.shutdown()

    def __enter__(self) -> BlockingLoop:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


DONE = object()


async def next_or_done(iterator: AsyncIterator[T]) -> T | object:
    try:
        return await iterator.__anext__()
    except StopAsyncIteration:
        return DONE


__all__ = ["DONE", "BlockingLoop", "next_or_done"]
