"""The chat route's responses, written straight over ASGI: a JSON answer and an event stream.

Both take the middleware's request-id header as an extra raw header (:meth:`write`), so the hot
path wraps no ``send``. Why not Starlette's ``Response`` and ``StreamingResponse``: the first builds
and checks its header list per instance; the second, under uvicorn (ASGI spec 2.3), runs two anyio
tasks in a task group per response to notice a client that leaves, and anyio formats the task's
repr when it cancels it. Here one :class:`ClientWatch` per chat request, plain or streamed, notices
the client leaving (a callback from guardcache's HTTP protocol; elsewhere one plain asyncio task).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
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


DISCONNECT = "guardcache.disconnect"
"""The scope extension guardcache's HTTP protocols (``server/connections.py``) give each request: the
connection's :class:`DisconnectHook`."""


class ClientWatch:
    """Cancels the task inside it (``with watch:``) when the client leaves; that cancellation ends
    quietly at the exit (the client is gone: there is nobody to answer).

    Why: uvicorn tells an app that its client left only through ``receive()``, and a handler busy
    with a turn is not reading it, so without a watch a request whose client left runs to its end,
    main-model call included. The chat route enters one watch for the whole request once its body
    is read (``receive()`` is free then), so the turn and its answer, plain or streamed, are
    covered alike. :func:`client_watch` picks the kind: under guardcache's own HTTP protocols a
    :class:`HookWatch` (the connection's :class:`DisconnectHook` calls it when the connection is
    lost: no task at all), elsewhere a :class:`TaskWatch`. The task cost ~10% of a plain request's
    server CPU at 100% cache hits under uvicorn (``ab_serve.py``), hence the hook.
    """

    __slots__ = ("_task", "left")

    def __enter__(self) -> ClientWatch:
        self._task = asyncio.current_task()
        self.left = False
        self._start()
        return self

    def _start(self) -> None:
        pass

    def _stop(self) -> None:
        pass

    def client_left(self) -> None:
        """The client is gone: cancel the task, if it is still inside."""
        task = self._task
        if task is not None and not self.left:
            self.left = True
            task.cancel()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        task = self._task
        self._task = None
        self._stop()
        if not self.left or task is None:
            return False
        # The cancellation was ours: take it back, and end quietly if it is what stopped the task.
        return task.uncancel() == 0 and kind is asyncio.CancelledError


class DisconnectHook:
    """One per connection, in every request's ``scope["extensions"]``: the protocol calls
    :meth:`connection_lost`, which tells the request being watched (the latest to enter its watch:
    a request that finished its answer may still be closing its stream when the next one starts)."""

    __slots__ = ("complete", "lost", "watch")

    def __init__(self) -> None:
        self.lost = False
        self.watch: HookWatch | None = None
        # The latest request's body arrived whole (set by the protocol at the message's end, reset
        # at the next head). Requests complete in order, so a request that reads True has its
        # body; False only costs the body-read timer.
        self.complete = False

    def connection_lost(self) -> None:
        self.lost = True
        if self.watch is not None:
            self.watch.client_left()


class HookWatch(ClientWatch):
    """Under guardcache's HTTP protocols: told by the connection's :class:`DisconnectHook`. (Its
    enter and exit are whole methods, not the base's with ``_start``/``_stop``: every chat request
    runs them.)"""

    __slots__ = ("_hook",)

    def __init__(self, hook: DisconnectHook) -> None:
        self._hook = hook

    def __enter__(self) -> ClientWatch:
        self._task = asyncio.current_task()
        self.left = False
        hook = self._hook
        if hook.lost:  # gone before the watch began
            self.client_left()
        else:
            hook.watch = self
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        task = self._task
        self._task = None
        hook = self._hook
        if hook.watch is self:
            hook.watch = None
        if not self.left or task is None:
            return False
        return task.uncancel() == 0 and kind is asyncio.CancelledError


class TaskWatch(ClientWatch):
    """Under any other ASGI server: one plain asyncio task waits on ``receive()`` (cheaper than
    Starlette's way, an anyio task group of two tasks per streamed response)."""

    __slots__ = ("_receive", "_watch")

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._task = None
        self._watch: asyncio.Task[Message] | None = None

    def _start(self) -> None:
        self._watch = watch = asyncio.get_running_loop().create_task(_disconnect(self._receive))
        watch.add_done_callback(self._on_disconnect)

    def _on_disconnect(self, watch: asyncio.Task[Message]) -> None:
        # A disconnect noticed after the exit (uvicorn's receive() also returns one once the
        # response is complete) finds no task: client_left does nothing then.
        if not watch.cancelled() and watch.exception() is None:
            self.client_left()

    def _stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()


def client_watch(scope: Scope, receive: Receive) -> ClientWatch:
    """The watch for a request whose body was read: its connection's hook, else a task."""
    extensions = scope.get("extensions")
    return watch(extensions.get(DISCONNECT) if extensions else None, receive)


def watch(hook: DisconnectHook | None, receive: Receive) -> ClientWatch:
    """:func:`client_watch` for a caller that already looked up the connection's hook."""
    return HookWatch(hook) if hook is not None else TaskWatch(receive)


async def _disconnect(receive: Receive) -> Message:
    """Wait for the client to leave (the request body was read before the watch started)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return message


__all__ = [
    "DISCONNECT",
    "ClientWatch",
    "DisconnectHook",
    "EventStream",
    "HookWatch",
    "JSONResponse",
    "LastEvent",
    "TaskWatch",
    "client_watch",
    "watch",
]
