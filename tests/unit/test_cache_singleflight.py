"""get_or_compute: one computation per key for coroutines, threads and other event loops, under every
policy of the registry (the single flight is PolicyCache's, written once)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from guardcache.cache import POLICY_NAMES, PolicyCache, cache_class


@pytest.fixture(params=POLICY_NAMES)
def kind(request: pytest.FixtureRequest) -> type[PolicyCache]:
    return cache_class(request.param)


class Counter:
    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    def bump(self) -> int:
        with self.lock:
            self.calls += 1
            return self.calls


async def test_a_thousand_coroutines_on_one_key_make_one_computation(kind: type[PolicyCache]) -> None:
    c = kind(10, track_stats=True)
    counter = Counter()
    gate = asyncio.Event()

    async def compute() -> str:
        counter.bump()
        await gate.wait()
        return "verdict"

    tasks = [asyncio.create_task(c.get_or_compute("k", compute)) for _ in range(1000)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert c.in_flight() == 1
    gate.set()
    results = await asyncio.gather(*tasks)
    assert results == ["verdict"] * 1000
    assert counter.calls == 1
    s = c.get_stats()
    assert (s.misses, s.hits, s.coalesced, s.puts) == (1, 999, 999, 1)
    assert await c.get_or_compute("k", compute) == "verdict"  # now a plain hit
    assert counter.calls == 1 and c.in_flight() == 0


async def test_a_stored_value_is_returned_without_computing(kind: type[PolicyCache]) -> None:
    c = kind(10, track_stats=True)
    c.put("k", None)

    async def boom() -> None:
        raise AssertionError("must not run")

    assert await c.get_or_compute("k", boom) is None


async def test_an_exception_reaches_every_asker_and_nothing_is_stored(kind: type[PolicyCache]) -> None:
    c = kind(10, track_stats=True)
    gate = asyncio.Event()

    async def fail() -> str:
        await gate.wait()
        raise RuntimeError("backend 503")

    tasks = [asyncio.create_task(c.get_or_compute("k", fail)) for _ in range(20)]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, RuntimeError) and str(r) == "backend 503" for r in results)
    assert not c.contains("k") and c.get_stats().puts == 0 and c.in_flight() == 0

    async def ok() -> str:
        return "fresh"

    assert await c.get_or_compute("k", ok) == "fresh"  # the key is not stuck
    assert c.contains("k")


async def test_an_explicit_default_replaces_the_exception_for_every_asker(kind: type[PolicyCache]) -> None:
    c = kind(10)

    async def fail() -> str:
        await asyncio.sleep(0.01)
        raise ValueError("bad json")

    results = await asyncio.gather(*(c.get_or_compute("k", fail, default=None) for _ in range(5)))
    assert results == [None] * 5
    assert not c.contains("k")


async def test_cancelling_the_first_asker_does_not_cancel_the_work_for_others(
    kind: type[PolicyCache],
) -> None:
    c = kind(10, track_stats=True)
    counter = Counter()
    gate = asyncio.Event()

    async def compute() -> str:
        counter.bump()
        await gate.wait()
        return "v"

    first = asyncio.create_task(c.get_or_compute("k", compute))
    await asyncio.sleep(0)
    others = [asyncio.create_task(c.get_or_compute("k", compute)) for _ in range(3)]
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    gate.set()
    assert await asyncio.gather(*others) == ["v", "v", "v"]
    assert counter.calls == 1 and c.get("k") == "v"


async def test_when_every_asker_leaves_the_work_is_cancelled_and_the_key_is_free(
    kind: type[PolicyCache],
) -> None:
    c = kind(10)
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def hang() -> str:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    t = asyncio.create_task(c.get_or_compute("k", hang))
    await started.wait()
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    await asyncio.wait_for(cancelled.wait(), 10)
    await asyncio.sleep(0)
    assert c.in_flight() == 0 and not c.contains("k")

    async def quick() -> str:
        return "now"

    assert await asyncio.wait_for(c.get_or_compute("k", quick), 10) == "now"


async def test_threads_and_a_second_event_loop_join_the_same_computation(kind: type[PolicyCache]) -> None:
    c = kind(10, track_stats=True)
    counter = Counter()
    release = threading.Event()

    async def compute() -> str:
        counter.bump()
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 30)
        return "shared"

    leader = asyncio.create_task(c.get_or_compute("k", compute))
    await asyncio.sleep(0)  # the leader asks first
    assert c.in_flight() == 1
    results: list[object] = []

    def sync_asker() -> None:
        results.append(c.get_or_compute_sync("k", lambda: counter.bump() and "own"))

    def other_loop_asker() -> None:
        results.append(asyncio.run(c.get_or_compute("k", compute)))

    threads = [threading.Thread(target=sync_asker) for _ in range(4)]
    threads += [threading.Thread(target=other_loop_asker) for _ in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while c.get_stats().coalesced < 6 and time.monotonic() < deadline:  # noqa: ASYNC110 (other threads)
        await asyncio.sleep(0.01)
    release.set()
    assert await leader == "shared"
    await asyncio.get_running_loop().run_in_executor(None, lambda: [t.join(30) for t in threads])
    assert results == ["shared"] * 6
    assert counter.calls == 1
    assert c.get_stats().coalesced == 6


def test_sync_computation_is_shared_by_threads(kind: type[PolicyCache]) -> None:
    c = kind(10, track_stats=True)
    counter = Counter()
    barrier = threading.Barrier(16)

    def slow() -> str:
        counter.bump()
        time.sleep(0.05)
        return "v"

    out: list[str] = []

    def worker() -> None:
        barrier.wait()
        out.append(c.get_or_compute_sync("k", slow))

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == ["v"] * 16 and counter.calls == 1
    s = c.get_stats()
    assert s.hits + s.misses == 16 and s.misses == 1


def test_sync_exception_reaches_all_threads_and_nothing_is_stored(kind: type[PolicyCache]) -> None:
    c = kind(10)
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def fail() -> str:
        time.sleep(0.05)
        raise KeyError("nope")

    def worker() -> None:
        barrier.wait()
        try:
            c.get_or_compute_sync("k", fail)
        except KeyError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 8 and not c.contains("k")
    assert c.get_or_compute_sync("k", lambda: "ok") == "ok"


def test_sync_flavour_refuses_coroutine_functions(kind: type[PolicyCache]) -> None:
    c = kind(10)

    async def coro() -> str:
        return "x"

    with pytest.raises(TypeError, match="get_or_compute"):
        c.get_or_compute_sync("k", coro)
    assert c.in_flight() == 0


async def test_capacity_zero_still_coalesces_but_stores_nothing(kind: type[PolicyCache]) -> None:
    c = kind(0)
    counter = Counter()

    async def compute() -> int:
        counter.bump()
        await asyncio.sleep(0.01)
        return 7

    assert await asyncio.gather(*(c.get_or_compute("k", compute) for _ in range(10))) == [7] * 10
    assert counter.calls == 1 and c.size() == 0
