"""A cancelled Redis operation ends cancelled, whatever redis-py turned the cancellation into.

redis-py cleans up on a cancellation (it disconnects, its reads run under ``asyncio.timeout``) and
the exception that comes out can be a ``ConnectionError`` instead of the ``CancelledError``. Read as a
failure of Redis, that swallowed the cancellation: a CI run hung for 20 minutes in an event loop's
shutdown, where a tier's clear watch went on polling after it was cancelled, and the circuit opened
for nothing. Here the operations raise what redis-py can raise, against a real Redis.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from guardcache.cache.redis.store import FAILED
from guardcache.testing import RedisServer
from tests.integration.redis_support import ready_tier

pytestmark = pytest.mark.integration

DEADLINE_S = 30  # generous: a busy machine; a hang is what these tests catch


def converting(entered: asyncio.Event) -> Any:
    """An operation that turns its cancellation into a ``ConnectionError``, as redis-py's
    clean-up can."""

    async def op(client: Any) -> None:
        entered.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise RedisConnectionError("Connection closed by server.") from None

    return op


async def test_a_cancelled_operation_ends_cancelled_and_is_no_failure(redis_server: RedisServer) -> None:
    tier = await ready_tier(redis_server.url)
    entered = asyncio.Event()
    task = asyncio.create_task(tier.store.background(converting(entered)))
    await asyncio.wait_for(entered.wait(), DEADLINE_S)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, DEADLINE_S)
    assert task.cancelled()
    stats = tier.tier_stats()
    assert stats.l2_errors == 0 and not stats.circuit_open  # a cancel is not Redis failing
    await tier.aclose()


async def test_an_operation_past_its_budget_fails_and_leaves_no_cancel_behind(
    redis_server: RedisServer,
) -> None:
    """The budget's own cancel, surfaced as a ConnectionError: a failure (counted), and the task's
    cancel count is back where it was, so the caller's next operation is not taken for cancelled."""
    tier = await ready_tier(redis_server.url)

    async def caller() -> tuple[Any, int, Any]:
        before = asyncio.current_task().cancelling()  # type: ignore[union-attr]
        result = await tier.store.background(converting(asyncio.Event()))  # runs out its budget
        after = asyncio.current_task().cancelling()  # type: ignore[union-attr]

        async def ping(client: Any) -> Any:
            return await client.ping()

        return result, after - before, await tier.store.background(ping)

    result, left, then = await asyncio.wait_for(asyncio.create_task(caller()), DEADLINE_S)
    assert result is FAILED and left == 0
    assert tier.tier_stats().l2_errors == 1
    assert then is not FAILED  # the next operation ran (its circuit closes on the answer)
    await tier.aclose()


async def test_a_clear_watch_ends_when_cancelled_even_if_its_poll_hides_the_cancel(
    redis_server: RedisServer,
) -> None:
    tier = await ready_tier(redis_server.url)
    watch = tier.clearing
    polled = asyncio.Event()

    async def swallowing_poll() -> bool:  # the worst a poll can do: return as if nothing happened
        polled.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            return False
        return False

    watch.poll = swallowing_poll  # type: ignore[method-assign]
    watch.ensure()
    task = watch._tasks[asyncio.get_running_loop()]
    await asyncio.wait_for(polled.wait(), DEADLINE_S)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=DEADLINE_S)
    assert done, "the clear watch went on after it was cancelled"
    assert task.cancelled()
    await tier.aclose()
