"""Running the emulator in this process: in the current event loop, or in a thread of its own.

``EmulatorServer`` serves uvicorn as a task of the CURRENT loop (``async with``), which is what
async tests want: no threads, no second core, and direct access to the ``Emulator`` object.
``EmulatorServer(...).in_thread()`` gives a ``ThreadedEmulator`` with its own loop in a daemon
thread, for synchronous code. The child-process mode lives in ``process.py``.

Admin methods are the same on every handle: sync ``stats()``, ``reset()``, ``set_down()``,
``set_faults()`` and their awaitable twins ``astats()``, ``areset()``, ``aset_down()``,
``aset_faults()``. On ``EmulatorServer`` the sync ones act directly on the emulator (it lives in the
caller's loop, so a blocking HTTP call to itself would deadlock) and the async ones go over HTTP;
elsewhere both go over HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Generator
from types import TracebackType
from typing import Any

import uvicorn

from .app import create_app
from .client import AdminClient, AsyncAdminClient
from .config import EmulatorConfig, FaultConfig
from .engine import Emulator
from .policy import Policy
from .stats import EmulatorStats

_SHUTDOWN_GRACE_SECONDS = 2.0


class EmulatorStartError(RuntimeError):
    """The emulator could not start (e.g. the port is taken); the message says which address."""


class _AdminMethods:
    """URLs and admin calls over HTTP, shared by every way of running the emulator; subclasses
    provide ``config`` and ``port``."""

    config: EmulatorConfig

    @property
    def port(self) -> int:
        raise NotImplementedError

    @property
    def root_url(self) -> str:
        """``http://HOST:PORT`` (admin endpoints live here)."""
        return f"http://{self.config.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1``: what an OpenAI client's ``base_url`` should be."""
        return f"{self.root_url}/v1"

    def stats(self, *, prompts: bool = True) -> EmulatorStats:
        return AdminClient(self.root_url).stats(prompts=prompts)

    def reset(self, *, flush_cache: bool = False) -> None:
        AdminClient(self.root_url).reset(flush_cache=flush_cache)

    def set_down(self, down: bool) -> None:
        AdminClient(self.root_url).set_down(down)

    def set_faults(self, **fields: Any) -> FaultConfig:
        return AdminClient(self.root_url).set_faults(**fields)

    async def astats(self, *, prompts: bool = True) -> EmulatorStats:
        return await AsyncAdminClient(self.root_url).stats(prompts=prompts)

    async def areset(self, *, flush_cache: bool = False) -> None:
        await AsyncAdminClient(self.root_url).reset(flush_cache=flush_cache)

    async def aset_down(self, down: bool) -> None:
        await AsyncAdminClient(self.root_url).set_down(down)

    async def aset_faults(self, **fields: Any) -> FaultConfig:
        return await AsyncAdminClient(self.root_url).set_faults(**fields)


class UvicornServer(uvicorn.Server):
    """uvicorn tuned for embedding: prompt start and stop, optional signal handling.

    Stock uvicorn polls its exit flag every 100 ms and sleeps 100 ms in shutdown; across a test
    suite that starts one server per test, that is most of the run time. This subclass wakes on an
    event, first tells the emulator to abandon sleeping requests (a hang must never hold shutdown),
    then waits briefly for open connections before closing them.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        on_shutdown: Callable[[], None],
        signals: bool,
        on_started: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(config)
        self._on_shutdown = on_shutdown
        self._on_started = on_started
        self._signals = signals
        self._exit: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def port(self) -> int:
        return int(self.servers[0].sockets[0].getsockname()[1])

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if not self._signals:
            yield
            return
        with super().capture_signals():
            yield

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None and self._exit is not None:
            self._loop.call_soon_threadsafe(self._exit.set)

    def request_exit(self) -> None:
        """Ask the server to stop; call from its loop's thread."""
        self.should_exit = True
        if self._exit is not None:
            self._exit.set()

    async def startup(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._exit = asyncio.Event()
        try:
            await super().startup(sockets=sockets)
        except SystemExit:  # uvicorn exits the process on a bind error; a library must not
            raise EmulatorStartError(
                f"emulator cannot listen on {self.config.host}:{self.config.port}"
            ) from None
        if self._on_started is not None:
            self._on_started(self.port)

    async def main_loop(self) -> None:
        assert self._exit is not None
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864000  # on_tick refreshes the Date header every 10 ticks
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._exit.wait()

    async def shutdown(self, sockets: Any = None) -> None:
        self._on_shutdown()
        for server in self.servers:
            server.close()
        state = self.server_state
        for connection in list(state.connections):
            connection.shutdown()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.config.timeout_graceful_shutdown or _SHUTDOWN_GRACE_SECONDS)
        # uvicorn offers no event for "connections drained"; poll briefly.
        while (state.connections or state.tasks) and loop.time() < deadline and not self.force_exit:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        for connection in list(state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()
        for task in list(state.tasks):
            task.cancel()
        for server in self.servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1.0)
        await self.lifespan.shutdown()


