"""Time in the emulator: the latency formulas, the FIFO admission gate, and stoppable sleeps.

Every modelled delay is an ``asyncio`` sleep, so hundreds of concurrent requests cost no CPU; every
sleep also ends early when the emulator stops, so a hanging request never blocks shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from .config import LatencyConfig


class EmulatorStopping(Exception):
    """The emulator is shutting down: the request in progress is abandoned (connection dropped)."""


class LatencyModel:
    """The formulas of ``LatencyConfig``, returning seconds already multiplied by ``time_scale``."""

    def __init__(self, config: LatencyConfig) -> None:
        self.config = config
        self._scale = config.time_scale / 1000.0  # ms -> scaled seconds

    @property
    def enabled(self) -> bool:
        return self.config.time_scale > 0

    def overhead(self) -> float:
        return self.config.request_overhead_ms * self._scale

    def prefill(self, uncached_tokens: int) -> float:
        c = self.config
        ms = max(c.ttft_floor_ms, c.ttft_base_ms + c.prefill_ms_per_token * uncached_tokens)
        return ms * self._scale

    def decode_step(self, running: int) -> float:
        c = self.config
        return (c.decode_base_ms + c.decode_ms_per_running * running) * self._scale

    def classify(self, input_tokens: int) -> float:
        c = self.config
        return (c.classify_ms + c.classify_ms_per_token * input_tokens) * self._scale


class Stopper:
    """One per emulator: ``sleep`` waits unless ``stop()`` was called, which wakes every sleeper."""

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None
        self.stopped = False

    def _ensure(self) -> asyncio.Event:
        if self._event is None:  # created lazily so it binds to the loop that serves requests
            self._event = asyncio.Event()
            if self.stopped:
                self._event.set()
        return self._event

    def stop(self) -> None:
        """Wake all sleepers with ``EmulatorStopping``; call from the emulator's loop thread."""
        self.stopped = True
        if self._event is not None:
            self._event.set()

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` (no await at all when <= 0); raise ``EmulatorStopping`` on stop."""
        if self.stopped:
            raise EmulatorStopping
        if seconds <= 0:
            return
        event = self._ensure()
        try:
            async with asyncio.timeout(seconds):
                await event.wait()
        except TimeoutError:
            return
        raise EmulatorStopping


class SlotGate:
    """At most ``limit`` requests run at once; the rest wait in strict FIFO order.

    A released slot is handed directly to the oldest waiter, so late arrivals cannot overtake
    (``asyncio.Semaphore`` only guarantees that loosely). Cancelled waiters leave the queue.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.running = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    async def acquire(self) -> None:
        if self._closed:
            raise EmulatorStopping
        if self.running < self.limit and not self._waiters:
            self.running += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self.release()  # the slot was handed to us just as we were cancelled: pass it on
            else:
                self._remove(waiter)
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot moves to the waiter; running is unchanged
                return
        self.running -= 1

    def close(self) -> None:
        """Fail every waiter and every future acquire with ``EmulatorStopping``."""
        self._closed = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(EmulatorStopping())

    def _remove(self, waiter: asyncio.Future[None]) -> None:
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)
