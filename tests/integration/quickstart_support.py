"""Run ``examples/quickstart`` and the README's snippets the way a new user does: the ``guardcache``
command in a child process on its default port, the app or snippet as a separate ``python`` process
from the repository's root.

The defaults are the point (the quickstart and the snippets name 127.0.0.1:8001 and :8080), so they
are used whenever they are free. A test on them holds the machine-wide default-ports lock
(``tests/default_ports.py``) while its servers listen: another test, on another pytest-xdist worker or
in another run, waits for it rather than finding the port free at the same moment and binding it too.
When the ports are taken by something else (a developer's own ``guardcache emulate``), or the lock
is not had in time, the quickstart is copied with its ports replaced, and ``Quickstart.as_written``
rewrites a snippet the same way: the test still runs every line, only the port differs, and a
warning says why.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from guardcache.emulator import READY_TAG
from guardcache.emulator.cli import DEFAULT_PORT as EMULATE_PORT
from guardcache.server.cli import DEFAULT_PORT as SERVE_PORT
from tests.default_ports import DefaultPortsLock

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart"
CONFIG_AS_WRITTEN = "examples/quickstart/config"
LOCK_WAIT_S = 120.0
"""How long a test waits for another holder of the default ports before it runs on free ones."""


def guardcache_command() -> list[str]:
    """``guardcache`` as a user types it: the console script installed next to this interpreter."""
    script = Path(sys.executable).with_name("guardcache")
    if script.exists():
        return [str(script)]
    found = shutil.which("guardcache")
    return [found] if found else [sys.executable, "-m", "guardcache"]


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Quickstart:
    """Where the quickstart's emulator (and server) listen, and the folder holding its app and config
    (the example itself when the default ports were free, else a copy pointing at the ports used)."""

    folder: Path
    emulate_port: int
    serve_port: int

    @property
    def as_is(self) -> bool:
        return self.folder == QUICKSTART

    def as_written(self, text: str) -> str:
        """``text`` (a snippet naming the default ports and the quickstart's config) for these ports."""
        if self.as_is:
            return text
        return (
            text.replace(f"127.0.0.1:{EMULATE_PORT}", f"127.0.0.1:{self.emulate_port}")
            .replace(f"127.0.0.1:{SERVE_PORT}", f"127.0.0.1:{self.serve_port}")
            .replace(CONFIG_AS_WRITTEN, str(self.folder / "config"))
        )


@contextlib.contextmanager
def quickstart(
    tmp: Path, *, wait: float = LOCK_WAIT_S, lock: DefaultPortsLock | None = None
) -> Iterator[Quickstart]:
    """The quickstart on the default ports, held under the default-ports lock for the ``with``
    block; on free ports (a copy) when something else has them or the lock was not had in time."""
    with (lock or DefaultPortsLock()).hold(wait=wait) as held:
        if held and port_is_free(EMULATE_PORT) and port_is_free(SERVE_PORT):
            yield Quickstart(QUICKSTART, EMULATE_PORT, SERVE_PORT)
            return
        why = (
            f"another process (not one of these tests) listens on 127.0.0.1:{EMULATE_PORT} or :{SERVE_PORT}"
            if held
            else f"another test held the default ports for over {wait:g} s"
        )
        warnings.warn(f"the quickstart runs on free ports: {why}", stacklevel=3)
        yield on_free_ports(tmp)


def on_free_ports(tmp: Path) -> Quickstart:
    """A copy of the quickstart whose config names free ports."""
    emulate, serve = free_port(), free_port()
    folder = tmp / "quickstart"
    shutil.copytree(QUICKSTART, folder)
    config = folder / "config" / "config.yml"
    text = config.read_text(encoding="utf-8").replace(f"127.0.0.1:{EMULATE_PORT}", f"127.0.0.1:{emulate}")
    config.write_text(text, encoding="utf-8")
    return Quickstart(folder, emulate, serve)


@contextlib.contextmanager
def background(
    argv: list[str], *, log: Path, ready: str | None = None, url: str | None = None
) -> Iterator[None]:
    """Start ``argv`` from the repository's root, as a user would in a second terminal; wait until
    its stdout prints a line starting with ``ready`` or ``url`` answers 200; SIGTERM it at the end."""
    with log.open("w", encoding="utf-8") as err:
        proc = subprocess.Popen(argv, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            if ready is not None:
                assert proc.stdout is not None
                line = proc.stdout.readline()  # the emulator prints nothing else on stdout
                assert line.startswith(ready), f"{argv}: {line!r}\n{log.read_text(encoding='utf-8')}"
            if url is not None:
                _wait_for(url, proc, log)
            yield
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover - a hung child
                proc.kill()
                proc.wait()


def _wait_for(url: str, proc: subprocess.Popen[str], log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exited {proc.returncode}:\n{log.read_text(encoding='utf-8')}"
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2.0, trust_env=False).status_code == 200:
                return
        time.sleep(0.1)
    raise AssertionError(f"{url} did not answer within {timeout} s:\n{log.read_text(encoding='utf-8')}")


@contextlib.contextmanager
def emulator(qs: Quickstart, log: Path) -> Iterator[None]:
    """``guardcache emulate``, with ``--port`` only when the default was taken."""
    port = [] if qs.as_is else ["--port", str(qs.emulate_port)]
    with background([*guardcache_command(), "emulate", *port], log=log, ready=READY_TAG):
        yield


@contextlib.contextmanager
def server(qs: Quickstart, log: Path) -> Iterator[None]:
    """``guardcache serve --config examples/quickstart/config`` (with ``--port`` only when needed)."""
    port = [] if qs.as_is else ["--port", str(qs.serve_port)]
    argv = [*guardcache_command(), "serve", "--config", qs.as_written(CONFIG_AS_WRITTEN), *port]
    with background(argv, log=log, url=f"http://127.0.0.1:{qs.serve_port}/health/ready"):
        yield


def run_python(argv: list[str], *, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """``python ...`` from the repository's root, as the READMEs say."""
    return subprocess.run(
        [sys.executable, *argv], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout
    )


def _env() -> dict[str, str]:
    """This environment without proxy settings: a runner's proxy must not carry loopback calls."""
    proxies = ("http_proxy", "https_proxy", "all_proxy")
    return {k: v for k, v in os.environ.items() if k.lower() not in proxies}
