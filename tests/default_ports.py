"""A cross-process lock on guardcache's default ports (8001 for ``guardcache emulate``, 8080 for
``serve``), for the tests that run the quickstart and the docs' snippets as written.

Those tests want the default ports, since the point is that what the README says works. Two such
tests on two pytest-xdist workers (or in two test runs at once) would both find a port free and both
bind it, so whoever uses the defaults holds this lock for as long as its servers listen: an
``flock`` on one file in the system's temporary folder, which the kernel drops when its holder exits,
however it exits. A second holder waits for it; if it still cannot have it after ``wait`` seconds,
it is told so and runs on free ports instead (the quickstart copied with its port replaced), so no
test depends on how the scheduler placed the others.

One process holds it at most once at a time: a second holder in the same process waits like any
other (an ``flock`` on a second descriptor of the same file would wait on itself forever).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

LOCK_FILE = Path(tempfile.gettempdir()) / "guardcache-default-ports.lock"
"""Machine-wide, like the ports: every user's and every run's tests meet here."""

_held_here = threading.Lock()  # one holder per process: flock on a second descriptor would self-deadlock


class DefaultPortsLock:
    """The lock itself: ``with DefaultPortsLock().hold(wait=...) as held:``; ``held`` says whether
    this process now owns the default ports (False: the wait ran out)."""

    def __init__(self, path: Path = LOCK_FILE) -> None:
        self.path = path

    @contextlib.contextmanager
    def hold(self, wait: float = 300.0, poll: float = 0.05) -> Iterator[bool]:
        fd = self._open()
        try:
            held = self._acquire(fd, wait, poll)
            try:
                yield held
            finally:
                if held:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    _held_here.release()
        finally:
            os.close(fd)

    def _open(self) -> int:
        # O_NOFOLLOW: the file sits in a shared folder, and a link planted there must not be followed.
        # Read access is all flock needs, so a file another user made (mode 0644) serves too.
        flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        return os.open(self.path, flags, 0o666)

    @staticmethod
    def _acquire(fd: int, wait: float, poll: float) -> bool:
        deadline = time.monotonic() + wait
        if not _held_here.acquire(timeout=max(wait, 0.0)):
            return False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    _held_here.release()
                    return False
                time.sleep(poll)
