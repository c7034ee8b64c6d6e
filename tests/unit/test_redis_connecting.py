"""Capacity: a client's operations are no more than its connections open; when they queue, more are
set up in the background (on a real event loop, with a grow function that stands for the pool)."""

from __future__ import annotations

import asyncio

from guardcache.cache.redis.connecting import Capacity


class Pool:
    """What growing reaches: how many connections were asked for, set up when the test says."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.asked: list[int] = []
        self.ready = asyncio.Event()
        self.fail = fail

    async def grow(self, n: int) -> None:
        self.asked.append(n)
        await self.ready.wait()
        if self.fail is not None:
            raise self.fail


async def run_burst(capacity: Capacity, n: int) -> int:
    """``n`` operations at once, each a few loop iterations long; the most that ran together."""
    inside = peak = 0

    async def op() -> None:
        nonlocal inside, peak
        async with capacity:
            inside += 1
            peak = max(peak, inside)
            for _ in range(3):
                await asyncio.sleep(0)
            inside -= 1

    await asyncio.gather(*(op() for _ in range(n)))
    return peak


async def test_a_burst_takes_turns_on_the_open_connection_while_more_are_set_up() -> None:
    pool = Pool()
    capacity = Capacity(4, pool.grow)
    capacity.opened(1)  # what the client had when it came up
    assert await run_burst(capacity, 6) == 1  # one connection open: one operation at a time
    assert sum(pool.asked) == 3 and capacity.growing == 3  # the rest of the pool, for those waiting
    pool.ready.set()
    for _ in range(10):
        await asyncio.sleep(0)
    assert capacity.open == 4 and capacity.growing == 0
    assert await run_burst(capacity, 6) == 4  # now four at a time, never more than pool_size


async def test_fill_opens_the_whole_pool_and_a_failed_growth_is_reported() -> None:
    pool = Pool()
    capacity = Capacity(3, pool.grow)
    capacity.opened(1)
    pool.ready.set()
    await capacity.fill()
    assert capacity.open == 3 and pool.asked == [3]  # the pool taken whole: the open one among them

    failing = Pool(fail=ConnectionError("refused"))
    failing.ready.set()
    reported: list[BaseException] = []
    capacity = Capacity(3, failing.grow)
    capacity.on_failure = reported.append
    capacity.opened(1)
    await run_burst(capacity, 3)  # they queue: growing is tried, and fails
    for _ in range(10):
        await asyncio.sleep(0)
    assert capacity.open == 1 and capacity.growing == 0
    assert reported and isinstance(reported[0], ConnectionError)
