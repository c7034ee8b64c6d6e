"""A guarded turn read piece by piece: :meth:`LLMRails.stream_async` and ``guardcache serve``'s streams.

A :class:`GuardedStream` is a :class:`~guardcache.rails.runner.GuardedTurn` (what the user receives,
and when, is the turn's: see :mod:`guardcache.rails.runner`) with an async iterator as its face.
Iterating starts the turn in a task of its own (so its records are its own, whoever iterates),
which hands each piece to the iterator through a queue. :meth:`GuardedStream.complete` runs it in
the calling task instead, with no task and no queue, for a caller that wants the reply whole.

Close the stream (``aclose()``, or ``async with``) when abandoning it early: that cancels the turn
and the main call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

from guardcache.rails.messages import Message
from guardcache.rails.runner import GuardedTurn, TurnRunner
from guardcache.rails.speculation import abandon


class GuardedStream(GuardedTurn):
    """An async iterator of the reply's text pieces; after it ends, the turn's record.

    Made as a :class:`GuardedTurn` (the same arguments and attributes: ``blocked``, ``rail``,
    ``turn``, ``usage``, ``finish_reason``, ``first_piece_at``), but streaming the main model by
    default. Ends (``StopAsyncIteration``) after the last piece; an error of the turn (a
    ``BackendError`` of the main model) is raised where the iteration stands.
    """

    __slots__ = ("_closed", "_ended", "_error", "_queue", "_task")

    def __init__(
        self,
        runner: TurnRunner,
        messages: Sequence[Message],
        params: Mapping[str, Any] | None = None,
        *,
        stream_main: bool | None = True,
        defer_shadow: bool = False,
    ) -> None:
        super().__init__(runner, messages, params, stream_main=stream_main, defer_shadow=defer_shadow)
        # The pieces for the reader, then None (the end). Made when iteration starts.
        self._queue: asyncio.Queue[str | None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._ended = False  # the turn is over without an error: only the end is left to read
        self._error: BaseException | None = None  # what ended the turn, raised at the end

    # -- iteration -------------------------------------------------------------------------------

    def __aiter__(self) -> GuardedStream:
        return self

    async def __anext__(self) -> str:
        if self._closed:
            raise StopAsyncIteration
        queue = self._queue
        if queue is None:
            queue = self._queue = asyncio.Queue()
            self._task = asyncio.create_task(self._produce(queue))
        item = await queue.get()
        if item is None:
            queue.put_nowait(None)  # later calls end the same way
            if self._error is not None:
                raise self._error
            raise StopAsyncIteration
        return item

    def ready(self) -> str:
        """The text pieces already produced and not yet read, joined ("" if none), without waiting:
        a server can send them in one write instead of one per piece."""
        pieces: list[str] = []
        queue = self._queue
        if queue is None:
            return ""
        while not queue.empty():
            item = queue.get_nowait()
            if item is None:
                queue.put_nowait(None)  # the last item: the queue is empty again behind it
                break
            pieces.append(item)
        return "".join(pieces)

    async def text(self) -> str:
        """The whole reply (iterates the stream)."""
        return "".join([piece async for piece in self])

    async def complete(self) -> str:
        """Run the whole turn in the calling task and return the reply's text; errors are raised.

        For a caller that wants the reply in one piece: no producer task and no hand-off per
        piece (measured in ``guardcache serve`` at 100% hits, cProfile self time: asyncio's queue
        and task functions were 5.1% of the server's CPU per plain request, most of it this
        hand-off). Falls back to iterating when iteration already started.
        """
        if self._task is not None or self._closed:
            return await self.text()
        self._closed = True  # nothing is iterated from here on; aclose() has nothing to cancel
        return await super().complete()

    async def aclose(self) -> None:
        """Stop the turn: cancel it and the main call if still running; iteration ends."""
        self._closed = True
        task = self._task
        if task is not None and not task.done():
            await abandon(task)

    async def __aenter__(self) -> GuardedStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    @property
    def ended(self) -> bool:
        """Whether everything was read but the end, which is not an error: the turn is over and the
        next step of the iteration is ``StopAsyncIteration``. A server can then write the last
        events together with the text it has."""
        return self._ended and self._queue is not None and self._queue.qsize() == 1

    async def _produce(self, queue: asyncio.Queue[str | None]) -> None:
        """The turn, in its own task: its pieces into ``queue``, then None (the end)."""
        error: BaseException | None = None
        try:
            await self.run(queue.put_nowait)
        except asyncio.CancelledError:
            error = RuntimeError("the guarded stream was closed before it ended")
            raise
        except BaseException as exc:
            error = exc
        finally:
            self._ended = error is None
            self._error = error
            queue.put_nowait(None)


__all__ = ["GuardedStream"]
