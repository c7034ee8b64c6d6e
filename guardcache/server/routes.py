"""The HTTP routes of ``guardcache serve``.

- ``POST /v1/chat/completions``: one guarded turn, plain or ``stream: true`` (SSE chunks ending with
  ``data: [DONE]``). A blocked turn is a normal assistant message holding the refusal, with
  ``finish_reason: "content_filter"``, ``"guardcache": {"blocked": true, "rail": ..., "direction":
  ..., "reason": "verdict"|"no_verdict"}`` in the body (streams: in the last chunk) and the header
  ``X-Guardcache-Blocked: input`` or ``output`` when the block is known before the first byte
  (always for input rails; for output rails unless a streamed answer is blocked after text was
  sent). Any turn, blocked or not, whose rails got no verdict for some flows lists them:
  ``"no_verdict": [flow, ...]`` in the body and ``X-Guardcache-No-Verdict: flow, ...`` (those known
  before the first byte); neither is there when every rail answered.
- ``GET /v1/models``; ``GET /v1/rails/configs`` (NeMo's server); ``GET /health/live``,
  ``GET /health/ready`` (the cached result of ``server/readiness.py``'s probes); ``GET /metrics``
  (Prometheus).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp

from guardcache.errors import BackendError, BackendTimeoutError
from guardcache.rails.runner import GuardedTurn
from guardcache.rails.streaming import GuardedStream
from guardcache.server.intake import error_response, json_response, read_body, reject_reason, too_large
from guardcache.server.protocol import (
    RequestError,
    completion_body,
    completion_id,
    error_body,
    parse_chat,
    parse_json,
)
from guardcache.server.responses import EventStream, JSONResponse, LastEvent
from guardcache.server.state import ServerState
from guardcache.server.streaming import DONE, ChunkWriter, error_event

if TYPE_CHECKING:
    from guardcache.prompts.parts import ImageLimits

log = logging.getLogger("guardcache.server")


class Handlers:
    def __init__(self, state: ServerState) -> None:
        self.state = state

    def _images(self, config_id: str | None, model: str | None) -> ImageLimits | None:
        """The image limits of the config a request goes to (asked by ``parse_chat`` only when a
        message has an image part): None unless that config's vision rails judge images."""
        return self.state.rails[self.state.select(config_id, model)].image_limits

    # -- chat ------------------------------------------------------------------------------------

    async def chat(self, request: Request) -> ASGIApp:
        """The chat route through Starlette's router (the middleware serves it without: see
        :class:`~guardcache.server.app.OperationsMiddleware`, which also bounds the body's time)."""
        try:
            raw = await read_body(request.receive, self.state.settings.max_body_bytes)
        except RequestError as exc:
            self.state.metrics.reject(reject_reason(exc))
            return error_response(exc)
        return await self.turn(raw)

    async def turn(self, raw: bytes) -> ASGIApp:
        """One guarded turn for the request body ``raw``: the answer to send (plain or a stream).

        A client that leaves cancels it (the middleware's :class:`ClientWatch`) wherever it waits:
        the turn and its main call are cancelled, and counted with the outcome ``client_left``."""
        started = time.monotonic()
        state = self.state
        try:
            chat = parse_chat(parse_json(raw, state.settings.max_json_depth), self._images)
            config_id = state.select(chat.config_id, chat.model)
        except RequestError as exc:
            state.metrics.reject(reject_reason(exc))
            return error_response(exc)
        # The config's runner, with the messages parse_chat has read (with the config's image limits).
        runner = state.rails[config_id].runner
        model = state.main_models[config_id]
        if not chat.stream:
            # The whole turn in this task, the main model called plainly: no task, no queue. Its
            # shadow sample (if any) starts once the response is sent.
            turn = GuardedTurn(runner, chat.messages, chat.params, defer_shadow=True)
            try:
                text = await turn.complete()
            except BaseException as exc:
                return self._failed(config_id, exc, started, "plain")
            self._observe(config_id, turn, started, "plain")
            no_verdict = turn.turn.checks.no_verdict
            body = completion_body(
                completion_id(),
                model,
                text,
                turn.finish_reason,
                turn.usage,
                _extension(turn, config_id, no_verdict),
                turn.tool_calls,
            )
            response = json_response(body, headers=_headers(turn, no_verdict))
            if runner.shadow is not None:
                response.after = turn.start_shadow
            return response
        # The main model's stream is read only when its pieces can go out before the end.
        stream = GuardedStream(runner, chat.messages, chat.params, stream_main=None, defer_shadow=True)
        try:
            first = await _first(stream)
        except BaseException as exc:
            await stream.aclose()
            return self._failed(config_id, exc, started, "stream")
        headers = _headers(stream, stream.turn.checks.no_verdict)
        events = self._events(config_id, model, stream, first, chat.include_usage, started)
        return EventStream(events, headers)

    async def _events(
        self,
        config_id: str,
        model: str,
        stream: GuardedStream,
        first: str | None,
        include_usage: bool,
        started: float,
    ) -> AsyncIterator[bytes]:
        writer = ChunkWriter(completion_id(), model)
        outcome: str | None = None
        try:
            # Pieces that are already there go out in one event (one write, one syscall); an answer
            # that is already whole (checked whole, or blocked) goes out with its end in one write.
            text = (first or "") + stream.ready()
            if stream.ended:
                tail = self._tail(writer, stream, config_id, include_usage)
                outcome = _outcome(stream)
                yield LastEvent(writer.content(text, first=True) + tail)
                return
            yield writer.content(text, first=True)
            try:
                async for piece in stream:
                    yield writer.content(piece + stream.ready())
            except BackendError as exc:
                outcome = "main_error"
                self.state.metrics.main_error(config_id, type(exc).__name__)
                log.warning("main model failed mid-stream (%s): %s", type(exc).__name__, exc)
                kind = type(exc).__name__
                message = f"The main model failed mid-stream ({kind}); the answer is incomplete."
                yield LastEvent(error_event(message, "upstream_error", "main_model_failed") + DONE)
                return
            tail = self._tail(writer, stream, config_id, include_usage)
            outcome = _outcome(stream)
            yield LastEvent(tail)
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

    @staticmethod
    def _tail(writer: ChunkWriter, stream: GuardedStream, config_id: str, include_usage: bool) -> bytes:
        """The last events: the judged tool calls (whole, in one event) if any, the finish reason
        with guardcache's extension, usage if asked, [DONE]."""
        extension = _extension(stream, config_id, stream.turn.checks.no_verdict)
        tail = writer.final(stream.finish_reason or "stop", extension)
        if stream.tool_calls:
            tail = writer.tool_calls(stream.tool_calls) + tail
        return tail + writer.usage(stream.usage) + DONE if include_usage else tail + DONE

    def _observe(self, config_id: str, turn: GuardedTurn, started: float, mode: str) -> None:
        self.state.metrics.observe_turn(
            config_id, turn.turn, mode=mode, outcome=_outcome(turn), seconds=time.monotonic() - started
        )

    def _failed(self, config_id: str, exc: BaseException, started: float, mode: str) -> JSONResponse:
        metrics = self.state.metrics
        if isinstance(exc, asyncio.CancelledError):  # the client left (or the server stopped)
            metrics.observe_failed_turn(config_id, mode, "client_left", time.monotonic() - started)
            raise exc
        if isinstance(exc, BackendError):
            kind = type(exc).__name__
            metrics.main_error(config_id, kind)
            log.warning("main model failed (%s): %s", kind, exc)
            status = 504 if isinstance(exc, BackendTimeoutError) else 502
            message = f"The main model did not answer ({kind}); see the server log for this request id."
            response = json_response(error_body(message, "upstream_error", "main_model_failed"), status)
            outcome = "main_error"
        else:
            log.error("guarded turn failed unexpectedly (%s)", type(exc).__name__, exc_info=exc)
            response = json_response(
                error_body("Internal error; see the server log for this request id.", "server_error"), 500
            )
            outcome = "error"
        metrics.observe_failed_turn(config_id, mode, outcome, time.monotonic() - started)
        return response

    # -- the rest --------------------------------------------------------------------------------

    async def models(self, request: Request) -> JSONResponse:
        state = self.state
        data = [
            {
                "id": model,
                "object": "model",
                "created": state.created,
                "owned_by": "guardcache",
                "config_id": config_id,
            }
            for config_id, model in state.main_models.items()
        ]
        return json_response({"object": "list", "data": data})

    async def configs(self, request: Request) -> JSONResponse:
        return json_response([{"id": config_id} for config_id in self.state.rails])

    async def live(self, request: Request) -> JSONResponse:
        return json_response({"status": "live"})

    async def ready(self, request: Request) -> JSONResponse:
        """The cached result of the background probes (``server/readiness.py``): never a backend
        call on this request's path. 503 naming each failing model and why, until all answer."""
        state = self.state
        if state.draining:
            return json_response({"status": "draining"}, 503)
        readiness = state.readiness
        if not state.warmed or readiness.checked_at is None:
            return json_response({"status": "starting", "detail": "probing the models"}, 503)
        ok = readiness.ok
        body = {
            "status": "ready" if ok else "unavailable",
            "configs": list(state.rails),
            "backends": dict(readiness.results),
            "checked_seconds_ago": round(time.monotonic() - readiness.checked_at, 3),
        }
        return json_response(body, 200 if ok else 503)

    async def metrics(self, request: Request) -> Response:
        return Response(generate_latest(self.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


async def _first(stream: GuardedStream) -> str | None:
    try:
        return await stream.__anext__()
    except StopAsyncIteration:
        return None


def _extension(stream: GuardedTurn, config_id: str, no_verdict: tuple[str, ...]) -> dict[str, Any]:
    """The ``guardcache`` object of an answer. ``no_verdict`` (the turn's ``checks.no_verdict``)
    appears only when a rail got no verdict, so a turn whose rails all answered has the shape it
    always had and costs nothing more."""
    if stream.blocked is None:
        if not no_verdict:
            return {"blocked": False, "config_id": config_id}
        return {"blocked": False, "no_verdict": list(no_verdict), "config_id": config_id}
    extension = {
        "blocked": True,
        "direction": stream.blocked,
        "rail": stream.rail,
        "reason": stream.turn.checks.reason,
        "config_id": config_id,
    }
    if no_verdict:
        extension["no_verdict"] = list(no_verdict)
    return extension


NO_VERDICT_HEADER = "X-Guardcache-No-Verdict"
_HEADER_SAFE = " !\"#$&'()*+/:;<=>?@[\\]^`{|}"
"""What a flow keeps as it is in the header: printable ASCII but the list's separator (",") and the
escape ("%"); anything else is percent-encoded, so any flow name makes a valid, splittable header."""


def _headers(stream: GuardedTurn, no_verdict: tuple[str, ...]) -> dict[str, str] | None:
    """``X-Guardcache-Blocked`` when blocked, ``X-Guardcache-No-Verdict`` when a rail got no
    verdict (its flows, ``", "``-separated); None (no dict) when neither."""
    if stream.blocked is None and not no_verdict:
        return None
    headers = {"X-Guardcache-Blocked": stream.blocked} if stream.blocked else {}
    if no_verdict:
        headers[NO_VERDICT_HEADER] = ", ".join(quote(flow, safe=_HEADER_SAFE) for flow in no_verdict)
    return headers


def _outcome(stream: GuardedTurn) -> str:
    return f"blocked_{stream.blocked}" if stream.blocked else "allowed"


__all__ = [
    "NO_VERDICT_HEADER",
    "Handlers",
    "JSONResponse",
    "error_response",
    "json_response",
    "read_body",
    "reject_reason",
    "too_large",
]
