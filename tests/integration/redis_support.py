"""A real ``redis-server`` on a free loopback port for the Redis tier's tests.

``tests/integration/conftest.py`` registers the fixtures for every integration test.

``redis_server`` yields a :class:`RedisServer` (``.url``, ``.kill()``, ``.restart()``, ``.pause()``,
``.resume()``, ``.client()``);
``redis_url`` yields just the URL. The server runs without persistence in a temp dir and is killed at
teardown. A missing ``redis-server`` binary FAILS the test (CI installs it; a silent skip would hide
the whole tier's coverage).
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from guardcache.cache import LFUCache
from guardcache.cache.redis import RedisSettings, TieredCache, build_tiered_cache
from guardcache.checks import codec
from guardcache.checks.verdict import CachedCheck, Verdict
from guardcache.llm.types import Usage

#: The secret every test tier shares unless a test says otherwise (>= 16 bytes, like production).
TEST_SECRET = b"guardcache-test-secret-0123456789abcdef"

INSTALL_HINT = (
    "redis-server is not installed (or not on PATH); install it with: apt-get install -y redis-server"
)


def free_port() -> int:
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
    """One ``redis-server`` process; ``kill()`` and ``restart()`` keep the same port."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail(INSTALL_HINT, pytrace=False)
        self.binary = binary
        self.workdir = workdir
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 5.0) -> None:
        cmd = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.workdir),
            "--protected-mode", "no",
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
        """A synchronous client for a test's own setup and assertions."""
        return redis.Redis.from_url(self.url, socket_timeout=5)


@pytest.fixture
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A fresh ``redis-server`` for one test (started, PING answered), killed at teardown."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    for attempt in range(3):  # the free port may be taken between probing and binding
        try:
            server.start()
            break
        except RuntimeError:
            if attempt == 2:
                raise
            server.port = free_port()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The URL of ``redis_server``."""
    return redis_server.url


def verdict(label: str = "safe", allowed: bool = True) -> CachedCheck:
    """A cached check value as the content-safety rail stores it."""
    return CachedCheck(
        Verdict(allowed, () if allowed else ("S1",), label), Usage(400, 6, 406, 256, "m", "nim")
    )


def make_tier(
    url: str, scope: str = "content_safety:00000000", *, l1_size: int = 1000, **settings: object
) -> TieredCache:
    """A tiered cache (fresh L1) on ``url`` with the library codec and :data:`TEST_SECRET`;
    ``settings`` override :class:`RedisSettings` fields (e.g. ``timeout_ms=50``, ``lease_ms=300``,
    ``secret=b"..."``)."""
    opts: dict[str, object] = {"key_prefix": "gctest", "timeout_ms": 200.0, "secret": TEST_SECRET, **settings}
    return build_tiered_cache(
        LFUCache(l1_size, track_stats=True),
        codec=codec,
        settings=RedisSettings(url=url, **opts),  # type: ignore[arg-type]
        scope=scope,
    )


__all__ = [
    "INSTALL_HINT",
    "TEST_SECRET",
    "RedisServer",
    "free_port",
    "make_tier",
    "redis_server",
    "redis_url",
    "verdict",
]
