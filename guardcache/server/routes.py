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

The chat route's handler takes the body its middlewares read (``server/body_routes.py``) and
returns the answer to send; what the answer says is shaped in ``server/answers.py``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp

from guardcache.openai_wire import RequestError
from guardcache.rails.runner import GuardedTurn
from guardcache.rails.streaming import GuardedStream
from guardcache.server.answers import error_response
from guardcache.server.protocol import read_chat
from guardcache.server.responses import JSONResponse
from guardcache.server.state import ServerState
from guardcache.server.turns import ServedTurns

if TYPE_CHECKING:
    from guardcache.prompts.parts import ImageLimits


class Handlers:
    """The chat route's turn and the routes without a body."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.turns = ServedTurns(state)

    def images(self, config_id: str | None, model: str | None) -> ImageLimits | None:
        """The image limits of the config a request goes to (asked by ``parse_chat`` only when a
        message has an image part): None unless that config's vision rails judge images."""
        return self.state.rails[self.state.select(config_id, model)].image_limits

    # -- chat ------------------------------------------------------------------------------------

    def turn(self, raw: bytes) -> Awaitable[ASGIApp]:
        """One guarded turn for the request body ``raw``: what to await for the answer to send
        (plain or a stream), the turn run by :class:`~guardcache.server.turns.ServedTurns`. (Not a
        coroutine itself: the request is read at the call, and its turn's coroutine is returned as
        it is, one coroutine fewer per request.)"""
        started = time.monotonic()
        state = self.state
        try:
            chat = read_chat(raw, self.images, state.settings.max_json_depth)
            config_id = state.select(chat.config_id, chat.model)
        except RequestError as exc:
            state.metrics.refused(exc)
            return _answered(error_response(exc))
        # The config's runner, with the messages parse_chat has read (with the config's image limits).
        runner = state.rails[config_id].runner
        model = state.main_models[config_id]
        if chat.stream:
            # The main model's stream is read only when its pieces can go out before the end.
            stream = GuardedStream(runner, chat.messages, chat.params, stream_main=None, defer_shadow=True)
            return self.turns.stream(stream, config_id, model, chat.include_usage, started)
        turn = GuardedTurn(runner, chat.messages, chat.params, defer_shadow=True)
        return self.turns.plain(turn, config_id, model, started, shadow=runner.shadow is not None)

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
        return JSONResponse({"object": "list", "data": data})

    async def configs(self, request: Request) -> JSONResponse:
        return JSONResponse([{"id": config_id} for config_id in self.state.rails])

    async def live(self, request: Request) -> JSONResponse:
        return JSONResponse({"status": "live"})

    async def ready(self, request: Request) -> JSONResponse:
        """The cached result of the background probes (``server/readiness.py``): never a backend
        call on this request's path. 503 naming each failing model and why, until all answer."""
        state = self.state
        if state.draining:
            return JSONResponse({"status": "draining"}, 503)
        readiness = state.readiness
        if not state.warmed or readiness.checked_at is None:
            return JSONResponse({"status": "starting", "detail": "probing the models"}, 503)
        ok = readiness.ok
        body = {
            "status": "ready" if ok else "unavailable",
            "configs": list(state.rails),
            "backends": dict(readiness.results),
            "checked_seconds_ago": round(time.monotonic() - readiness.checked_at, 3),
        }
        return JSONResponse(body, 200 if ok else 503)

    async def metrics(self, request: Request) -> Response:
        return Response(generate_latest(self.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


async def _answered(response: ASGIApp) -> ASGIApp:
    return response


__all__ = ["Handlers"]
