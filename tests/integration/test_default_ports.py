"""The default-ports lock is real: two tests, in two processes as on two pytest-xdist workers, never
hold guardcache's default ports at once. The second one waits, and past its wait runs on other
ports; it never binds the port the first one holds."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.default_ports import DefaultPortsLock
from tests.integration.quickstart_support import ROOT, quickstart

HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from tests.default_ports import DefaultPortsLock
    from tests.integration.quickstart_support import quickstart

    lock_file, tmp = Path(sys.argv[1]), Path(sys.argv[2])
    with quickstart(tmp, lock=DefaultPortsLock(lock_file)) as qs:
        print(qs.emulate_port, qs.serve_port, qs.as_is, flush=True)
        sys.stdin.read()  # hold until the test closes our stdin
    """
)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str], list[str]]]:
    """Another process (as another worker would be) holding the quickstart's ports under a lock
    file of this test's own; yields the lock file, the process and what it holds."""
    lock_file = tmp_path / "default-ports.lock"
    (tmp_path / "holder").mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock_file), str(tmp_path / "holder")],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        held = proc.stdout.readline().split()  # printed once it holds the lock
        assert len(held) == 3, held
        yield lock_file, proc, held
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=60)


def test_a_second_holder_in_another_process_waits_for_the_lock(
    holder: tuple[Path, subprocess.Popen[str], list[str]],
) -> None:
    lock_file, proc, _ = holder
    with DefaultPortsLock(lock_file).hold(wait=0.5) as held:
        assert not held  # the other process has it
    assert proc.stdin is not None
    proc.stdin.close()  # the holder leaves its with-block and exits
    proc.wait(timeout=60)
    with DefaultPortsLock(lock_file).hold(wait=60) as held:
        assert held


def test_two_holders_never_share_a_default_port(
    holder: tuple[Path, subprocess.Popen[str], list[str]], tmp_path: Path, recwarn: pytest.WarningsRecorder
) -> None:
    lock_file, _, (emulate, serve, _) = holder
    with quickstart(tmp_path, wait=0.5, lock=DefaultPortsLock(lock_file)) as qs:
        assert not qs.as_is  # it did not get the lock: a copy on free ports
        assert {qs.emulate_port, qs.serve_port}.isdisjoint({int(emulate), int(serve)})
    assert any("another test held the default ports" in str(w.message) for w in recwarn)


def test_a_holder_of_one_process_waits_for_another_holder_of_the_same_process(tmp_path: Path) -> None:
    # flock on a second descriptor of the same file would never be granted to its own process: the
    # second holder waits its time and is told no, rather than hanging the worker.
    lock = DefaultPortsLock(tmp_path / "default-ports.lock")
    with lock.hold(wait=1) as first:
        assert first
        with lock.hold(wait=0.2) as second:
            assert not second
    with lock.hold(wait=1) as again:
        assert again


def test_the_lock_file_is_one_for_every_worker() -> None:
    # Per-worker paths (pytest's tmp_path, an xdist worker id) would give each worker a lock of its own.
    code = "from tests.default_ports import LOCK_FILE; print(LOCK_FILE)"
    paths = {
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env={**_env_without_xdist(), "PYTEST_XDIST_WORKER": worker},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for worker in ("gw0", "gw1")
    }
    assert len(paths) == 1


def _env_without_xdist() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
