"""Running the emulator in a child process, so a benchmark's client and server get a core each.

The child is ``python -m guardcache.emulator --config-json ...``; it binds (port 0 = any free port)
and prints one line ``GUARDCACHE_EMULATOR_READY {"host": ..., "port": ..., ...}`` on stdout, which
is how the parent learns the port. The parent then confirms ``/v1/health/ready`` and talks to the
child only over HTTP. Stopping sends SIGTERM (graceful: in-flight requests are abandoned), then
SIGKILL if the child has not exited in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
from types import TracebackType
from typing import IO, Any

from .client import AdminClient
from .config import EmulatorConfig
from .server import EmulatorStartError, _AdminMethods

READY_TAG = "GUARDCACHE_EMULATOR_READY"


def ready_line(host: str, port: int) -> str:
    """The line the child prints once it listens; parsed by ``parse_ready_line``."""
    info = {"host": host, "port": port, "base_url": f"http://{host}:{port}/v1", "pid": os.getpid()}
    return f"{READY_TAG} {json.dumps(info)}"


def parse_ready_line(line: str) -> dict[str, Any] | None:
    if not line.startswith(READY_TAG + " "):
        return None
    data: dict[str, Any] = json.loads(line[len(READY_TAG) + 1 :])
    return data


class EmulatorProcess(_AdminMethods):
    """The emulator in a child process; ``with`` or ``async with`` starts and stops it.

    Admin methods: sync ``stats()``/``reset()``/``set_down()``/``set_faults()`` and awaitable
    ``astats()``/``areset()``/``aset_down()``/``aset_faults()``, all over HTTP. In async code prefer
    the ``a*`` forms: the sync ones block the caller's loop for one loopback round trip.
    """

    def __init__(
        self,
        config: EmulatorConfig | None = None,
        *,
        startup_timeout: float = 30.0,
        python: str = sys.executable,
        env: dict[str, str] | None = None,
    ) -> None:
        self.config = config or EmulatorConfig()
        self.startup_timeout = startup_timeout
        self._python = python
        self._env = env
        self._proc: subprocess.Popen[str] | None = None
        self._port: int | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._pump: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the emulator process is not running")
        return self._port

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("the emulator process is not running")
        return self._proc.pid

    def start(self) -> None:
        if self._proc is not None:
            raise RuntimeError("EmulatorProcess.start() called twice")
        cmd = [self._python, "-m", "guardcache.emulator", "--config-json", self.config.to_json()]
        env = {**os.environ, **(self._env or {}), "PYTHONUNBUFFERED": "1"}
        self._proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env
        )
        assert self._proc.stdout is not None
        self._pump = threading.Thread(
            target=_pump, args=(self._proc.stdout, self._lines), name="emulator-stdout", daemon=True
        )
        self._pump.start()
        try:
            info = self._await_ready_line()
            self._port = int(info["port"])
            AdminClient(self.root_url).wait_ready(self.startup_timeout)
        except BaseException:
            self.stop()
            raise

    def _await_ready_line(self) -> dict[str, Any]:
        while True:
            try:
                line = self._lines.get(timeout=self.startup_timeout)
            except queue.Empty:
                raise EmulatorStartError(
                    f"emulator process printed no ready line within {self.startup_timeout}s"
                ) from None
            if line is None:
                code = self._proc.wait() if self._proc else None
                raise EmulatorStartError(f"emulator process exited during startup (code {code})")
            info = parse_ready_line(line.strip())
            if info is not None:
                return info

    def stop(self, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        self._port = None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._pump is not None:
            self._pump.join(timeout)  # the pipe hits EOF once the child is gone
            self._pump = None
        if proc.stdout is not None:
            with contextlib.suppress(OSError):
                proc.stdout.close()

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def __enter__(self) -> EmulatorProcess:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> EmulatorProcess:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    """Drain the child's stdout forever, so it can never block on a full pipe."""
    with contextlib.suppress(ValueError, OSError):
        for line in stream:
            lines.put(line)
    lines.put(None)