def make_uvicorn(
    emulator: Emulator,
    *,
    signals: bool,
    log_level: str | None = None,
    access_log: bool = False,
    on_started: Callable[[int], None] | None = None,
) -> UvicornServer:
    """A configured ``UvicornServer`` for ``emulator`` (bound on ``startup``)."""
    cfg = emulator.config
    config = uvicorn.Config(
        create_app(emulator),
        host=cfg.host,
        port=cfg.port,
        lifespan="off",
        log_config=None,
        log_level=log_level,
        access_log=access_log,
        timeout_graceful_shutdown=int(_SHUTDOWN_GRACE_SECONDS),
    )
    return UvicornServer(config, on_shutdown=emulator.stop, signals=signals, on_started=on_started)


class EmulatorServer(_AdminMethods):
    """The emulator served by uvicorn as a task of the current event loop.

    ``async with EmulatorServer(cfg) as emu:`` starts it (``port=0`` picks a free port) and stops it
    on exit, abandoning any request still in flight. One-shot: a stopped server cannot restart.
    """

    def __init__(self, config: EmulatorConfig | None = None, *, policy: Policy | None = None) -> None:
        self.config = config or EmulatorConfig()
        self._policy = policy
        self.emulator: Emulator | None = None
        self._server: UvicornServer | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        if self._server is None or not self._server.started:
            raise RuntimeError("the emulator is not running")
        return self._server.port

    async def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("EmulatorServer.start() called twice")
        self.emulator = Emulator(self.config, self._policy)
        self._server = make_uvicorn(self.emulator, signals=False)
        self._task = asyncio.create_task(self._server.serve(), name="guardcache-emulator")
        while not self._server.started:
            if self._task.done():
                await self._task  # raises the startup error
                raise EmulatorStartError("the emulator exited during startup")
            await asyncio.sleep(0.001)

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.request_exit()
        try:
            await self._task
        finally:
            self._server = None

    async def __aenter__(self) -> EmulatorServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def in_thread(self) -> ThreadedEmulator:
        """This server's configuration, run in a daemon thread with its own loop instead."""
        return ThreadedEmulator(self.config, policy=self._policy)

    # Direct admin methods: the emulator lives in the caller's loop.

    def _emu(self) -> Emulator:
        if self.emulator is None:
            raise RuntimeError("the emulator is not running")
        return self.emulator

    def stats(self, *, prompts: bool = True) -> EmulatorStats:
        return EmulatorStats.from_dict(self._emu().stats_dict(include_prompts=prompts))

    def reset(self, *, flush_cache: bool = False) -> None:
        self._emu().reset(flush_cache=flush_cache)

    def set_down(self, down: bool) -> None:
        self._emu().set_down(down)

    def set_faults(self, **fields: Any) -> FaultConfig:
        return self._emu().set_faults(**fields)


class ThreadedEmulator(_AdminMethods):
    """The emulator in a daemon thread with its own event loop: ``with ... as emu:`` from sync code."""

    def __init__(self, config: EmulatorConfig | None = None, *, policy: Policy | None = None) -> None:
        self._inner = EmulatorServer(config, policy=policy)
        self.config = self._inner.config
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the emulator is not running")
        return self._port

    def start(self, timeout: float = 10.0) -> None:
        self._thread = threading.Thread(target=self._run, name="guardcache-emulator", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise EmulatorStartError(f"the emulator thread did not start within {timeout}s")
        if self._error is not None:
            raise EmulatorStartError(f"the emulator thread failed: {self._error}") from self._error

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        self._thread = None

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # surfaced by start()
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        await self._inner.start()
        self._port = self._inner.port
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await self._inner.stop()

    def __enter__(self) -> ThreadedEmulator:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
