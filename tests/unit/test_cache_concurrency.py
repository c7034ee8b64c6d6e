"""Invariants under contention: size <= maxsize, hits + misses == lookups, one computation per key."""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter

from guardcache.cache import LFUCache


def test_sixteen_threads_of_mixed_operations_keep_the_invariants() -> None:
    maxsize, threads, ops = 200, 16, 10_000
    c = LFUCache(maxsize, track_stats=True)
    lookups = [0] * threads
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        rnd = random.Random(n)
        barrier.wait()
        try:
            for _ in range(ops):
                key = rnd.randrange(1000)
                r = rnd.random()
                if r < 0.6:
                    value = c.get(key)
                    lookups[n] += 1
                    assert value is None or value == key * 2
                elif r < 0.9:
                    c.put(key, key * 2)
                elif r < 0.97:
                    c.contains(key)
                    c.entry(key)
                else:
                    c.delete(key)
                assert c.size() <= maxsize
        except BaseException as exc:  # surfaced below: a thread's assert must fail the test
            errors.append(exc)

    ts = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    s = c.get_stats()
    assert s.current_size <= maxsize
    assert s.hits + s.misses == sum(lookups)
    order = c.keys_in_eviction_order()
    assert len(order) == len(set(order)) == c.size()
    freqs = [c.entry(k).frequency for k in order]  # type: ignore[union-attr]
    assert freqs == sorted(freqs)  # the list stays ordered by frequency


async def test_a_burst_of_coroutines_over_many_keys_computes_each_key_once() -> None:
    c = LFUCache(1000, track_stats=True)
    calls: Counter[int] = Counter()

    async def compute(k: int) -> int:
        calls[k] += 1
        await asyncio.sleep(0.001 * (k % 5))
        return k * 10

    keys = [k for k in range(50) for _ in range(40)]
    random.Random(3).shuffle(keys)
    results = await asyncio.gather(*(c.get_or_compute(k, lambda k=k: compute(k)) for k in keys))
    assert results == [k * 10 for k in keys]
    assert set(calls.values()) == {1} and len(calls) == 50
    s = c.get_stats()
    assert s.misses == 50 and s.hits + s.misses == len(keys)


def test_threads_with_their_own_loops_share_computations() -> None:
    c = LFUCache(100, track_stats=True)
    calls: Counter[int] = Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    async def compute(k: int) -> int:
        with lock:
            calls[k] += 1
        await asyncio.sleep(0.05)
        return -k

    results: list[object] = []  # per thread: its answers, or the exception it raised

    def worker() -> None:
        async def main() -> list[int]:
            barrier.wait()
            return await asyncio.gather(*(c.get_or_compute(k, lambda k=k: compute(k)) for k in range(10)))

        try:
            results.append(asyncio.run(main()))
        except Exception as exc:  # reported below: an assert in a thread would only warn
            results.append(exc)

    ts = [threading.Thread(target=worker) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert results == [[-k for k in range(10)]] * 8
    assert set(calls.values()) == {1} and len(calls) == 10
