"""One guarded turn whose answer is streamed: :meth:`LLMRails.stream_async` and ``guardcache serve``.

What the user receives, in order:

1. **Nothing before the input verdict.** The input rails run first. With
   ``rails.input.during_main: true`` the main model may start while they run (on a check miss), but
   what it streams is buffered until the verdict; a block cancels it and only the refusal is sent.
2. **The answer, checked as the config says:**
   - no output rails: the main model's deltas as they arrive;
   - output rails, ``rails.output.streaming.enabled: false`` (the default): the whole answer is
     collected and checked once, then sent (or the refusal instead), as ``generate_async`` does;
   - ``rails.output.streaming.enabled: true``: the deltas are grouped into chunks of ``chunk_size``
     tokens (one streamed delta is one token, as in NeMo); each chunk is checked as
     ``bot_response`` together with up to ``context_size`` tokens before it (the window), through
     the same cached checks as any other (a window repeated by many users is one backend call).
     With ``stream_first: false`` (guardcache's default) a chunk is sent once its window passed;
     with ``stream_first: true`` it is sent first and checked after (NeMo's default: less latency,
     but a block then ends a stream whose earlier text the user has seen). The model keeps
     streaming into a buffer while a window is checked. The last, shorter chunk is checked too,
     and an empty answer is checked once as it is.
3. **A block mid-stream ends the stream with the refusal**: the main call is cancelled (its
   connection closed), the refusal is the last text, :attr:`GuardedStream.blocked` says
   ``"output"`` and :attr:`GuardedStream.rail` names the rail.

The turn runs in its own task (so its per-request records are its own, whoever iterates) and
hands text to the iterator through a queue. Close the stream (``aclose()``, or ``async with``) when
abandoning it early: that cancels the turn and the main call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from guardcache.checks.verdict import RailResult
from guardcache.llm.records import LLMCallInfo, record_call, request_scope
from guardcache.llm.types import Usage
from guardcache.rails.main_llm import ClientLLM, StreamTotals
from guardcache.rails.messages import Message, history, last_index
from guardcache.rails.speculation import abandon, run_with_early_start
from guardcache.rails.turn import CheckResult, TurnInfo

if TYPE_CHECKING:
    from guardcache.rails.llmrails import LLMRails

NO_USAGE = Usage(0, 0, 0, 0)


class _End:
    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class GuardedStream:
    """An async iterator of the reply's text pieces; after it ends, the turn's record.

    Attributes (final once iteration ended):
        blocked: ``"input"``, ``"output"`` or None.
        rail: the flow that blocked, if any.
        turn: the :class:`TurnInfo` of this turn (also what ``rails.explain()`` returns after it).
        usage: the main model's usage (None when it did not run or reported none).
        finish_reason: the main model's (``"content_filter"`` when a rail blocked).
        first_piece_at: ``time.monotonic()`` when the first text piece was ready.
    """

    __slots__ = (
        "_closed",
        "_ended",
        "_messages",
        "_params",
        "_pieces",
        "_queue",
        "_rails",
        "_stream_main",
        "_task",
        "blocked",
        "finish_reason",
        "first_piece_at",
        "rail",
        "turn",
        "usage",
    )

    def __init__(
        self,
        rails: LLMRails,
        messages: Sequence[Message],
        params: Mapping[str, Any] | None = None,
        *,
        stream_main: bool = True,
    ) -> None:
        self._rails = rails
        self._messages = list(messages)
        self._params = dict(params or {})
        self._stream_main = stream_main
        self._queue: asyncio.Queue[str | _End] | None = None  # made when iteration starts
        self._pieces: list[str] | None = None  # complete(): the pieces, kept in the calling task
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._ended = False  # the turn is over without an error: only the end is left to read
        self.blocked: str | None = None
        self.rail: str | None = None
        self.turn = TurnInfo()
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.first_piece_at: float | None = None

    # -- iteration -------------------------------------------------------------------------------

    def __aiter__(self) -> GuardedStream:
        return self

    async def __anext__(self) -> str:
        if self._closed:
            raise StopAsyncIteration
        queue = self._queue
        if queue is None:
            queue = self._queue = asyncio.Queue()
            self._task = asyncio.create_task(self._produce())
        item = await queue.get()
        if isinstance(item, _End):
            queue.put_nowait(item)  # later calls end the same way
            if item.error is not None:
                raise item.error
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
            if isinstance(item, _End):
                queue.put_nowait(item)  # the last item: the queue is empty again behind it
                break
            pieces.append(item)
        return "".join(pieces)

    async def text(self) -> str:
        """The whole reply (iterates the stream)."""
        return "".join([piece async for piece in self])

    async def complete(self) -> str:
        """Run the whole turn in the calling task and return the reply's text; errors are raised.

        For a caller that wants the reply in one piece (the server's plain requests): no producer
        task and no hand-off per piece, the turn's records scoped to the calling task as they are
        to the producer's when iterating. Measured in ``guardcache serve`` at 100% hits (cProfile
        self time, bench_serve --profile): asyncio's queue and task functions were 5.1% of the
        server's CPU per plain request, most of it this hand-off.
        Falls back to iterating when iteration already started.
        """
        if self._task is not None or self._closed:
            return await self.text()
        self._closed = True  # nothing is iterated from here on; aclose() has nothing to cancel
        rails = self._rails
        pieces = self._pieces = []
        with request_scope() as explain:
            self.turn = TurnInfo(explain)
            try:
                await self._turn()
            finally:
                rails._last = self.turn
        return "".join(pieces)

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

    @property
    def allowed(self) -> bool:
        return self.blocked is None

    # -- the turn --------------------------------------------------------------------------------

    def _send(self, piece: str) -> None:
        if piece:
            if self.first_piece_at is None:
                self.first_piece_at = time.monotonic()
            if self._pieces is not None:
                self._pieces.append(piece)
            else:
                assert self._queue is not None  # made by __anext__ before the turn's task
                self._queue.put_nowait(piece)

    async def _produce(self) -> None:
        rails = self._rails
        error: BaseException | None = None
        with request_scope() as explain:
            self.turn = TurnInfo(explain)
            try:
                await self._turn()
            except asyncio.CancelledError:
                error = RuntimeError("the guarded stream was closed before it ended")
                raise
            except BaseException as exc:
                error = exc
            finally:
                rails._last = self.turn
                assert self._queue is not None
                self._ended = error is None
                self._queue.put_nowait(_End(error))

    async def _turn(self) -> None:
        rails = self._rails
        runtime = rails._runtime
        group_in, group_out = rails.config.rails.input, rails.config.rails.output
        msgs = self._messages
        user_at = last_index(msgs, "user")
        assert user_at is not None  # checked by stream_async
        variables: dict[str, Any] = {
            "user_input": msgs[user_at]["content"],
            "history": history(msgs, user_at),
        }

        # An early main model's stream is buffered here until the verdict (a plain answer needs none).
        buffer: asyncio.Queue[str | _End] | None = None
        early: asyncio.Task[Any] | None = None
        if group_in.during_main and runtime.input_rails:
            buffer = asyncio.Queue() if self._stream_main else None
            start = self._pump(buffer) if buffer is not None else self._generate()
            inputs, early = await run_with_early_start(
                lambda: rails._run_group(runtime.input_rails, variables, group_in), lambda: start
            )
            if early is None:
                start.close()  # the coroutine never ran
        else:
            inputs = await rails._run_group(runtime.input_rails, variables, group_in)
        self.turn.checks = CheckResult(tuple(inputs))
        blocker = next((r for r in inputs if not r.allowed), None)
        if blocker is not None:
            if early is not None:
                await abandon(early)
            self._block("input", blocker, variables)
            return

        outputs: list[RailResult] = []
        if not self._stream_main:  # one answer, checked whole (the server's plain requests)
            content = await early if early is not None else await self._generate()
            await self._check_whole(content, variables, inputs, outputs)
            return

        if early is None and not (runtime.output_rails and group_out.streaming.enabled):
            # Nothing runs beside the stream: read it in this task (no pump task, no buffer).
            if not runtime.output_rails:
                await self._stream(self._send)
            else:
                pieces: list[str] = []
                await self._stream(pieces.append)
                await self._check_whole("".join(pieces), variables, inputs, outputs)
            if self.blocked is None:
                self.turn.checks = CheckResult(tuple(inputs), tuple(outputs))
            return

        if buffer is None:
            buffer = asyncio.Queue()
        pump = early if early is not None else asyncio.create_task(self._pump(buffer))
        try:
            if not runtime.output_rails:
                async for delta in _drain(buffer):
                    self._send(delta)
            elif not group_out.streaming.enabled:
                content = "".join([delta async for delta in _drain(buffer)])
                await self._check_whole(content, variables, inputs, outputs)
            else:
                await self._check_windows(buffer, variables, inputs, outputs)
        finally:
            if not pump.done():
                await abandon(pump)
            else:
                await asyncio.gather(pump, return_exceptions=True)
        if self.blocked is None:
            self.turn.checks = CheckResult(tuple(inputs), tuple(outputs))

    async def _check_whole(
        self, content: str, variables: dict[str, Any], inputs: list[RailResult], outputs: list[RailResult]
    ) -> None:
        rails = self._rails
        outputs += await rails._run_group(
            rails._runtime.output_rails, {**variables, "bot_response": content}, rails.config.rails.output
        )
        self.turn.checks = CheckResult(tuple(inputs), tuple(outputs))
        blocker = next((r for r in outputs if not r.allowed), None)
        if blocker is not None:
            self._block("output", blocker, variables)
        else:
            self._send(content)

    async def _check_windows(
        self,
        buffer: asyncio.Queue[str | _End],
        variables: dict[str, Any],
        inputs: list[RailResult],
        outputs: list[RailResult],
    ) -> None:
        rails = self._rails
        settings = rails.config.rails.output.streaming
        size, keep, first = settings.chunk_size, settings.context_size, settings.stream_first
        rails_out, group = rails._runtime.output_rails, rails.config.rails.output
        context: list[str] = []
        chunk: list[str] = []
        checked = False

        async def check(tokens: list[str]) -> bool:
            nonlocal context, checked
            checked = True
            text = "".join(tokens)
            if first:
                self._send(text)
            window = "".join(context) + text
            results = await rails._run_group(rails_out, {**variables, "bot_response": window}, group)
            outputs.extend(results)
            self.turn.checks = CheckResult(tuple(inputs), tuple(outputs))
            blocker = next((r for r in results if not r.allowed), None)
            if blocker is not None:
                self._block("output", blocker, variables)
                return False
            if not first:
                self._send(text)
            context = (context + tokens)[-keep:] if keep else []
            return True

        async for delta in _drain(buffer):
            chunk.append(delta)
            if len(chunk) >= size:
                tokens, chunk = chunk, []
                if not await check(tokens):
                    return
        if chunk or not checked:
            await check(chunk)

    def _block(self, direction: str, blocker: RailResult, variables: Mapping[str, Any]) -> None:
        self.blocked = direction
        self.rail = blocker.flow
        self.finish_reason = "content_filter"
        self._send(self._rails._refusal(variables["user_input"]))

    # -- the main model --------------------------------------------------------------------------

    async def _generate(self) -> str:
        main = self._rails._main
        assert main is not None
        started = time.monotonic()
        finish = "stop"
        try:
            if isinstance(main, ClientLLM):
                result = await main.complete(self._messages, **self._params)
                content, usage, finish = result.content, result.usage, result.finish_reason or "stop"
            else:
                content, usage = await main.generate(self._messages, **self._params)
        except asyncio.CancelledError:
            _record_cancelled(started)
            raise
        record_call(
            LLMCallInfo.from_usage("general", usage, duration=time.monotonic() - started, from_cache=False)
        )
        self.usage = usage
        self.finish_reason = finish
        return content

    async def _pump(self, buffer: asyncio.Queue[str | _End]) -> None:
        """Stream the main model into ``buffer`` (ends with an ``_End``), for a reader in another
        task (output windows checked while the model goes on, or a stream started early)."""
        try:
            await self._stream(buffer.put_nowait)
        except asyncio.CancelledError:
            buffer.put_nowait(_End(None))
            raise
        except BaseException as exc:
            buffer.put_nowait(_End(exc))
            raise
        buffer.put_nowait(_End(None))

    async def _stream(self, each: Callable[[str], object]) -> None:
        """Stream the main model, handing each delta to ``each``; records the call."""
        main = self._rails._main
        assert main is not None
        totals = StreamTotals()
        started = time.monotonic()
        try:
            async for delta in main.stream(self._messages, totals, **self._params):
                each(delta)
        except asyncio.CancelledError:
            _record_cancelled(started)
            raise
        usage = totals.usage or Usage(model=getattr(main, "model_name", None))
        record_call(
            LLMCallInfo.from_usage("general", usage, duration=time.monotonic() - started, from_cache=False)
        )
        self.usage = totals.usage
        if self.blocked is None:
            self.finish_reason = totals.finish_reason or "stop"


async def _drain(buffer: asyncio.Queue[str | _End]) -> AsyncIterator[str]:
    while True:
        item = await buffer.get()
        if isinstance(item, _End):
            if item.error is not None:
                raise item.error
            return
        yield item


def _record_cancelled(started: float) -> None:
    spent = LLMCallInfo.from_usage("general", NO_USAGE, duration=time.monotonic() - started, from_cache=False)
    record_call(spent._replace(cancelled=True))


__all__ = ["GuardedStream"]
