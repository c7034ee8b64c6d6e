"""The caller's trace context (W3C ``traceparent``) made the parent of a body request's spans.

Why a middleware of its own: a gateway that traces its requests sees guardcache's turn, rail and
backend spans under its own; with no tracer provider set (``guardcache.tracing``), it is one check
per request and nothing else.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from guardcache import tracing


class TraceContext:
    """Pure ASGI: the incoming trace context attached while the request below runs.

    Called, it returns what to await (an ASGI app is any callable returning an awaitable): with
    tracing off, the app below's own coroutine, so the layer costs a request one check and no
    coroutine of its own."""

    __slots__ = ("app",)

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        trace = tracing.attach_incoming(scope["headers"])  # None (one check) when off
        if trace is None:
            return self.app(scope, receive, send)
        return self._traced(trace, scope, receive, send)

    async def _traced(self, trace: Any, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        finally:
            tracing.detach(trace)


__all__ = ["TraceContext"]
