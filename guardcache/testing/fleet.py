"""Child processes started together: each prints ``READY`` once set up, then waits for a ``go`` line.

The protocol of the cross-replica tests' replicas and of the benchmarks' worker processes: set-up
(imports, connections, cache warm-up) stays out of the measured part, and every child's burst starts
at the same moment. Leaving the ``async with`` block kills any child still running, so a failed
assertion or a timeout never leaves a process behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import TracebackType

Process = asyncio.subprocess.Process


class ProcessFleet:
    """``async with ProcessFleet(argvs) as fleet: await fleet.release(); ...``

    ``step_timeout`` bounds each wait for a child (its READY line, :meth:`readline`), so a stuck
    child fails the caller instead of hanging it. With ``capture_stderr`` a child that does not start
    is reported with the end of its stderr; otherwise its stderr goes to ours.
    """

    def __init__(
        self, argvs: Sequence[Sequence[str]], *, capture_stderr: bool = False, step_timeout: float = 120
    ) -> None:
        self.argvs = [list(a) for a in argvs]
        self.capture_stderr = capture_stderr
        self.step_timeout = step_timeout
        self.procs: list[Process] = []

    async def __aenter__(self) -> ProcessFleet:
        try:
            for argv in self.argvs:
                self.procs.append(
                    await asyncio.create_subprocess_exec(
                        *argv,
                        stdin=asyncio.subprocess.PIPE,
                        stdout=asyncio.subprocess.PIPE,
                        stderr=asyncio.subprocess.PIPE if self.capture_stderr else None,
                    )
                )
            for proc in self.procs:
                ready = await self.readline(proc)
                if ready.strip() != b"READY":
                    _, err = await proc.communicate()
                    tail = (err or b"").decode(errors="replace")[-3000:]
                    raise RuntimeError(f"a child process did not start ({ready!r}):\n{tail}")
        except BaseException:
            await self._kill_leftovers()
            raise
        return self

    async def readline(self, proc: Process) -> bytes:
        """One line of ``proc``'s stdout, within ``step_timeout``."""
        assert proc.stdout is not None
        return await asyncio.wait_for(proc.stdout.readline(), self.step_timeout)

    async def release(self) -> None:
        """The barrier: send every child its ``go`` line."""
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._kill_leftovers()

    async def _kill_leftovers(self) -> None:
        for proc in self.procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


__all__ = ["ProcessFleet"]
