"""Noticing a client that leaves: the watch that cancels its request's handler and answer, and the
middleware that puts every body request under one.

Why: uvicorn tells an app that its client left only through ``receive()``, and a handler busy with a
turn is not reading it, so without a watch a request whose client left runs to its end, main-model
call included. A body route's request enters one watch once its body is read (``receive()`` is free
then), so the turn and its answer, plain or streamed, are covered alike.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import Message, Receive, Scope

DISCONNECT = "guardcache.disconnect"
"""The scope extension guardcache's HTTP protocols (``server/connections.py``) give each request: the
connection's :class:`DisconnectHook`."""


class ClientWatch:
    """Cancels the task inside it (``with watch:``) when the client leaves; that cancellation ends
    quietly at the exit (the client is gone: there is nobody to answer).

    :func:`client_watch` picks the kind: under guardcache's own HTTP protocols a
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
    hook = extensions.get(DISCONNECT) if extensions else None
    return HookWatch(hook) if hook is not None else TaskWatch(receive)


async def _disconnect(receive: Receive) -> Message:
    """Wait for the client to leave (the request body was read before the watch started)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return message


def watch_for(scope: Scope, receive: Receive) -> HookWatch | TaskWatch:
    """The client watch of a request whose body was read (the body routes' stack: ``receive()`` is
    free then): ``with watch_for(scope, receive):`` cancels the block (the handler and its answer)
    when the client leaves; guardcache's HTTP protocol's hook when the server has one, else a task
    waiting on ``receive()``."""
    extensions = scope.get("extensions")
    hook = extensions.get(DISCONNECT) if extensions else None
    return HookWatch(hook) if hook is not None else TaskWatch(receive)


__all__ = [
    "DISCONNECT",
    "ClientWatch",
    "DisconnectHook",
    "HookWatch",
    "TaskWatch",
    "client_watch",
    "watch_for",
]
