"""A served turn run to its answer, plain or streamed: how it ends in the metrics, and a turn that
fails before its answer starts (502/504 for the main model, 500 for a bug, a client that left
re-raised). The chat route (``server/routes.py``) and the Responses API
(``server/responses_api.py``) both run their turns here, so a turn is counted, failed and cancelled
the same way whichever route it came by; what their answers say is ``server/answers.py``'s and
``server/responses_answers.py``'s.

A client that leaves cancels the turn wherever it waits (``server/client_watch.py``): the turn and
its main call are cancelled, and counted with the outcome ``client_left``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.types import ASGIApp

from guardcache.errors import BackendError, BackendTimeoutError
from guardcache.rails.runner import GuardedTurn
from guardcache.rails.streaming import GuardedStream
from guardcache.server import answers
from guardcache.server.responses import EventStream, JSONResponse, LastEvent
from guardcache.server.responses_answers import ResponseEvents, ResponseShape, plain_response
from guardcache.server.state import ServerState

log = logging.getLogger("guardcache.server")


class ServedTurns:
    """The served turns run to their answers (see the module docstring): the chat route's
    (:meth:`plain`, :meth:`stream`) and the Responses API's (:meth:`response`,
    :meth:`response_stream`)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    async def plain(
        self, turn: GuardedTurn, config_id: str, model: str, started: float, *, shadow: bool = False
    ) -> ASGIApp:
        """The whole turn in this task, the main model called plainly (no task, no queue), answered
        as one ``chat.completion``. With ``shadow`` (the config has shadow rails), its shadow
        sample starts once the answer is sent."""
        try:
            text = await turn.complete()
        except BaseException as exc:
            return self.failed(config_id, exc, started, "plain")
        self.observe(config_id, turn, started, "plain")
        response = answers.plain(turn, text, config_id, model)
        if shadow:
            response.after = turn.start_shadow
        return response

    def stream(
        self, stream: GuardedStream, config_id: str, model: str, include_usage: bool, started: float
    ) -> Awaitable[ASGIApp]:
        """The turn's chat-completion chunks, once its first piece is there (:meth:`_opened`; its
        awaitable handed on, not awaited in a coroutine layer of its own)."""
        return self._opened(
            stream,
            config_id,
            started,
            lambda first: self._events(stream, first, config_id, model, include_usage, started),
        )

    async def _opened(
        self,
        stream: GuardedStream,
        config_id: str,
        started: float,
        events: Callable[[str | None], AsyncIterator[bytes]],
    ) -> ASGIApp:
        """The stream's ``events(first piece)``, once that piece is there; a turn blocked at input,
        or failed before any text, is answered with its status and headers (both formats alike).

        A reply that comes in one piece (``GuardedTurn.one_piece``: a stream made with
        ``stream_main=None`` whose output rails check the answer whole calls the main model
        plainly) is the turn run in this task (``GuardedStream.complete``: no producer task, no
        queue), and that piece is the first."""
        try:
            first = await (stream.complete() if stream.one_piece else first_piece(stream))
        except BaseException as exc:
            await stream.aclose()
            return self.failed(config_id, exc, started, "stream")
        return EventStream(events(first), answers.headers(stream, stream.turn.checks.no_verdict))

    async def _events(
        self,
        stream: GuardedStream,
        first: str | None,
        config_id: str,
        model: str,
        include_usage: bool,
        started: float,
    ) -> AsyncIterator[bytes]:
        writer = answers.ChunkWriter(answers.completion_id(), model)
        outcome: str | None = None
        try:
            # Pieces that are already there go out in one event (one write, one syscall); an answer
            # that is already whole (checked whole, or blocked) goes out with its end in one write.
            head = writer.content((first or "") + stream.ready(), first=True)
            if not stream.one_piece and not stream.ended:
                yield head
                head = b""
                try:
                    async for piece in stream:
                        yield writer.content(piece + stream.ready())
                except BackendError as exc:
                    outcome = "main_error"
                    kind = type(exc).__name__
                    self.state.metrics.main_error(config_id, kind)
                    log.warning("main model failed mid-stream (%s): %s", kind, exc)
                    yield LastEvent(answers.broken_stream(kind))
                    return
            outcome = answers.outcome(stream)
            yield LastEvent(head + writer.end(stream, config_id, include_usage))
        finally:
            await stream.aclose()
            if outcome is None:  # closed before its end: the client left (or the server stopped)
                outcome = "client_left"
            elif outcome != "main_error":  # the last event is sent: a sampled turn's shadow rails
                stream.start_shadow()
            first_at = stream.first_piece_at
            self.state.metrics.observe_turn(
                config_id,
                stream.turn,
                mode="stream",
                outcome=outcome,
                seconds=time.monotonic() - started,
                first_piece=first_at - started if first_at is not None else None,
            )

    # -- the Responses API ------------------------------------------------------------------------

    async def response(
        self, turn: GuardedTurn, config_id: str, shape: ResponseShape, started: float
    ) -> ASGIApp:
        """The whole turn, answered as one ``response`` object with guardcache's report."""
        try:
            text = await turn.complete()
        except BaseException as exc:
            return self.failed(config_id, exc, started, "plain")
        self.observe(config_id, turn, started, "plain")
        no_verdict = turn.turn.checks.no_verdict
        report = answers.extension(turn, config_id, no_verdict)
        found = answers.headers(turn, no_verdict)
        return plain_response(shape, turn, text, report, found)

    def response_stream(
        self, stream: GuardedStream, config_id: str, shape: ResponseShape, started: float
    ) -> Awaitable[ASGIApp]:
        """The turn's Responses events, once its first piece is there (:meth:`_opened`)."""
        return self._opened(
            stream,
            config_id,
            started,
            lambda first: self._response_events(stream, first, config_id, shape, started),
        )

    async def _response_events(
        self, stream: GuardedStream, first: str | None, config_id: str, shape: ResponseShape, started: float
    ) -> AsyncIterator[bytes]:
        """Unlike a chat stream's, the response is announced before its first text (the Responses
        API's order), and its end is its own event with the whole response in it."""
        events = ResponseEvents(shape)
        outcome: str | None = None
        try:
            yield events.start()
            text = (first or "") + stream.ready()
            if text:
                yield events.text(text)
            try:
                async for piece in stream:
                    yield events.text(piece + stream.ready())
            except BackendError as exc:
                outcome = "main_error"
                self.state.metrics.main_error(config_id, type(exc).__name__)
                yield LastEvent(events.error(answers.main_model_failed_mid_stream(type(exc).__name__)))
                return
            report = answers.extension(stream, config_id, stream.turn.checks.no_verdict)
            outcome = answers.outcome(stream)
            yield LastEvent(events.end(stream.tool_calls, stream.usage, report, stream.finish_reason))
        finally:
            await stream.aclose()
            first_at = stream.first_piece_at
            self.state.metrics.observe_turn(
                config_id,
                stream.turn,
                mode="stream",
                outcome=outcome or "client_left",
                seconds=time.monotonic() - started,
                first_piece=first_at - started if first_at is not None else None,
            )

    # -- both ------------------------------------------------------------------------------------

    def observe(self, config_id: str, turn: GuardedTurn, started: float, mode: str) -> None:
        """An answered turn, into the metrics."""
        self.state.metrics.observe_turn(
            config_id, turn.turn, mode=mode, outcome=answers.outcome(turn), seconds=time.monotonic() - started
        )

    def failed(self, config_id: str, exc: BaseException, started: float, mode: str) -> JSONResponse:
        """A turn that raised before its answer started: counted, logged, answered 502/504 (the
        main model) or 500 (a bug); a client that left (a cancellation) is re-raised."""
        metrics = self.state.metrics
        if isinstance(exc, asyncio.CancelledError):  # the client left (or the server stopped)
            metrics.observe_failed_turn(config_id, mode, "client_left", time.monotonic() - started)
            raise exc
        if isinstance(exc, BackendError):
            kind = type(exc).__name__
            metrics.main_error(config_id, kind)
            log.warning("main model failed (%s): %s", kind, exc)
            response = answers.main_model_failed(kind, 504 if isinstance(exc, BackendTimeoutError) else 502)
            outcome = "main_error"
        else:
            log.error("guarded turn failed unexpectedly (%s)", type(exc).__name__, exc_info=exc)
            response = answers.internal_error()
            outcome = "error"
        metrics.observe_failed_turn(config_id, mode, outcome, time.monotonic() - started)
        return response


async def first_piece(stream: GuardedStream) -> str | None:
    """The stream's first piece (None: it ended without one)."""
    try:
        return await stream.__anext__()
    except StopAsyncIteration:
        return None


__all__ = ["ServedTurns", "first_piece"]
