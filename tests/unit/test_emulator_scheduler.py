"""Latency formulas, the FIFO admission gate, stoppable sleeps, and seeded faults."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from guardcache.emulator import FaultConfig, LatencyConfig
from guardcache.emulator.faults import Fault, FaultInjector
from guardcache.emulator.scheduler import EmulatorStopping, LatencyModel, SlotGate, Stopper


def test_latency_formulas_follow_the_reference_and_scale() -> None:
    model = LatencyModel(LatencyConfig())
    assert model.prefill(0) == pytest.approx(0.005)  # the 5 ms floor
    assert model.prefill(1000) == pytest.approx(0.034)  # 4 ms + 0.03 ms x 1000
    assert model.decode_step(10) == pytest.approx(0.0059)  # 5.6 + 0.03 x 10 ms
    half = LatencyModel(LatencyConfig(time_scale=0.5))
    assert half.prefill(1000) == pytest.approx(0.017)
    assert LatencyModel(LatencyConfig(time_scale=0)).prefill(10**6) == 0


def test_classify_latency_is_a_classifier_nims_10_to_30_ms_and_grows_with_the_input() -> None:
    model = LatencyModel(LatencyConfig())
    assert model.classify(0) == pytest.approx(0.012)
    assert model.classify(100) == pytest.approx(0.014)
    assert model.classify(800) == pytest.approx(0.028)
    assert 0.010 <= model.classify(50) < model.classify(500) <= 0.030
    assert LatencyModel(LatencyConfig(time_scale=0)).classify(10**6) == 0


def test_default_latencies_give_the_reference_end_to_end_figures() -> None:
    model = LatencyModel(LatencyConfig())
    prompt, cached = 400, 256

    def end_to_end(tokens: int) -> float:
        return model.overhead() + model.prefill(prompt - cached) + (tokens - 1) * model.decode_step(1)

    assert 0.055 <= end_to_end(6) <= 0.070  # "safe": ~60-70 ms
    assert 0.175 <= end_to_end(29) <= 0.205  # unsafe, two categories: ~190 ms


async def test_gate_admits_up_to_the_limit_then_serves_waiters_in_fifo_order() -> None:
    gate = SlotGate(2)
    order: list[int] = []

    async def request(i: int) -> None:
        await gate.acquire()
        order.append(i)

    await gate.acquire()
    await gate.acquire()
    waiters = [asyncio.create_task(request(i)) for i in range(5)]
    await asyncio.sleep(0)
    assert gate.running == 2 and gate.waiting == 5
    for _ in range(5):
        gate.release()
        await asyncio.sleep(0)
    await asyncio.gather(*waiters)
    assert order == [0, 1, 2, 3, 4]
    assert gate.running == 2


async def test_a_cancelled_waiter_leaves_the_queue_without_losing_a_slot() -> None:
    gate = SlotGate(1)
    await gate.acquire()
    first = asyncio.create_task(gate.acquire())
    second = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    gate.release()
    await asyncio.wait_for(second, 10)
    assert gate.running == 1 and gate.waiting == 0
    gate.release()
    assert gate.running == 0


async def test_closing_the_gate_fails_waiters_and_new_acquires() -> None:
    gate = SlotGate(1)
    await gate.acquire()
    waiter = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    gate.close()
    with pytest.raises(EmulatorStopping):
        await waiter
    with pytest.raises(EmulatorStopping):
        await gate.acquire()


async def test_stop_wakes_a_long_sleep_at_once() -> None:
    stopper = Stopper()
    sleeper = asyncio.create_task(stopper.sleep(60))
    await asyncio.sleep(0)  # the sleeper is asleep
    assert not sleeper.done()
    stopper.stop()
    with pytest.raises(EmulatorStopping):
        await asyncio.wait_for(sleeper, 10)  # woken, not after its minute
    with pytest.raises(EmulatorStopping):
        await stopper.sleep(0)


def test_faults_are_reproducible_for_a_seed_and_follow_the_rates() -> None:
    config = FaultConfig(error_rate=0.2, rate_limit_rate=0.1, drop_rate=0.1, seed=3)
    a, b = FaultInjector(config), FaultInjector(config)
    draws = [a.draw() for _ in range(4000)]
    assert draws == [b.draw() for _ in range(4000)]
    counts = Counter(draws)
    assert counts[Fault.ERROR] == pytest.approx(800, rel=0.15)
    assert counts[Fault.RATE_LIMIT] == pytest.approx(400, rel=0.2)
    assert counts[Fault.DROP] == pytest.approx(400, rel=0.2)
    assert counts[None] == pytest.approx(2400, rel=0.1)
    assert Fault.HANG not in counts


def test_updating_faults_validates_and_reseeds() -> None:
    injector = FaultInjector(FaultConfig())
    assert injector.draw() is None
    injector.update(error_rate=0.5, seed=9)
    sequence = [injector.draw() for _ in range(20)]
    injector.update(seed=9)
    assert [injector.draw() for _ in range(20)] == sequence
    with pytest.raises(ValueError, match="error_rate"):
        injector.update(error_rate=2)
    with pytest.raises(ValueError, match="nonsense"):
        injector.update(nonsense=1)


def test_duplicate_key_faults_are_drawn_at_their_rate_after_the_older_kinds() -> None:
    config = FaultConfig(error_rate=0.25, duplicate_key_rate=0.25, seed=4)
    injector = FaultInjector(config)
    new = [injector.draw() for _ in range(4000)]
    counts = Counter(new)
    assert counts[Fault.DUPLICATE_KEY] == pytest.approx(1000, rel=0.15)
    assert counts[Fault.ERROR] == pytest.approx(1000, rel=0.15)
    # Its range comes after the older kinds', so a seed still fails the same requests with them.
    old_injector = FaultInjector(FaultConfig(error_rate=0.25, seed=4))
    old = [old_injector.draw() for _ in range(4000)]
    assert all((a is Fault.ERROR) == (b is Fault.ERROR) for a, b in zip(old, new, strict=True))
