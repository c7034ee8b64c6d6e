"""A real ``redis-server`` on a free loopback port, for tests and benchmarks of the Redis tier.

    server = RedisServer(tmp_dir)
    server.start()            # PING answered; server.url is redis://127.0.0.1:<port>/0
    ...
    server.kill()

It runs without persistence in ``workdir`` (its log is ``workdir/redis.log``). ``kill()`` and
``restart()`` keep the port, ``pause()``/``resume()`` make it hang and answer again, so a test can
play an outage. ``args`` adds options (``--cluster-enabled yes``, ``--replicaof ...``), ``config_file``
comes first (a Sentinel's: ``RedisServer(dir, config_file=conf, args=["--sentinel"])``). The pytest
fixtures ``redis_server`` and ``redis_url`` (``pytest_plugin``) wrap it.
Needs the ``redis-server`` binary on PATH (``apt-get install redis-server``); ``client()`` needs the
``redis`` extra.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis

INSTALL_HINT = (
    "redis-server is not installed (or not on PATH); install it with: apt-get install -y redis-server"
)


class RedisServerNotFound(RuntimeError):
    """No ``redis-server`` binary on PATH."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (another process may take it before you bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pong(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1; ``kill()`` and ``restart()`` keep the same port.

    Usable as a context manager (``with RedisServer(tmp) as server:`` starts it, and kills it on
    exit). ``RedisServerNotFound`` if the binary is missing.
    """

    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        *,
        args: Sequence[str] = (),
        config_file: Path | None = None,
    ) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisServerNotFound(INSTALL_HINT)
        self.binary = binary
        self.workdir = Path(workdir)
        self.port = port or free_port()
        #: More ``--name value`` options after the defaults (e.g. ``--cluster-enabled yes``); they
        #: may be changed between a ``kill()`` and a ``start()`` (e.g. ``--replicaof``).
        self.args = list(args)
        #: A config file given first (``redis-server <file> ...``): a Sentinel's, which it rewrites.
        self.config_file = config_file
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 5.0) -> None:
        """Start the server and wait until it answers PING (``RuntimeError`` if it exits or does
        not answer within ``timeout`` seconds)."""
        cmd = [
            self.binary,
            *([str(self.config_file)] if self.config_file is not None else []),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.workdir),
            "--protected-mode", "no",
            *self.args,
        ]  # fmt: skip
        log = open(self.workdir / "redis.log", "ab")  # noqa: SIM115 (kept open for the child)
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while not _pong(self.port):
            if self.proc.poll() is not None:
                tail = (self.workdir / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited (code {self.proc.returncode}):\n{tail}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"redis-server did not answer PING on port {self.port} in {timeout}s")
            time.sleep(0.01)

    def start_on_free_port(self, attempts: int = 3) -> None:
        """:meth:`start`, trying another free port if the chosen one was taken meanwhile."""
        for attempt in range(attempts):
            try:
                self.start()
                return
            except RuntimeError:
                if attempt == attempts - 1:
                    raise
                self.port = free_port()

    def kill(self) -> None:
        """SIGKILL: connections drop at once, like a crashed or vanished server."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(5)

    def restart(self) -> None:
        """Kill (if running) and start again on the same port; the data is gone (no persistence)."""
        self.kill()
        self.start()

    def pause(self) -> None:
        """SIGSTOP: the server hangs (connections are accepted by the kernel, nothing is answered)
        until :meth:`resume`, however long the test takes under load."""
        assert self.proc is not None and self.proc.poll() is None, "redis-server is not running"
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT: a paused server answers again, starting with the commands that waited."""
        assert self.proc is not None, "redis-server is not running"
        self.proc.send_signal(signal.SIGCONT)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def client(self) -> redis.Redis:
        """A synchronous redis-py client for a test's own setup and assertions."""
        import redis

        return redis.Redis.from_url(self.url, socket_timeout=5)

    def __enter__(self) -> RedisServer:
        self.start_on_free_port()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.kill()


__all__ = ["INSTALL_HINT", "RedisServer", "RedisServerNotFound", "free_port"]
