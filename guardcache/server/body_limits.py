"""A body route's request body, read whole within ``max_body_bytes`` and ``body_timeout``, before
anything else is done for it: the body routes' first middleware (``server/body_routes.py``).

Why first, before the request counts as in flight: a client that sends its body slowly holds a
connection, never a place of ``max_concurrency`` (a thousand clients stalling mid-body wait out
``body_timeout``, then get 408 and a closed connection). A body over the limit is refused from its
``Content-Length`` before a byte is read, and while reading when it has none (413). A client that
leaves mid-upload is counted and logged at DEBUG only: nobody can flood the log with it.
"""

from __future__ import annotations

import logging

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from guardcache.llm.cancel import CancelAfter
from guardcache.openai_wire import RequestError
from guardcache.server.answers import error_response
from guardcache.server.client_watch import DISCONNECT
from guardcache.server.metrics import ServerMetrics, reject_reason

log = logging.getLogger("guardcache.server")

BODY = "guardcache.body"
"""The scope key under which the body, once read, is handed to the route below."""


class BodyLimits:
    """Pure ASGI: the request body read within the limits into ``scope[BODY]``, or the request
    refused (413, 408) or dropped (the client left)."""

    __slots__ = ("app", "max_body", "metrics", "timeout")

    def __init__(self, app: ASGIApp, metrics: ServerMetrics, max_body: int, timeout: float) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body = max_body
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        extensions = scope.get("extensions")
        hook = extensions.get(DISCONNECT) if extensions else None
        if hook is not None and hook.complete:
            # The whole request is here (the protocol buffered it: it stops reading a body past its
            # high-water mark, so it is small): no wait, no timer, no Content-Length to believe.
            message = await receive()
            raw = message.get("body") if not message.get("more_body") else None
            if raw is None or len(raw) > self.max_body:  # (or the client left: the slow way says)
                raw = await self._read(receive, send, message)
        elif self._declares_too_much(scope):
            self.metrics.reject("body_too_large")
            await error_response(too_large(self.max_body)).write(send, receive)
            return
        else:
            raw = await self._read(receive, send)
        if raw is not None:
            scope[BODY] = raw
            await self.app(scope, receive, send)

    def _declares_too_much(self, scope: Scope) -> bool:
        """Whether the ``Content-Length`` is past the limit: refused before a byte is read."""
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    return int(value) > self.max_body
                except ValueError:
                    return False
        return False

    async def _read(self, receive: Receive, send: Send, first: Message | None = None) -> bytes | None:
        """The body within the limits; None when it was refused (413, 408: answered) or the client
        left. ``first``: a message already received. (When the whole request has arrived, which
        guardcache's HTTP protocol tells and a small JSON request nearly always has, the caller
        reads it without a timer: then reading cannot wait.)"""
        deadline = CancelAfter(self.timeout)
        try:
            async with deadline:
                return await read_body(receive, self.max_body, first)
        except RequestError as exc:
            self.metrics.reject(reject_reason(exc))
            await error_response(exc).write(send, receive)
        except TimeoutError:
            if not deadline.expired():
                raise
            self.metrics.reject("body_timeout")
            log.debug("the request body did not arrive within %gs", self.timeout)
            refusal = RequestError(
                f"The request body did not arrive within {self.timeout:g} seconds.",
                status=408,
                code="request_timeout",
                headers={"Connection": "close"},
            )
            await error_response(refusal).write(send, receive)
        except ClientDisconnect:  # common and harmless: no traceback, no warning anyone can flood
            self.metrics.reject("client_left")
            log.debug("the client left before its request body was read")
        return None


async def read_body(receive: Receive, limit: int, first: Message | None = None) -> bytes:
    """The request body; 413 (a :class:`RequestError`) past ``limit`` bytes, ``ClientDisconnect``
    when the client leaves first. ``first``: a message the caller already received."""
    chunks: list[bytes] = []
    size = 0
    while True:
        if first is not None:
            message, first = first, None
        else:
            message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def too_large(limit: int) -> RequestError:
    return RequestError(
        f"The request body is larger than this server accepts ({limit} bytes).",
        status=413,
        code="request_too_large",
    )


__all__ = ["BODY", "BodyLimits", "read_body", "too_large"]
