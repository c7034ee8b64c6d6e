"""One budget bounds a whole ChatClient call: attempts, queueing, backoff and Retry-After waits.

Over httpx2.MockTransport (no sockets); tests/integration/test_backend_misbehaving.py runs the same
properties against real misbehaving servers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx2
import pytest

from guardcache.errors import BackendStatusError, BackendTimeoutError
from guardcache.llm.budget import DEFAULT_TIMEOUT, phase_timeouts
from guardcache.llm.client import ChatClient
from guardcache.llm.httpx_pool import ClientPool
from guardcache.llm.retry import RetryPolicy
from guardcache.llm.transport_contract import Timeouts
from tests.unit.test_llm_client import BASE, MESSAGES, Script, ok


def cut_short(started: float, budget: float) -> None:
    """The call was cut by ``budget``, long before an unbounded one would end (a 30 s backend, a
    thousand retries). 10x the budget: room for a CPU-starved CI VM running a timer late, not a
    measure of how late."""
    elapsed = time.monotonic() - started
    assert elapsed < 10 * budget, f"{elapsed:.2f} s for a call with a {budget} s budget"


def slow(
    seconds: float, then: httpx2.Response | None = None, arrived: list[httpx2.Request] | None = None
) -> httpx2.AsyncBaseTransport:
    """A backend that answers after ``seconds``; ``arrived`` collects each request as it comes in."""

    async def handler(request: httpx2.Request) -> httpx2.Response:
        if arrived is not None:
            arrived.append(request)
        await asyncio.sleep(seconds)
        return then if then is not None else ok()

    return httpx2.MockTransport(handler)


async def until(condition: Callable[[], bool], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.005)


# --- what the budget is --------------------------------------------------------------------------


def test_one_number_is_the_whole_call_budget_with_phases_inside_it() -> None:
    client = ChatClient(BASE, model="m", timeout=2)
    assert client.deadline_s == 2.0
    assert client.timeout.connect == 2.0 and client.timeout.read == 2.0
    assert client.timeout.pool is None  # queueing is bounded by the budget, not by a pool timeout
    assert ChatClient(BASE, model="m", timeout=30).timeout.connect == 2.0  # a dead host fails fast
    assert ChatClient(BASE, model="m", timeout=0.5).timeout.connect == 0.5


def test_an_httpx_timeout_bounds_the_call_by_its_read_phase_unless_deadline_s_says_otherwise() -> None:
    assert ChatClient(BASE, model="m").deadline_s == DEFAULT_TIMEOUT.read == 10.0
    assert ChatClient(BASE, model="m", timeout=httpx2.Timeout(60, connect=2)).deadline_s == 60
    assert ChatClient(BASE, model="m", timeout=5, deadline_s=1.5).deadline_s == 1.5
    assert ChatClient(BASE, model="m", timeout=Timeouts(2, 60, 5, None)).deadline_s == 60
    unbounded = ChatClient(BASE, model="m", timeout=None)
    assert unbounded.deadline_s is None and unbounded.timeout == Timeouts()
    assert phase_timeouts(None) == Timeouts()
    # The client's own phase type; an httpx2.Timeout given is read by its attributes.
    assert phase_timeouts(5) == Timeouts(connect=2.0, read=5, write=5, pool=None)
    assert Timeouts.of(httpx2.Timeout(7, connect=1)) == Timeouts(1, 7, 7, 7)


@pytest.mark.parametrize("kwargs", [{"timeout": 0}, {"timeout": -1.0}, {"deadline_s": 0}])
def test_a_budget_that_is_not_positive_is_rejected_at_construction(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="> 0"):
        ChatClient(BASE, model="m", **kwargs)  # type: ignore[arg-type]


# --- the budget bounds everything ----------------------------------------------------------------


async def test_a_slow_answer_is_cut_at_the_budget_and_the_error_names_it() -> None:
    async with ChatClient(BASE, model="m", timeout=0.2, transport=slow(30)) as client:
        started = time.monotonic()
        with pytest.raises(BackendTimeoutError) as info:
            await client.complete(MESSAGES)
    cut_short(started, 0.2)
    message = str(info.value)
    assert "within this call's 0.2 s budget (timeout)" in message
    assert "request in flight" in message and "1 attempt" in message
    assert info.value.url == client.url and info.value.status is None


async def test_retry_after_longer_than_the_time_left_fails_at_once_with_the_status() -> None:
    script = Script(httpx2.Response(429, headers={"Retry-After": "30"}), ok())
    async with script.client(timeout=2) as client:
        with pytest.raises(BackendStatusError) as info:
            await client.complete(MESSAGES)
    assert len(script.requests) == 1 and script.delays == []
    assert info.value.status == 429
    assert "waiting 30 s (Retry-After) would pass this call's 2 s budget" in str(info.value)


async def test_retry_after_is_compared_as_sent_not_as_cut_to_max_retry_after() -> None:
    # Cut to 5 s it would fit in 10 s, but the server said it will not serve before 120 s.
    script = Script(httpx2.Response(429, headers={"Retry-After": "120"}), ok())
    async with script.client() as client:
        with pytest.raises(BackendStatusError, match="waiting 120 s"):
            await client.complete(MESSAGES)
    assert len(script.requests) == 1


async def test_a_backoff_that_would_pass_the_budget_is_not_slept() -> None:
    retry = RetryPolicy(backoff_initial=5.0, backoff_max=5.0, jitter=False)
    script = Script(503, ok())
    async with script.client(retry=retry, timeout=1) as client:
        with pytest.raises(BackendStatusError) as info:
            await client.complete(MESSAGES)
    assert script.delays == [] and len(script.requests) == 1
    assert info.value.status == 503 and "(backoff) would pass this call's 1 s budget" in str(info.value)


async def test_retries_with_real_sleeps_end_within_the_budget() -> None:
    # A 1 s budget and 30 ms backoffs: a few retries fit (a second attempt by far, even on a loaded
    # machine), a thousand never do.
    retry = RetryPolicy(max_retries=1000, backoff_initial=0.03, backoff_max=0.03, jitter=False)
    script = Script(503)
    client = ChatClient(BASE, model="m", timeout=1.0, retry=retry, transport=httpx2.MockTransport(script))
    async with client:
        started = time.monotonic()
        with pytest.raises((BackendStatusError, BackendTimeoutError)):
            await client.complete(MESSAGES)
    cut_short(started, 1.0)
    assert 2 <= len(script.requests) < 1000


async def test_an_overrun_during_backoff_names_the_last_failure() -> None:
    retry = RetryPolicy(backoff_initial=0.25, backoff_max=0.25, jitter=False)
    script = Script(502, ok())

    async def sleep_past_the_deadline(delay: float) -> None:
        await asyncio.sleep(delay + 1.0)  # a loop stalled in the backoff

    async with ChatClient(
        BASE,
        model="m",
        timeout=0.3,
        retry=retry,
        transport=httpx2.MockTransport(script),
        sleep=sleep_past_the_deadline,
    ) as client:
        with pytest.raises(BackendTimeoutError) as info:
            await client.complete(MESSAGES)
    assert "waiting to retry" in str(info.value)
    assert "last failure: HTTP 502 Bad Gateway" in str(info.value)


# --- the caller's deadline -----------------------------------------------------------------------


async def test_a_per_call_deadline_earlier_than_the_budget_wins() -> None:
    async with ChatClient(BASE, model="m", timeout=10, transport=slow(30)) as client:
        started = time.monotonic()
        with pytest.raises(BackendTimeoutError, match="the caller's deadline"):
            await client.complete(MESSAGES, deadline=started + 0.2)
    cut_short(started, 0.2)


async def test_a_per_call_deadline_later_than_the_budget_does_not_extend_it() -> None:
    async with ChatClient(BASE, model="m", timeout=0.2, transport=slow(30)) as client:
        started = time.monotonic()
        with pytest.raises(BackendTimeoutError, match=r"this call's 0\.2 s budget"):
            await client.complete(MESSAGES, deadline=started + 60)
    cut_short(started, 0.2)


async def test_a_per_call_deadline_applies_without_a_budget() -> None:
    async with ChatClient(BASE, model="m", timeout=None, transport=slow(30)) as client:
        started = time.monotonic()
        with pytest.raises(BackendTimeoutError, match="the caller's deadline"):
            await client.complete(MESSAGES, deadline=started + 0.2)
    cut_short(started, 0.2)


async def test_a_deadline_already_passed_sends_nothing() -> None:
    script = Script(ok())
    async with script.client() as client:
        with pytest.raises(BackendTimeoutError, match="no time left"):
            await client.complete(MESSAGES, deadline=time.monotonic() - 0.001)
    assert script.requests == []


async def test_a_deadline_that_is_met_changes_nothing() -> None:
    script = Script(ok())
    async with script.client(timeout=5) as client:
        result = await client.complete(MESSAGES, deadline=time.monotonic() + 5)
    assert result.attempts == 1 and result.content
    assert "deadline" not in script.requests[0].content.decode()  # not a body field


async def test_an_outside_cancellation_is_not_turned_into_a_timeout() -> None:
    arrived: list[httpx2.Request] = []
    async with ChatClient(BASE, model="m", timeout=10, transport=slow(30, arrived=arrived)) as client:
        task = asyncio.create_task(client.complete(MESSAGES))
        await until(lambda: len(arrived) == 1)  # the request is in flight
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_an_outer_timeout_shorter_than_the_budget_stays_the_callers() -> None:
    async with ChatClient(BASE, model="m", timeout=10, transport=slow(30)) as client:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await client.complete(MESSAGES)


# --- queueing for a connection -------------------------------------------------------------------


async def test_queueing_for_a_connection_is_bounded_by_the_budget_and_says_so() -> None:
    # max_connections=1 admits 2 requests into httpx2 (see pool.ADMISSION_FACTOR); the third queues.
    # The two admitted ones hold their places well past the third's budget, so the third's timeout
    # always finds it queued (with equal budgets, the holders' timeouts could free the gate first).
    arrived: list[httpx2.Request] = []
    pool = ClientPool(limits=httpx2.Limits(max_connections=1), transport=slow(30, arrived=arrived))
    holders = ChatClient(BASE, model="m", timeout=30, pool=pool)
    queued = ChatClient(BASE, model="m", timeout=0.3, pool=pool)
    held = [asyncio.create_task(holders.complete(MESSAGES)) for _ in range(2)]
    await until(lambda: len(arrived) == 2)  # both admitted and holding their places
    started = time.monotonic()
    with pytest.raises(BackendTimeoutError) as info:
        await queued.complete(MESSAGES)
    cut_short(started, 0.3)
    assert len(arrived) == 2  # the third never got in
    assert "queued for a connection" in str(info.value)
    for task in held:
        task.cancel()
    await asyncio.gather(*held, return_exceptions=True)
    await pool.aclose_all()


async def test_a_burst_larger_than_the_pool_queues_in_order_instead_of_failing() -> None:
    pool = ClientPool(limits=httpx2.Limits(max_connections=2), transport=slow(0.02))
    client = ChatClient(BASE, model="m", timeout=httpx2.Timeout(10, pool=0.05), pool=pool)
    order: list[int] = []

    async def one(i: int) -> None:
        await client.complete(MESSAGES)
        order.append(i)

    await asyncio.gather(*(one(i) for i in range(40)))  # ~0.4 s of queueing, 8x the pool timeout
    assert sorted(order) == list(range(40))
    assert max(order[:10]) < 20 and min(order[-10:]) >= 20  # served in arrival order (FIFO gate)
    await pool.aclose_all()
