"""Connection-level tricks the HTTP layer needs: noticing a client leave, and dropping a connection.

ASGI hides the socket, yet a realistic backend must (a) stop working on a request whose client
disconnected, which frees its running slot and ends a hang, and (b) sometimes close a connection
without answering. (a) races the work against ``receive()`` returning ``http.disconnect``; (b)
closes the transport that uvicorn's ``send`` is bound to (see ``CaptureTransport``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from guardcache.openai_wire import RequestError

from .scheduler import EmulatorStopping

T = TypeVar("T")
TRANSPORT_KEY = "guardcache.emulator.transport"


class ClientDisconnected(Exception):
    """The client closed the connection before the answer was ready."""


class CaptureTransport:
    """ASGI middleware exposing the connection's transport in the scope under ``TRANSPORT_KEY``.

    ASGI has no "close without responding": uvicorn answers 500 to an app that raises before
    sending headers. uvicorn's ``send`` is a bound method of its request cycle, which holds the
    transport; under other servers the key is None and a drop degrades to a cut-off response.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            cycle = getattr(send, "__self__", None)
            scope[TRANSPORT_KEY] = getattr(cycle, "transport", None)
        await self.app(scope, receive, send)


class BodyTooLarge(RequestError):
    """The request body is over ``max_bytes`` (-> 413); it was read to the end and discarded."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"Request body too large: {size} bytes; the limit is {limit} bytes.")
        self.size = size
        self.limit = limit


async def read_json(request: Request, *, allow_empty: bool = False, max_bytes: int = 0) -> Any:
    """The body as JSON; ``RequestError`` (-> 400) when it is not, ``BodyTooLarge`` when it has
    more than ``max_bytes`` bytes (0 = no limit).

    An oversized body is still read to its end (and dropped), so the client, which may be writing
    it yet, gets the 413 instead of a reset connection. A client that leaves while its body is read
    (it cancelled the request: a parallel rail blocked first, a speculative main call was dropped)
    raises ``ClientDisconnected``, as a client leaving later does, rather than an ASGI error.
    """
    try:
        raw = await request.body() if not max_bytes else await _read_limited(request, max_bytes)
    except ClientDisconnect:
        raise ClientDisconnected from None
    if allow_empty and not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(f"The request body is not valid JSON: {exc}") from None


async def _read_limited(request: Request, max_bytes: int) -> bytes:
    declared = request.headers.get("content-length", "")
    size = int(declared) if declared.isdigit() else 0
    chunks: list[bytes] = []
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received <= max_bytes and size <= max_bytes:
            chunks.append(chunk)
        else:
            chunks.clear()
    if max(received, size) > max_bytes:
        raise BodyTooLarge(max(received, size), max_bytes)
    return b"".join(chunks)


async def until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Await ``work`` unless the client disconnects first; then cancel it, raise ClientDisconnected.

    Call only after the body has been read: from then on ``receive()`` only reports disconnects.
    """
    task: asyncio.Future[T] = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_disconnect(request))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, EmulatorStopping):
        await task
    raise ClientDisconnected


async def _wait_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def close_transport(request: Request) -> bool:
    """Close the client connection now; False when the server gave no transport."""
    transport = request.scope.get(TRANSPORT_KEY)
    if transport is None:
        return False
    transport.close()
    return True


async def drop_connection(request: Request) -> Response:
    """Close the connection without a response; the returned Response is never sent."""
    if not close_transport(request):
        return StreamingResponse(_broken_stream())
    # Wait until the server has seen the connection go, so it does not answer 500 for us.
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(1.0):
            await _wait_disconnect(request)
    return Response(status_code=499)


async def _broken_stream() -> AsyncIterator[bytes]:
    raise ConnectionAbortedError("injected connection drop")
    yield b""  # pragma: no cover - makes this an async generator
