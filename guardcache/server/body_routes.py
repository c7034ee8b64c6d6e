"""The routes of ``guardcache serve`` whose request carries a body, listed in one place, and the one
stack of middlewares each is served through.

Why one list: every such route gets the same limits (client key, body size and time, concurrency,
the client watch; each handler parses with the same JSON depth), so a route added here cannot be
served with fewer of them, and the tests read this list to prove each limit per route
(``tests/integration/test_serve_limits.py``). ``create_app`` refuses to start when its handlers and
this list differ. A new body route is a path here, a handler in ``create_app``, and an example body
in that test.

A body route's request goes down :func:`body_stack`, one pure ASGI middleware per job:
:class:`~guardcache.server.body_limits.BodyLimits` (the body read whole within ``max_body_bytes``
and ``body_timeout``, before the request counts as in flight), then
:class:`~guardcache.server.in_flight.InFlight` (counted, bounded by ``max_concurrency``), then
:class:`~guardcache.server.trace_context.TraceContext`, then
the client watch (:mod:`~guardcache.server.client_watch`: a client that leaves cancels the handler
and its answer), entered by :class:`BodyEndpoint` (the handler called with the body, its answer
written) around both.
Above them, for every request: ``server/request_id.py`` and ``server/auth.py`` (when the server
has a key). :class:`BodyRouter`
sends a body route's ``POST`` down its stack straight, not through Starlette's router and its
middleware stack (error and exception middleware, route matching, the request/response wrapper:
~8% of the server's CPU per request at 100% hits, for routes that need none of it).

``POST /admin/cache/clear`` (``server/admin.py``) goes down the same stack (:data:`ADMIN_CLEAR_PATH`)
but is not in :data:`BODY_ROUTES`: it exists only with ``--admin-key-env`` and takes its own key.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from starlette.types import ASGIApp, Receive, Scope, Send

from guardcache.server.answers import method_not_allowed
from guardcache.server.body_limits import BODY, BodyLimits
from guardcache.server.client_watch import watch_for
from guardcache.server.in_flight import InFlight
from guardcache.server.request_id import AddingHeader
from guardcache.server.responses import EventStream, JSONResponse
from guardcache.server.state import ServerState
from guardcache.server.trace_context import TraceContext

CHAT_PATH = "/v1/chat/completions"
"""OpenAI's chat completions: one guarded turn (``server/routes.py``)."""

CHECKS_PATH = "/v1/checks"
"""NeMo Guardrails' server's checks: the rails only, on messages (``server/checks_api.py``)."""

LITELLM_PATH = "/beta/litellm_basic_guardrail_api"
"""LiteLLM's Generic Guardrail API: the rails only, on texts (``server/litellm_api.py``)."""

RESPONSES_PATH = "/v1/responses"
"""OpenAI's Responses API: one guarded turn, as a chat turn (``server/responses_api.py``)."""

BODY_ROUTES: tuple[str, ...] = (CHAT_PATH, CHECKS_PATH, LITELLM_PATH, RESPONSES_PATH)
"""Every ``POST`` route with a JSON body that the client key opens."""

ADMIN_CLEAR_PATH = "/admin/cache/clear"
"""Every worker's caches emptied (``server/admin.py``): with ``--admin-key-env`` only, its key only."""

BodyHandler = Callable[[bytes], Awaitable[ASGIApp]]
"""A body route's handler: the request body (read within the limits) in, the answer to send out."""


def body_stack(handler: BodyHandler, state: ServerState) -> ASGIApp:
    """``handler`` served with every limit of a body route (see the module docstring)."""
    settings = state.settings
    endpoint = BodyEndpoint(handler)  # (the client watch inside it)
    return BodyLimits(
        InFlight(TraceContext(endpoint), state), state.metrics, settings.max_body_bytes, settings.body_timeout
    )


class BodyEndpoint:
    """Pure ASGI, the bottom of a body route's stack: the handler called with ``scope[BODY]``, its
    answer written, both under the client watch (``client_watch.watch_for``, entered here rather
    than by a middleware of its own: one coroutine fewer per request). guardcache's own answers
    take the request id as a header of theirs (:class:`~guardcache.server.request_id.AddingHeader`
    taken apart), so their messages go straight to the server's ``send``."""

    __slots__ = ("handler",)

    def __init__(self, handler: BodyHandler) -> None:
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with watch_for(scope, receive):
            response = await self.handler(scope[BODY])
            if not isinstance(response, _OURS):
                await response(scope, receive, send)
            elif type(send) is AddingHeader:
                await response.write(send.send, receive, send.header)
            else:
                await response.write(send, receive)


_OURS = (JSONResponse, EventStream)


class BodyRouter:
    """Pure ASGI: a ``POST`` to a body route down that route's stack, another method there a 405;
    every other request to ``app`` (Starlette's router). Called, it returns the chosen app's
    awaitable (an ASGI app is any callable returning one): dispatch adds no coroutine."""

    __slots__ = ("app", "routes")

    def __init__(self, app: ASGIApp, routes: Mapping[str, ASGIApp]) -> None:
        self.app = app
        self.routes = dict(routes)

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] == "http":
            route = self.routes.get(scope["path"])
            if route is not None:
                if scope["method"] == "POST":
                    return route(scope, receive, send)
                return method_not_allowed(scope["method"], ("POST",)).write(send, receive)
        return self.app(scope, receive, send)


__all__ = [
    "ADMIN_CLEAR_PATH",
    "BODY_ROUTES",
    "CHAT_PATH",
    "CHECKS_PATH",
    "LITELLM_PATH",
    "RESPONSES_PATH",
    "BodyEndpoint",
    "BodyHandler",
    "BodyRouter",
    "body_stack",
]
