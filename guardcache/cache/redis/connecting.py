"""Connection set-up off the operations' path: each new connection of the tier's clients (TCP, TLS,
AUTH/HELLO; with Sentinel, asking the Sentinels for the primary first) is made in a task of its own,
under the connect timeout, never inside an operation's ``timeout_ms``.

Why: an operation's budget (50 ms by default) is for a round trip on an open connection. Setting one
up costs more, and much more across zones (a TLS handshake) or on a loaded host; a cluster client
reading the slot map on its first command took 25 ms on an idle machine and up to 185 ms with both
cores busy. Done inside the operation, a set-up that missed the budget counted as Redis failing: the
circuit opened and a replica that had just started (every deploy) asked the guard again for what
Redis already held. Here an operation that needs a connection still being set up waits for it within
its own budget, as for any answer; if the budget runs out first, the set-up goes on and the operation
is a miss for that check only (:attr:`SetupWait.still_connecting`), not a failure of Redis.

How: :func:`off_path` subclasses a redis-py connection class so that ``connect()`` (the pools',
Sentinel's) and ``connect_check_health()`` (what a cluster node's command calls) start or join the
connection's set-up task and wait for it, shielded: a waiter's cancellation never cancels the set-up.
While that task runs the connection says it is not connected (to everyone but the task), so no other
operation sends a command on a half-made connection; a set-up that fails or times out disconnects
what it opened. The operation in progress is told through a context variable (:func:`watching`).

And operations do not outnumber the connections (:class:`Capacity`): a burst of lookups on a client
with one connection open queues for it (a round trip each, well within their budgets) while more
connections are set up in the background, instead of each one waiting for a connection of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, cast

from redis.asyncio.connection import AbstractConnection
from redis.exceptions import TimeoutError as RedisTimeoutError

from guardcache.cache.redis.health import StallTolerantTimeout

_IN_SETUP: contextvars.ContextVar[bool] = contextvars.ContextVar("guardcache_redis_in_setup", default=False)
_WAITER: contextvars.ContextVar[SetupWait | None] = contextvars.ContextVar(
    "guardcache_redis_setup_wait", default=None
)


class SetupWait:
    """What one operation saw of connection set-ups: how many it was waiting for when it ended, and
    the first one that failed."""

    __slots__ = ("failed", "pending")

    def __init__(self) -> None:
        self.pending = 0
        self.failed: BaseException | None = None

    @property
    def still_connecting(self) -> bool:
        """The operation ended while a set-up it waited for was still running (none had failed):
        a miss for this operation, not a failure of Redis."""
        return self.pending > 0 and self.failed is None


def watching(wait: SetupWait) -> contextvars.Token[SetupWait | None]:
    """Make ``wait`` the running operation's record (``_WAITER.reset(token)`` when it ends). Tasks
    the operation starts (a cluster's commands to several nodes) copy the context, so they report
    to the same record."""
    return _WAITER.set(wait)


def done_watching(token: contextvars.Token[SetupWait | None]) -> None:
    _WAITER.reset(token)


class SetUps:
    """The connection set-ups of one client: their time limit, the tasks running, and how many were
    started (the store tells by it whether set-ups overlapped an operation)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.running: set[asyncio.Task[None]] = set()
        self.started = 0

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.running.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: whoever waited has seen it; nobody may have waited

    async def cancel(self) -> None:
        """Stop every set-up still running (the client is closing)."""
        tasks = list(self.running)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Capacity:
    """``async with capacity:`` around each operation of a client: at most as many at once as it has
    connections open, up to ``limit`` (``pool_size``). When operations find them all busy, ``grow(n)``
    (``n`` connections taken from the pool of every node the client writes to, the idle ones and
    new ones, set up together and given back) runs in the
    background for as many as are waiting, and lets as many more operations in once they are open;
    until then operations take turns on the open ones. Why: a new connection takes a set-up (80 ms
    through a slow TLS handshake, a Sentinel asked first, a starved CPU), far more than the round
    trips of a few operations queued behind a busy one, and an operation that waits for a set-up
    misses.

    ``open`` counts what the client had when it came up (:meth:`opened`) and what growing added; a
    connection that breaks is set up again by the operation that next needs it. ``on_failure`` is
    told when growing fails (the store: a Redis that was up and now fails to set up a connection
    is failing, and its circuit opens)."""

    def __init__(self, limit: int, grow: Callable[[int], Awaitable[None]]) -> None:
        self.limit = limit
        self.open = 0
        self.growing = 0  # connections being added
        self.on_failure: Callable[[BaseException], None] | None = None
        self._grow = grow
        self._slots = asyncio.Semaphore(0)
        self._tasks: set[asyncio.Task[None]] = set()
        self._waiting = 0

    def opened(self, n: int = 1) -> None:
        """``n`` more connections are open: as many more operations may run at once."""
        n = min(n, self.limit - self.open)
        self.open += n
        for _ in range(n):
            self._slots.release()

    def _start(self, n: int, take: int = 0) -> asyncio.Task[None] | None:
        n = min(n, self.limit - self.open - self.growing)
        if n <= 0:
            return None
        self.growing += n
        # A fresh context: growing belongs to no operation (and reports to none).
        task = asyncio.get_running_loop().create_task(
            self._grow_some(n, max(n, take)), name="guardcache-redis-grow", context=contextvars.Context()
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def __aenter__(self) -> Capacity:
        if self._slots.locked():
            self._start(self._waiting + 1 - self.growing)
        self._waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._slots.release()

    async def _grow_some(self, n: int, take: int) -> None:
        try:
            await self._grow(take)
        except Exception as exc:  # not now: the next queue tries again
            if self.on_failure is not None:
                self.on_failure(exc)
        else:
            self.opened(n)
        finally:
            self.growing -= n

    async def fill(self) -> None:
        """Open connections up to the limit and wait for them: a warm-up. The pool is taken whole
        (``limit`` connections, the ones already open among them), so that exactly ``limit`` are
        open after it."""
        task = self._start(self.limit, take=self.limit)
        if task is not None:
            await asyncio.shield(task)

    async def aclose(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def describe(exc: BaseException) -> str:
    """``Type: message`` (just the type when there is no message), for log lines."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def node_name(conn: Any) -> str:
    """Where a connection goes, for messages: ``host:port`` (or the socket's path); with Sentinel,
    the service (the primary's address is what its set-up looks up)."""
    pool = getattr(conn, "connection_pool", None)
    service = getattr(pool, "service_name", None)
    if service is not None:
        return f"the primary of service {service!r}"
    try:
        return str(conn._host_error())
    except Exception:  # a connection class without it: its repr will do
        return repr(conn)


def off_path(base: type[AbstractConnection], setups: SetUps) -> type[AbstractConnection]:
    """``base`` (a redis-py asyncio connection class: plain, TLS, Unix socket, Sentinel-managed) with
    its set-up in a task of its own, under ``setups.timeout_s``; see the module doc."""
    timeout_s = setups.timeout_s

    class OffPath(base):  # type: ignore[valid-type,misc]
        _gc_task: asyncio.Task[None] | None = None

        @property
        def is_connected(self) -> bool:
            task = self._gc_task
            if task is not None and not task.done() and not _IN_SETUP.get():
                return False  # being set up: not usable yet; connecting joins the set-up
            return cast(bool, super().is_connected)

        async def connect(self) -> None:
            if _IN_SETUP.get():
                await super().connect()
            else:
                await self._gc_set_up()

        async def connect_check_health(
            self, check_health: bool = True, retry_socket_connect: bool = True
        ) -> None:
            if _IN_SETUP.get():
                await super().connect_check_health(check_health, retry_socket_connect)
            else:
                await self._gc_set_up()

        async def _gc_set_up(self) -> None:
            if self.is_connected:
                return
            task = self._gc_task
            if task is None or task.done():
                # A fresh context: the set-up belongs to no operation (and reports to none).
                task = asyncio.get_running_loop().create_task(
                    self._gc_connect(), name="guardcache-redis-connect", context=contextvars.Context()
                )
                self._gc_task = task
                setups.started += 1
                setups.running.add(task)
                task.add_done_callback(setups._finished)
            wait = _WAITER.get()
            if wait is not None:
                wait.pending += 1
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                raise  # the waiter's budget ran out (or it was cancelled): the set-up goes on
            except BaseException as exc:
                if wait is not None and wait.failed is None:
                    wait.failed = exc
                raise
            if wait is not None:
                wait.pending -= 1

        async def _gc_connect(self) -> None:
            _IN_SETUP.set(True)
            try:
                async with StallTolerantTimeout(timeout_s):
                    await super().connect()
                self._gc_task = None  # set up: is_connected is the connection's own again
            except BaseException as exc:
                with contextlib.suppress(Exception):  # never leave a half-made connection behind
                    await self.disconnect(nowait=True)  # (TCP open, handshake unanswered)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                if type(exc) is TimeoutError:  # our limit, not redis-py's: say where
                    raise RedisTimeoutError(
                        f"connection set-up with {node_name(self)} took longer than {timeout_s * 1000:.0f} ms"
                    ) from None
                raise

    OffPath.__name__ = OffPath.__qualname__ = f"OffPath{base.__name__}"
    return OffPath


def is_off_path(cls: type[Any]) -> bool:
    """Whether ``cls`` came from :func:`off_path`."""
    return cls.__name__.startswith("OffPath") and hasattr(cls, "_gc_set_up")


__all__ = [
    "Capacity",
    "SetUps",
    "SetupWait",
    "describe",
    "done_watching",
    "is_off_path",
    "node_name",
    "off_path",
    "watching",
]
