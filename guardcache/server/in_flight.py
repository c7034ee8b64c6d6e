"""The requests in flight: counted (the gauge ``/metrics`` reads) and bounded by ``max_concurrency``.

Why one middleware for both: the limit is a bound on the very count the gauge shows, so they are one
number kept in one place (``ServerState.in_flight``). A request past the limit is refused at once
with 503 and ``Retry-After`` rather than queued: a queue would hold each client's connection and
memory for a place that may never come. It runs after the body is read (``server/body_limits.py``),
so a slow upload never holds a place.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from guardcache.openai_wire import RequestError
from guardcache.server.answers import error_response
from guardcache.server.state import ServerState


class InFlight:
    """Pure ASGI: the request below counted in flight while it runs, or refused (503) at the limit."""

    __slots__ = ("app", "limit", "state")

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app = app
        self.state = state
        self.limit = state.settings.max_concurrency

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = self.state
        if state.in_flight >= self.limit:
            state.metrics.reject("overloaded")
            refusal = RequestError(
                f"The server is at its concurrency limit ({self.limit} requests); retry later.",
                status=503,
                type="server_overloaded",
                code="overloaded",
                headers={"Retry-After": str(state.settings.retry_after)},
            )
            await error_response(refusal).write(send, receive)
            return
        state.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            state.in_flight -= 1


__all__ = ["InFlight"]
