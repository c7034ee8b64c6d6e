"""uvicorn's HTTP/1.1 protocols with limits on the request head: its size and the time it takes.

Why: uvicorn's httptools protocol has no limit on a request head (one 64 MB header line grew the
server by ~127 MB) and neither protocol drops a client that sends its head a byte at a time, or
connects and sends nothing. These subclasses count the bytes received while a head is being read and
time it, per connection:

- **size**: a head larger than ``max_bytes`` gets 431 and the connection is closed. The bytes are
  counted *before* they reach the parser, and a read that would cross the limit is fed only up to it,
  so the parser never buffers more than ``max_bytes`` of a head. (The head of a pipelined request
  that arrives in the same read as the end of the previous request is not counted: at most one read,
  256 KiB, beyond the limit.)
- **time**: a head that is not complete ``timeout`` seconds after its first byte (or after the
  connection opened, for the first request) gets 408 and the connection is closed; a connection that
  sent nothing at all is closed without a word. Idle keep-alive connections are uvicorn's
  ``timeout_keep_alive``.

A refused connection answers, shuts its writing side and keeps reading (and dropping) what the client
still sends for :data:`LINGER` seconds before it closes: closing a socket with unread data sends a
reset, which can destroy the answer before the client reads it.

The cost on the hot path is a comparison per read and a clock read per request head (the timer is
made once per connection and re-armed only when it fires while a head is being read).

The protocols also put the connection's :class:`~guardcache.server.responses.DisconnectHook` in every
request's ``scope["extensions"]``: the connection's loss cancels the request's turn through it, so
the app needs no task waiting on ``receive()`` to notice a client that leaves.

uvicorn is handed a :class:`HeadLimits` as its ``http`` protocol: a picklable factory, so
``--workers N`` (spawned processes) receive it with uvicorn's config.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any, cast

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from guardcache.server.client_watch import DISCONNECT, DisconnectHook
from guardcache.server.metrics import count_connection_refusal

log = logging.getLogger("guardcache.server")

LINGER = 2.0
"""Seconds a refused connection keeps reading and dropping the client's bytes before it closes."""


@dataclass(frozen=True, slots=True)
class HeadLimits:
    """uvicorn's ``http`` protocol for ``guardcache serve``: builds one protocol per connection.

    Attributes:
        parser: ``auto`` (= ``httptools``, as uvicorn's ``auto`` with httptools installed) or ``h11``.
        max_bytes: the largest request head (request line and headers), in bytes.
        timeout: seconds a request head may take to arrive.
    """

    parser: str = "auto"
    max_bytes: int = 64 * 1024
    timeout: float = 10.0

    def __call__(
        self, config: Any, server_state: Any, app_state: dict[str, Any], _loop: Any = None
    ) -> asyncio.Protocol:
        return PROTOCOLS[self.parser](
            config=config, server_state=server_state, app_state=app_state, _loop=_loop, limits=self
        )


