"""Every request's id, in its response's ``X-Request-Id`` header and in each log line written while
serving it: the first middleware of ``guardcache serve``.

Why: a client (or a gateway before it) that sends ``X-Request-Id`` finds the server's log lines of
that request by it; one that sends none (or one that is no sane label) is given a new one, so a
failure's answer ("see the server log for this request id") always names a line to find.
"""

from __future__ import annotations

import logging
import re
from contextvars import ContextVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from guardcache.server.ids import new_id

REQUEST_ID: ContextVar[str] = ContextVar("guardcache_request_id", default="-")
"""The id of the request being served (``-`` outside a request)."""

_SANE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` to every record (``-`` outside a request) for the log format."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        return True


def configure_logging(level: str = "info") -> None:
    """Root logging with the request id in every line (the CLI and each worker process)."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig()
    for handler in root.handlers:
        if not any(isinstance(f, RequestIdFilter) for f in handler.filters):
            handler.addFilter(RequestIdFilter())
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpx2"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class RequestIdMiddleware:
    """Pure ASGI: the request's id set in :data:`REQUEST_ID` for everything below, and added to its
    response's headers (the client's ``X-Request-Id`` when it is sane, else a new one)."""

    __slots__ = ("app",)

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                request_id = value.decode("latin-1")
                break
        if request_id is None or not _SANE_ID.fullmatch(request_id):
            request_id = new_id()
        token = REQUEST_ID.set(request_id)
        try:
            await self.app(scope, receive, AddingHeader(send, (b"x-request-id", request_id.encode())))
        finally:
            REQUEST_ID.reset(token)


class AddingHeader:
    """``send`` with ``header`` added to the response's headers.

    A class rather than a closure so that a writer of its own responses (the body routes'
    endpoint, ``server/body_routes.py``) can take ``send`` and ``header`` apart and pass the header
    with the headers it writes anyway: a chat answer's messages then go straight to the server's
    ``send``, not through a wrapper each."""

    __slots__ = ("header", "send")

    def __init__(self, send: Send, header: tuple[bytes, bytes]) -> None:
        self.send = send
        self.header = header

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", ()), self.header]
        await self.send(message)


__all__ = [
    "LOG_FORMAT",
    "REQUEST_ID",
    "AddingHeader",
    "RequestIdFilter",
    "RequestIdMiddleware",
    "configure_logging",
]
