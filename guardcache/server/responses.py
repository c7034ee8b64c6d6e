"""The chat route's responses, written straight over ASGI: a JSON answer and an event stream.

Both take the middleware's request-id header as an extra raw header (:meth:`write`), so the hot
path wraps no ``send``. Why not Starlette's ``Response`` and ``StreamingResponse``: the first builds
and checks its header list per instance; the second, under uvicorn (ASGI spec 2.3), runs two anyio
tasks in a task group per response to notice a client that leaves, and anyio formats the task's
repr when it cancels it. Here a stream watches for the disconnect with one plain asyncio task.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.types import Message, Receive, Scope, Send

from guardcache.llm.wire import dumps_body

RawHeader = tuple[bytes, bytes]
_EVENT_STREAM = (b"content-type", b"text/event-stream; charset=utf-8")


def _raw(headers: Mapping[str, str] | None) -> list[RawHeader]:
    if not headers:
        return []
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


class JSONResponse:
    """Compact UTF-8 JSON (``dumps_body``: orjson when installed, the same bytes without it); any
    ASGI callable is a Starlette response, so other routes return it too."""

    __slots__ = ("body", "headers", "status_code")

    def __init__(self, body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> None:
        self.body = dumps_body(body)
        self.status_code = status
        self.headers = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.write(send, receive)

    async def write(self, send: Send, receive: Receive, *extra: RawHeader) -> None:
        """Send the response, with ``extra`` raw headers."""
        body = self.body
        raw = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)), *extra]
        raw += _raw(self.headers)
        await send({"type": "http.response.start", "status": self.status_code, "headers": raw})
        await send({"type": "http.response.body", "body": body})


class LastEvent(bytes):
    """A stream's last bytes: written together with the end of the body (one write, not two)."""

    __slots__ = ()


class EventStream:
    """``text/event-stream`` from an async iterator of event bytes.

    A client that leaves cancels the response's task where it waits (the turn and its main call
    with it: the iterator is closed, its ``finally`` runs); that cancellation ends the response
    quietly, as Starlette's task group did. An item that is a :class:`LastEvent` ends the body.
    """

    __slots__ = ("events", "headers")

    def __init__(self, events: AsyncIterator[bytes], headers: Mapping[str, str] | None = None) -> None:
        self.events = events
        self.headers = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.write(send, receive)

    async def write(self, send: Send, receive: Receive, *extra: RawHeader) -> None:
        task = asyncio.current_task()
        assert task is not None
        streaming = True
        left = False

        def on_disconnect(watch: asyncio.Future[Message]) -> None:
            nonlocal left
            # Only while the body is being written: after that the task has moved on.
            if streaming and not watch.cancelled() and watch.exception() is None:
                left = True
                task.cancel()

        watch = asyncio.ensure_future(_disconnect(receive))
        watch.add_done_callback(on_disconnect)
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
        except asyncio.CancelledError:
            if left and task.uncancel() == 0:
                return  # the client left: nothing to answer, nobody to tell
            raise
        finally:
            streaming = False
            watch.cancel()
            await events.aclose()  # type: ignore[attr-defined]


async def _disconnect(receive: Receive) -> Message:
    """Wait for the client to leave (the request body was read before the stream started)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return message


__all__ = ["EventStream", "JSONResponse", "LastEvent"]