class _HeadGuard:
    """What both protocols share: the head's byte budget and timer, and refusing a connection.

    ``_head_room`` is what the current head may still take (-1 once refused); ``_head_timer`` times
    the head being read, then a refused connection's linger.
    """

    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    client: tuple[str, int] | None
    _unset_keepalive_if_required: Any

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        limits: HeadLimits,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)  # type: ignore[call-arg]
        self._limits = limits
        self._head_room = limits.max_bytes
        self._head_since: float | None = None  # when the head being read began; None: no head
        self._head_timer: asyncio.TimerHandle | None = None
        self._refused = False
        self._hook = DisconnectHook()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._head_begins()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        super().connection_lost(exc)  # type: ignore[misc]
        self._hook.connection_lost()

    def _offer_hook(self, scope: MutableMapping[str, Any] | None) -> None:
        """Put the connection's :class:`DisconnectHook` in a request's scope (before its task runs)."""
        if scope is not None:
            extensions = scope.get("extensions")
            if extensions is None:
                scope["extensions"] = {DISCONNECT: self._hook}
            else:
                extensions[DISCONNECT] = self._hook

    def _feed(self, data: Any) -> None:
        raise NotImplementedError

    def _reading_a_head(self) -> bool:
        raise NotImplementedError

    def _head_begins(self) -> None:
        """A head starts (its first bytes, or the connection's start). The timer is armed only when
        none is pending and re-armed when it fires mid-head, so a kept-alive connection does not
        make and cancel a timer per request."""
        self._head_since = self.loop.time()
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self._limits.timeout, self._check_head)

    def _take_head(self, data: Any) -> bool:
        """Count ``data`` against the head's budget: True when it fits (feed it), False when it
        does not (``_over`` fed what fits and refused the rest, or ended the head)."""
        if self._head_since is None:
            self._head_begins()  # the first bytes of a head on a kept-alive connection
        room = self._head_room - len(data)
        if room < 0:
            self._over(data)
            return False
        self._head_room = room
        return True

    def _head_done(self) -> None:
        """The head is complete: the next head gets its whole budget."""
        self._head_room = self._limits.max_bytes
        self._head_since = None

    def _stop_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _over(self, data: Any) -> None:
        """``data`` is more than the head may still take: feed what fits; if that does not end the
        head, refuse it; else the rest is body (or the next request) and goes on as usual."""
        if self._refused:
            return  # lingering: dropped
        view = memoryview(data)
        fits = self._head_room
        self._head_room = 0
        if fits:  # (never an empty read: to h11, that is the client's end of stream)
            self._feed(view[:fits])
        if self.transport.is_closing():
            return  # the parser refused the request (400) or the connection is gone
        if self._head_room == 0 and self._reading_a_head():
            self._refuse(
                431,
                "header_too_large",
                "request_header_too_large",
                f"The request head (request line and headers) is larger than this server accepts "
                f"({self._limits.max_bytes} bytes).",
            )
            return
        self.data_received(view[fits:])  # type: ignore[attr-defined]

    def _check_head(self) -> None:
        self._head_timer = None
        since = self._head_since
        if since is None or self.transport.is_closing():
            return  # no head is being read (the next one arms the timer again)
        left = since + self._limits.timeout - self.loop.time()
        if left > 0:  # a later head than the one the timer was armed for
            self._head_timer = self.loop.call_later(left, self._check_head)
            return
        if self._head_room == self._limits.max_bytes:  # nothing of a head arrived: an idle connection
            self.transport.close()
            return
        self._refuse(
            408,
            "header_timeout",
            "request_timeout",
            f"The request head did not arrive within {self._limits.timeout:g} seconds.",
        )

    def _refuse(self, status: int, reason: str, code: str, message: str) -> None:
        """Answer ``status`` in OpenAI's error shape, then linger and close (see the module doc)."""
        count_connection_refusal(reason)
        log.debug("refused a connection from %s: %s", _peer(self.client), message)
        self._refused = True
        self._head_room = -1  # every later read goes to _over, which drops it
        self._stop_timer()
        self._unset_keepalive_if_required()
        body = json.dumps(
            {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
        ).encode()
        phrase = "Request Header Fields Too Large" if status == 431 else "Request Timeout"
        head = (
            f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        ).encode()
        transport = self.transport
        transport.write(head + body)
        if transport.can_write_eof():
            transport.write_eof()
            self._head_timer = self.loop.call_later(LINGER, transport.close)
        else:
            transport.close()


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "?"


class GuardedH11(_HeadGuard, H11Protocol):
    """uvicorn's h11 protocol with the head limits. A head is being read while h11 says the client
    is ``IDLE`` (no request yet); h11's own ``max_incomplete_event_size`` is set to the same limit."""

    def handle_events(self) -> None:
        super().handle_events()
        # (a request h11 parsed: its task is made, not run yet)
        self._offer_hook(cast("MutableMapping[str, Any]", self.scope))

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is not h11.IDLE:  # a request's body, or past the end
            H11Protocol.data_received(self, data)
            return
        if self._take_head(data):
            self._feed(data)

    def _feed(self, data: Any) -> None:
        H11Protocol.data_received(self, data)
        if self.conn.their_state is not h11.IDLE:
            self._head_done()

    def _reading_a_head(self) -> bool:
        return self.conn.their_state is h11.IDLE


class GuardedHttpTools(_HeadGuard, HttpToolsProtocol):
    """uvicorn's httptools protocol with the head limits. A head is being read from the end of the
    previous request (or the connection's start) to the parser's ``on_headers_complete``."""

    _in_head = True  # until the first on_headers_complete (then set per request)

    def data_received(self, data: bytes) -> None:
        if self._in_head:  # (_take_head, inlined: every read of every request passes here)
            if self._head_since is None:  # the first bytes of a head on a kept-alive connection
                self._head_since = self.loop.time()  # (_head_begins, inlined; its timer is pending)
                if self._head_timer is None:
                    self._head_timer = self.loop.call_later(self._limits.timeout, self._check_head)
            room = self._head_room - len(data)
            if room < 0:
                self._over(data)
                return
            self._head_room = room
        HttpToolsProtocol.data_received(self, data)

    def _feed(self, data: Any) -> None:
        HttpToolsProtocol.data_received(self, data)

    def _reading_a_head(self) -> bool:
        return self._in_head

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_room = self._limits.max_bytes  # (_head_done, inlined: once per request)
        self._head_since = None
        hook = self._hook
        hook.complete = False
        HttpToolsProtocol.on_headers_complete(self)
        # uvicorn made this scope in on_message_begin, without extensions; the request's task is
        # made, not run yet.
        self.scope["extensions"] = cast("dict[str, dict[object, object]]", {DISCONNECT: hook})

    def on_message_complete(self) -> None:
        HttpToolsProtocol.on_message_complete(self)
        self._in_head = True
        self._hook.complete = True  # the request's body is all here: reading it cannot wait


PROTOCOLS: dict[str, type[GuardedHttpTools | GuardedH11]] = {
    "auto": GuardedHttpTools,  # httptools is a core dependency: uvicorn's auto picks it
    "httptools": GuardedHttpTools,
    "h11": GuardedH11,
}


__all__ = ["LINGER", "PROTOCOLS", "GuardedH11", "GuardedHttpTools", "HeadLimits"]
