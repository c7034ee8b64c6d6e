"""CancelAfter: asyncio.timeout's behaviour on the paths that matter to the client and the server."""

from __future__ import annotations

import asyncio

import pytest

from guardcache.llm.cancel import CancelAfter


async def test_the_block_that_runs_out_of_time_raises_timeout_error() -> None:
    scope = CancelAfter(0.01)
    with pytest.raises(TimeoutError):
        async with scope:
            await asyncio.sleep(5)
    assert scope.expired()
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # the cancellation it made is taken back


async def test_a_block_that_ends_in_time_is_left_alone_and_its_timer_is_gone() -> None:
    scope = CancelAfter(0.05)
    async with scope:
        await asyncio.sleep(0)
    await asyncio.sleep(0.1)  # past the deadline: nothing fires into the task any more
    assert not scope.expired()


async def test_a_timeout_error_raised_inside_is_not_the_scopes() -> None:
    scope = CancelAfter(5)
    with pytest.raises(TimeoutError):
        async with scope:
            raise TimeoutError("the block's own")
    assert not scope.expired()


async def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    entered = asyncio.Event()

    async def body() -> None:
        async with CancelAfter(5):
            entered.set()
            await asyncio.sleep(5)

    task = asyncio.create_task(body())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_outer_cancellation_during_expiry_is_not_swallowed() -> None:
    # The scope expires and, before the task runs, someone else cancels it too: the exit must not
    # turn both into a TimeoutError (asyncio.timeout's rule: uncancel() above the count at entry).
    async def body() -> None:
        async with CancelAfter(0):
            await asyncio.sleep(5)

    task = asyncio.create_task(body())
    await asyncio.sleep(0)  # entered; the timer is due
    await asyncio.sleep(0)  # the timer fired: the task is cancelled once
    task.cancel()  # and once more from outside
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_nested_scopes_each_raise_only_their_own_timeout() -> None:
    outer = CancelAfter(0.02)
    inner = CancelAfter(5)
    with pytest.raises(TimeoutError):
        async with outer, inner:
            await asyncio.sleep(5)
    assert outer.expired() and not inner.expired()


async def test_outside_a_task_it_says_so() -> None:
    scope = CancelAfter(1)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[BaseException] = loop.create_future()

    def enter() -> None:  # a loop callback: a running loop, no task
        coro = scope.__aenter__()
        try:
            coro.send(None)
        except BaseException as exc:
            done.set_result(exc)
        finally:
            coro.close()

    loop.call_soon(enter)
    error = await done
    assert isinstance(error, RuntimeError) and "inside a task" in str(error)
