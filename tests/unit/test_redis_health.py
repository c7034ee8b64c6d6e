"""The Redis tier's failure handling: backoff, circuit breaker and throttled warnings on a fake clock;
the stall-tolerant deadline on a real event loop (no sockets)."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from guardcache.cache.redis.health import (
    Backoff,
    CircuitBreaker,
    StallTolerantTimeout,
    ThrottledLog,
    runqueue_wait,
)
from tests.clocks import FakeClock


def test_backoff_doubles_up_to_the_cap_and_resets() -> None:
    b = Backoff(0.1, 1.0)
    assert [b.next() for _ in range(6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    b.reset()
    assert b.next() == pytest.approx(0.1)
    with pytest.raises(ValueError):
        Backoff(0, 1)
    with pytest.raises(ValueError):
        Backoff(2, 1)


def test_the_first_error_opens_the_circuit_and_only_a_due_probe_may_close_it() -> None:
    clock = FakeClock()
    cb = CircuitBreaker(base=0.1, cap=1.0, clock=clock)
    assert cb.allow() and cb.closed
    assert cb.record_failure() is True
    assert not cb.allow()
    assert not cb.probe_due()  # backoff not over
    clock.advance(0.1)
    assert cb.probe_due() is True
    assert cb.probe_due() is False  # exactly one probe per period
    assert not cb.allow()  # requests keep skipping Redis while the probe runs
    assert cb.record_success() == 1
    assert cb.allow() and cb.record_success() == 0


def test_failed_probes_double_the_backoff_but_in_flight_errors_do_not() -> None:
    clock = FakeClock()
    cb = CircuitBreaker(base=0.1, cap=0.5, clock=clock)
    cb.record_failure()
    for _ in range(15):  # the burst of concurrent operations that failed with it
        assert cb.record_failure() is False
    assert cb.retry_in() == pytest.approx(0.1)
    delays = []
    for _ in range(4):
        clock.advance(cb.retry_in())
        assert cb.probe_due()
        cb.record_failure(probe=True)
        delays.append(cb.retry_in())
    assert delays == pytest.approx([0.2, 0.4, 0.5, 0.5])
    clock.advance(0.5)
    assert cb.probe_due()
    assert cb.record_success() == 20
    cb.record_failure()
    assert cb.retry_in() == pytest.approx(0.1)  # a new outage starts from the base again


def test_warnings_are_throttled_with_a_doubling_quiet_period(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    log = ThrottledLog(logging.getLogger("guardcache.cache.redis"), base=1.0, cap=4.0, clock=clock)
    caplog.set_level(logging.INFO, logger="guardcache.cache.redis")
    logged = []
    for _ in range(200):  # 20 s of errors, one every 0.1 s
        logged.append(log.warning("Redis down"))
        clock.advance(0.1)
    lines = [r.getMessage() for r in caplog.records]
    # at 0, 1, 3, 7, 11, 15, 19 s: quiet periods 1, 2, 4, 4, ... (capped)
    assert log.emitted == len(lines) == sum(logged) == 7
    assert lines[0] == "Redis down; next report in >= 1 s"
    assert lines[1] == "Redis down (9 similar errors suppressed); next report in >= 2 s"
    assert lines[2].startswith("Redis down (19 similar errors suppressed)")

    log.recovered("Redis back")
    assert caplog.records[-1].levelno == logging.INFO
    assert caplog.records[-1].getMessage() == "Redis back after 200 errors"
    log.recovered("Redis back")  # nothing new to report
    assert [r.getMessage() for r in caplog.records].count("Redis back after 200 errors") == 1


def test_a_flapping_redis_is_throttled_too(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    log = ThrottledLog(logging.getLogger("guardcache.cache.redis"), base=1.0, cap=30.0, clock=clock)
    caplog.set_level(logging.INFO, logger="guardcache.cache.redis")
    for _ in range(100):  # 10 s of: an error, then a recovery, every 0.1 s
        log.warning("Redis down")
        log.recovered("Redis back")
        clock.advance(0.1)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    infos = [r for r in caplog.records if r.levelno == logging.INFO]
    assert len(warnings) == 4  # at 0, 1, 3, 7 s: the schedule does not restart on each recovery
    assert len(infos) == 4  # one recovery line per warning, not per flap
    clock.advance(31)  # a calm half minute: the next incident is news again
    assert log.warning("Redis down") is True
    # the schedule starts over; errors never reported so far are still counted in the line
    assert caplog.records[-1].getMessage() == (
        "Redis down (29 similar errors suppressed); next report in >= 1 s"
    )


async def test_a_slow_operation_times_out_on_time() -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="no answer within 50 ms"):
        async with StallTolerantTimeout(0.05) as deadline:
            await asyncio.sleep(60)
    # On an idle machine it fires after ~50 ms; on a loaded one the loop itself may stall past the
    # deadline, which (by design) moves it up to grace=2 times, plus the stalls. Either way the
    # minute-long operation was cut short, long before it would have ended.
    assert time.monotonic() - started < 10, deadline.extended
    assert deadline.extended <= 2


async def test_a_deadline_missed_because_the_loop_was_blocked_is_extended() -> None:
    loop = asyncio.get_running_loop()
    async with StallTolerantTimeout(0.05) as deadline:
        time.sleep(0.15)  # noqa: ASYNC251  (the loop itself is blocked past the deadline: a stall)
        # The answer was already there: its reader callback runs before the overdue deadline (I/O
        # before timers in a loop iteration), as a reply sitting in the socket would.
        answer = loop.create_future()
        loop.call_soon(answer.set_result, None)
        await answer
    assert deadline.extended == 1


async def test_stall_extensions_are_bounded() -> None:
    with pytest.raises(TimeoutError):
        async with StallTolerantTimeout(0.02, grace=2) as deadline:
            for _ in range(5):
                time.sleep(0.05)  # noqa: ASYNC251
                await asyncio.sleep(0.001)
    assert deadline.extended == 2


async def test_an_outer_cancellation_is_not_turned_into_a_timeout() -> None:
    entered = asyncio.Event()

    async def op() -> None:
        async with StallTolerantTimeout(5):
            entered.set()
            await asyncio.sleep(5)

    task = asyncio.create_task(op())
    await asyncio.wait_for(entered.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def spin_for(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


@pytest.fixture
def one_busy_cpu() -> Iterator[None]:
    """This thread pinned to one CPU with two processes spinning on it (restored, killed after)."""
    cpu = min(os.sched_getaffinity(0))
    pinned = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", pinned]) for _ in range(2)]
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
        for spinner in spinners:
            spinner.kill()
            spinner.wait(10)


@pytest.mark.skipif(
    runqueue_wait() is None or not hasattr(os, "sched_setaffinity"), reason="needs Linux's schedstat"
)
async def test_a_deadline_missed_because_the_loop_waited_for_a_cpu_is_extended(one_busy_cpu: None) -> None:
    """On a busy host the loop is descheduled in slices of a few milliseconds, none of which makes a
    deadline late enough alone; what the loop's thread waited for a CPU is what tells."""
    start = runqueue_wait()
    assert start is not None
    deadline = time.monotonic() + 30
    while runqueue_wait() - start < 0.02:  # type: ignore[operator]  # until the spinners compete
        assert time.monotonic() < deadline, "the spinners never took the CPU"
        spin_for(0.005)

    async def busy() -> None:  # the loop stays runnable, in short slices, as under load
        for _ in range(200):
            spin_for(0.001)
            await asyncio.sleep(0)

    beside = asyncio.create_task(busy())
    async with StallTolerantTimeout(0.05) as timeout:
        await asyncio.sleep(0.06)  # an answer held up by a loop that could not run
    await beside
    assert timeout.extended >= 1
