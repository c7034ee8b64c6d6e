"""``POST /v1/responses``: OpenAI's Responses API, one guarded turn exactly as a chat turn.

The Responses API is what the openai SDK's ``client.responses`` and the OpenAI Agents SDK
(``openai-agents``) speak by default. guardcache translates a request to the main model's chat
completions and runs it through the config's rails as ``/v1/chat/completions`` does (the same
:class:`~guardcache.rails.runner.GuardedTurn`, caches, metrics and ``guardcache`` object).

The route is laid out as the chat route is, one module per step, so a request goes down them once:
the request read whole (``server/responses_request.py``: what is served, what is refused, and why
guardcache keeps no conversation state), the turn run to its answer (``server/turns.py``, with the
chat route's metrics, failures and client watch), the answer shaped (``server/responses_answers.py``:
the ``response`` object and its stream events, with ``server/answers.py``'s report). This handler
only joins them.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp

from guardcache.openai_wire import RequestError
from guardcache.rails.runner import GuardedTurn
from guardcache.rails.streaming import GuardedStream
from guardcache.server.answers import error_response
from guardcache.server.protocol import parse_json
from guardcache.server.responses_answers import ResponseShape
from guardcache.server.responses_request import parse_responses
from guardcache.server.routes import Handlers
from guardcache.server.turns import ServedTurns


class ResponsesHandler:
    """The ``/v1/responses`` route: a body in, a ``response`` (or its events, or a 4xx) out. Runs
    the turn as the chat route does (:class:`~guardcache.server.routes.Handlers`' turns: their
    metrics, failures, headers and ``guardcache`` object)."""

    def __init__(self, handlers: Handlers) -> None:
        self.state = handlers.state
        self.images = handlers.images
        self.turns: ServedTurns = handlers.turns

    async def handle(self, raw: bytes) -> ASGIApp:
        """The answer to the body ``raw``: a 4xx when it cannot be served, else its turn's response
        (or events). The response's fixed fields are made before the turn runs, so its id and
        ``created_at`` are the request's."""
        started = time.monotonic()
        state = self.state
        try:
            request = parse_responses(parse_json(raw, state.settings.max_json_depth), self.images)
            config_id = state.select(request.config_id, request.model)
        except RequestError as exc:
            state.metrics.refused(exc)
            return error_response(exc)
        runner = state.rails[config_id].runner
        shape = ResponseShape(state.main_models[config_id], request.echo)
        if request.stream:
            stream = GuardedStream(runner, request.messages, request.params, stream_main=None)
            return await self.turns.response_stream(stream, config_id, shape, started)
        turn = GuardedTurn(runner, request.messages, request.params)
        return await self.turns.response(turn, config_id, shape, started)


__all__ = ["ResponsesHandler"]
