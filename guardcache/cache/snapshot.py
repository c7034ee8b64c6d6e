"""Warm restarts: one in-process cache written to a signed file and read back at the next start.

A restart (every deploy) used to start every process cold, and the guard took the full load until
the hit rate came back. A :class:`Snapshotter` writes its cache's state (entries, values through a
codec, and the policy's order and counts, so a reload is not taken for a scan and evicts as the
stopped process would have: :meth:`~guardcache.cache.policy_cache.PolicyCache.export_state`) on a
graceful stop and every ``interval`` seconds from a thread of its own, never on a request's path.

What a file must be to be loaded (else it is skipped with ONE WARNING line saying why, naming the
setting, and the cache starts empty; nothing here ever raises into a request):

- signed with the key (:mod:`~guardcache.cache.snapshot_format` checks the tag before it parses
  anything, so a modified file can never plant a verdict);
- of this cache's identity (``identity``: the model, the fingerprints of the checks' namespaces,
  ``cache.version``, as the caller builds it) and policy; a smaller ``maxsize`` keeps the safest
  entries;
- no larger than :func:`~guardcache.cache.snapshot_format.max_file_bytes` of the cache's
  ``maxsize``, checked before a byte is read.

Writing is atomic (a temporary file in the same folder, fsync, rename, fsync of the folder): a
reader sees the old file or the new one, never half of one. With several processes on one file
(``guardcache serve --workers N``) one writes: the first to take an ``flock`` on ``<path>.lock``,
held until its snapshotter closes (or its process dies, when the next one to try takes over). Why
not a file per worker: uvicorn's workers have no stable identity (a restart with another
``--workers`` would orphan or miss files), and every worker's cache holds the same popular head
(the kernel spreads connections evenly), so one worker's state warms them all. Why not every
worker writing: rename keeps the file whole either way, but N writers do N times the work and the
file would flip between workers' states.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from guardcache.cache.policy_cache import PolicyCache
from guardcache.cache.snapshot_format import SnapshotError, decode, encode, max_file_bytes

try:  # POSIX; elsewhere every process writes (rename still keeps the file whole)
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("guardcache.cache.snapshot")


class ValueCodec(Protocol):
    """Turns cached values into bytes and back (``decode``: None for bytes it cannot read)."""

    def encode(self, value: Any, /) -> bytes: ...

    def decode(self, data: bytes, /) -> Any | None: ...


#: The identity fields compared at load, in order, with how a mismatch reads.
_IDENTITY = (
    ("model_type", "of another model type"),
    ("model", "of another model"),
    ("version", "of another cache.version"),
    (
        "namespaces",
        "of other checks (a prompt template, its settings or the generation parameters changed)",
    ),
)


class Snapshotter:
    """One cache's snapshot file: :meth:`load` at start, :meth:`save` every ``interval`` (from
    :meth:`start`'s thread) and at :meth:`close`.

    ``where`` names the setting in every message (``config.yml: models[0].cache.snapshot``);
    ``identity`` is what a file must carry to be loaded (JSON values); ``key`` signs and checks.
    """

    def __init__(
        self,
        cache: PolicyCache,
        path: str,
        *,
        key: bytes,
        identity: Mapping[str, Any],
        codec: ValueCodec,
        interval: float,
        where: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cache = cache
        self.path = os.path.abspath(path)
        self._key = key
        self.identity = dict(identity)
        self.codec = codec
        self.interval = interval
        self.where = where
        self._clock = clock
        self._write_lock = threading.Lock()
        self._lock_fd: int | None = None
        self._failing: str | None = None  # the last write failure said, to say it once
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        weakref.finalize(self, self._stop.set)
        _open.add(self)

    # -- loading -------------------------------------------------------------------------------

    def load(self) -> int:
        """Fill the (empty) cache from the file; how many entries it got. A missing file is a
        first start (one INFO line); any other reason not to load is one WARNING line."""
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            log.info("%s: no snapshot at %s yet; starting cold", self.where, self.path)
            return 0
        except OSError as exc:
            return self._skip(f"it cannot be read ({exc.strerror or exc})")
        limit = max_file_bytes(self.cache.maxsize)
        if size > limit:
            return self._skip(
                f"{size} bytes, more than a cache of maxsize {self.cache.maxsize} reads ({limit})"
            )
        try:
            with open(self.path, "rb") as f:
                data = f.read(limit + 1)
            header, state, unreadable = decode(data, self._key, self.codec.decode)
        except OSError as exc:
            return self._skip(f"it cannot be read ({exc.strerror or exc})")
        except SnapshotError as exc:
            return self._skip(str(exc))
        for field, says in _IDENTITY:
            if header.get(field) != self.identity.get(field):
                return self._skip(
                    f"it is {says}: {header.get(field)!r}, this cache is {self.identity.get(field)!r}"
                )
        if state.policy != self.cache.policy:
            return self._skip(
                f"written by the {state.policy} policy; this cache evicts by {self.cache.policy}"
            )
        try:
            loaded = self.cache.restore_state(state)
        except ValueError as exc:
            return self._skip(f"its state cannot be restored ({exc})")
        written = header.get("written_at")
        age = (
            f", written {max(0.0, self._clock() - written):.0f} s ago"
            if isinstance(written, float) and math.isfinite(written)
            else ""
        )
        dropped = f"; {unreadable} values the codec no longer reads left out" if unreadable else ""
        log.info("%s: loaded %d entries from %s%s%s", self.where, loaded, self.path, age, dropped)
        return loaded

    def _skip(self, why: str) -> int:
        log.warning("%s: snapshot %s not loaded: %s; starting cold", self.where, self.path, why)
        return 0

    # -- writing -------------------------------------------------------------------------------

    def writable(self) -> str | None:
        """Why no snapshot could be written now (the folder missing or not writable), or None."""
        folder = os.path.dirname(self.path)
        if not os.path.isdir(folder):
            return f"its folder {folder} does not exist"
        if not os.access(folder, os.W_OK | os.X_OK):
            return f"its folder {folder} is not writable"
        if os.path.isdir(self.path):
            return "it is a folder"
        return None

    def save(self) -> bool:
        """Write the file now if this process is the writer; whether it was written. A failure is
        a WARNING (once per reason, and an INFO line when writing works again), never raised."""
        with self._write_lock:
            if not self._elected():
                return False
            try:
                state = self.cache.export_state()
                data, entries = encode(state, self.identity, self._key, self.codec.encode, self._clock())
                self._write(data)
            except Exception as exc:  # a snapshot must never fail a stop, nor the thread
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                if why != self._failing:
                    log.warning(
                        "%s: snapshot %s not written: %s (%s)",
                        self.where,
                        self.path,
                        why,
                        type(exc).__name__,
                    )
                self._failing = why
                return False
            if self._failing is not None:
                log.info("%s: snapshot %s written again", self.where, self.path)
                self._failing = None
            log.debug("%s: %d entries written to %s", self.where, entries, self.path)
            return True

    def _elected(self) -> bool:
        """Whether this process writes the file: it holds (or now takes) ``<path>.lock``."""
        if fcntl is None or self._lock_fd is not None:
            return True
        try:
            fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return True  # no lock file possible: the write says why it fails, if it does
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            log.debug("%s: another process writes %s", self.where, self.path)
            return False
        self._lock_fd = fd
        return True

    def _write(self, data: bytes) -> None:
        folder = os.path.dirname(self.path)
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(self.path) + ".", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        with contextlib.suppress(OSError):  # the rename itself made durable (not on every OS)
            dir_fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    # -- schedule ------------------------------------------------------------------------------

    def start(self) -> None:
        """Save every ``interval`` seconds from a daemon thread of this snapshotter's (it holds only
        a weak reference: a snapshotter dropped without :meth:`close` stops its thread)."""
        if self._thread is not None or self._closed:
            return
        ref = weakref.ref(self)
        stop, interval = self._stop, self.interval

        def run() -> None:
            while not stop.wait(interval):
                snapshotter = ref()
                if snapshotter is None:
                    return
                snapshotter.save()
                del snapshotter

        self._thread = threading.Thread(target=run, name="guardcache-snapshot", daemon=True)
        self._thread.start()

    def close(self, *, save: bool = True) -> None:
        """Stop the schedule, write a last snapshot (``save``), and give up the writer's lock so
        another process (or the next rails in this one) may write. Idempotent."""
        if self._closed:
            return
        self._closed = True
        _open.discard(self)
        self._stop.set()
        if save:
            self.save()
        with self._write_lock:
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # closing the descriptor releases the flock
                self._lock_fd = None


#: Snapshotters not closed yet: written at a normal interpreter exit too (a script on the blocking
#: API, which has no close of its own to call, still stops gracefully).
_open: weakref.WeakSet[Snapshotter] = weakref.WeakSet()


@atexit.register
def _close_open() -> None:
    for snapshotter in list(_open):
        snapshotter.close()


__all__ = ["Snapshotter", "ValueCodec"]
