"""The answers of ``guardcache serve``, written straight over ASGI: a JSON answer and an event stream.

Both take extra raw headers (:meth:`JSONResponse.write`: the request id), so the body routes' hot
path wraps no ``send``. Why not Starlette's ``Response`` and ``StreamingResponse``: the first builds
and checks its header list per instance; the second, under uvicorn (ASGI spec 2.3), runs two anyio
tasks in a task group per response to notice a client that leaves, and anyio formats the task's
repr when it cancels it. Here one :class:`~guardcache.server.client_watch.ClientWatch` per body
request, plain or streamed, notices the client leaving (``server/client_watch.py``). What the
answers say is shaped in ``server/answers.py``; this module only writes bytes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from starlette.types import Receive, Scope, Send

from guardcache.llm.wire import dumps_body
from guardcache.server.client_watch import client_watch

RawHeader = tuple[bytes, bytes]
_EVENT_STREAM = (b"content-type", b"text/event-stream; charset=utf-8")


def _raw(headers: Mapping[str, str] | None) -> list[RawHeader]:
    if not headers:
        return []
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


class JSONResponse:
    """Compact UTF-8 JSON (``dumps_body``: orjson when installed, the same bytes without it); any
    ASGI callable is a Starlette response, so other routes return it too.

    ``after``: called once the whole response is sent (the chat route starts the turn's shadow
    sample there, so a shadow rail's work never runs before the answer is out)."""

    __slots__ = ("after", "body", "headers", "status_code")

    def __init__(self, body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> None:
        self.body = dumps_body(body)
        self.status_code = status
        self.headers = headers
        self.after: Callable[[], object] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.write(send, receive)

    async def write(self, send: Send, receive: Receive, *extra: RawHeader) -> None:
        """Send the response, with ``extra`` raw headers."""
        body = self.body
        raw = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)), *extra]
        if self.headers:
            raw += _raw(self.headers)
        await send({"type": "http.response.start", "status": self.status_code, "headers": raw})
        await send({"type": "http.response.body", "body": body})
        if self.after is not None:
            self.after()


class LastEvent(bytes):
    """A stream's last bytes: written together with the end of the body (one write, not two)."""

    __slots__ = ()


class EventStream:
    """``text/event-stream`` from an async iterator of event bytes.

    A client that leaves cancels the task writing the stream (see :class:`ClientWatch`; the chat
    route's watch covers the whole request, so :meth:`write` starts none of its own): the iterator
    is closed where it waits and its ``finally`` runs, which cancels the turn and its main call. An
    item that is a :class:`LastEvent` ends the body.
    """

    __slots__ = ("events", "headers")

    def __init__(self, events: AsyncIterator[bytes], headers: Mapping[str, str] | None = None) -> None:
        self.events = events
        self.headers = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with client_watch(scope, receive):
            await self.write(send, receive)

    async def write(self, send: Send, receive: Receive, *extra: RawHeader) -> None:
        """Send the stream, with ``extra`` raw headers (the caller watches for the client leaving)."""
        events = self.events
        raw = [_EVENT_STREAM, (b"cache-control", b"no-cache"), *extra, *_raw(self.headers)]
        try:
            await send({"type": "http.response.start", "status": 200, "headers": raw})
            async for chunk in events:
                last = isinstance(chunk, LastEvent)
                await send({"type": "http.response.body", "body": chunk, "more_body": not last})
                if last:
                    return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await events.aclose()  # type: ignore[attr-defined]


__all__ = ["EventStream", "JSONResponse", "LastEvent", "RawHeader"]
