"""Starting the main model during the input checks: when it starts, and that nothing outlives a block."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest

from guardcache.cache import LFUCache
from guardcache.checks.check import BACKEND_CALL_SIGNAL, CheckOutcome, run_cached
from guardcache.checks.verdict import CachedCheck, Verdict
from guardcache.llm.types import Usage
from guardcache.rails.speculation import abandon, run_with_early_start

#: A deadline for an event that takes a loop iteration or two: only a hang (a bug) reaches it.
EVENTUALLY = 10.0


class Main:
    """A main model call that records whether it started and whether it was cancelled; ``running``
    and ``done`` are set as it starts and as it finishes."""

    def __init__(self, seconds: float = 0.05) -> None:
        self.seconds, self.started, self.cancelled, self.finished = seconds, 0, 0, 0
        self.running, self.done = asyncio.Event(), asyncio.Event()

    async def __call__(self) -> str:
        self.started += 1
        self.running.set()
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.finished += 1
        self.done.set()
        return "answer"


def signal_backend_call() -> None:
    """What run_cached does as a check's backend call starts."""
    signal = BACKEND_CALL_SIGNAL.get()
    assert signal is not None
    signal()


async def checks(*, backend_call: bool, verdict: str = "ok", seconds: float = 0.05) -> str:
    """Input checks: a miss signals its backend call (as run_cached does), then takes a while."""
    if backend_call:
        signal_backend_call()
        await asyncio.sleep(seconds)
    return verdict


async def test_hits_never_start_the_main_model_early() -> None:
    main = Main()
    result, task = await run_with_early_start(lambda: checks(backend_call=False), main)
    assert (result, task, main.started) == ("ok", None, 0)
    assert BACKEND_CALL_SIGNAL.get() is None  # the signal does not leak into the caller's context


async def test_a_miss_starts_the_main_model_alongside_the_checks() -> None:
    main = Main(seconds=0.05)

    async def checks_until_the_main_call_runs() -> str:
        signal_backend_call()  # a miss: its backend call starts
        # The verdict comes only once the main call is running: were it started after the checks
        # (their sum, not their max), this would wait forever.
        await asyncio.wait_for(main.running.wait(), EVENTUALLY)
        return "ok"

    result, task = await run_with_early_start(checks_until_the_main_call_runs, main)
    assert result == "ok" and task is not None and main.started == 1
    assert await task == "answer"


async def test_a_block_cancels_the_early_main_call() -> None:
    main = Main(seconds=10)
    result, task = await run_with_early_start(lambda: checks(backend_call=True, verdict="blocked"), main)
    assert result == "blocked" and task is not None
    await abandon(task)
    assert task.done() and main.cancelled == 1 and main.finished == 0


async def test_a_main_call_that_finished_before_the_block_is_just_discarded() -> None:
    main = Main(seconds=0.001)

    async def checks_that_block_after_the_main_call_ended() -> str:
        signal_backend_call()
        await asyncio.wait_for(main.done.wait(), EVENTUALLY)
        return "blocked"

    _, task = await run_with_early_start(checks_that_block_after_the_main_call_ended, main)
    assert task is not None and task.done() and main.finished == 1
    await abandon(task)  # nothing left to cancel, nothing raised
    assert main.cancelled == 0


async def test_checks_that_raise_take_the_early_main_call_down_with_them() -> None:
    main = Main(seconds=10)

    async def failing() -> str:
        signal_backend_call()
        await asyncio.wait_for(main.running.wait(), EVENTUALLY)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await run_with_early_start(failing, main)
    assert main.started == 1 and main.cancelled == 1


async def test_cancelling_the_turn_leaves_nothing_in_flight() -> None:
    main = Main(seconds=10)
    before = asyncio.all_tasks()
    turn = asyncio.ensure_future(run_with_early_start(lambda: checks(backend_call=True, seconds=10), main))
    await asyncio.wait_for(main.running.wait(), EVENTUALLY)  # the main call is under way
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    await asyncio.sleep(0)
    assert main.cancelled == 1
    assert asyncio.all_tasks() - before == set()


async def test_a_turn_that_joins_another_turns_backend_call_starts_its_main_model_early_too() -> None:
    """Two turns with one text: the first check goes to the backend, the second joins that call
    (single flight). The second waits as long as a miss, so its main model starts early too; a third
    asker after the verdict is a hit and starts nothing."""
    cache = LFUCache(16)
    backend = asyncio.Event()
    calls = 0

    async def call() -> CachedCheck:
        nonlocal calls
        calls += 1
        await backend.wait()
        return CachedCheck(Verdict(True, label="safe"), Usage(prompt_tokens=10, completion_tokens=2))

    def check() -> Awaitable[CheckOutcome]:
        return run_cached("content_safety_check_input", cache, b"k" * 32, call)

    mains = [Main(seconds=0.01) for _ in range(3)]
    first = asyncio.ensure_future(run_with_early_start(check, mains[0]))
    await asyncio.wait_for(mains[0].running.wait(), EVENTUALLY)  # the leader's backend call started it
    second = asyncio.ensure_future(run_with_early_start(check, mains[1]))
    # joined the call under way, before any verdict (the backend answers only once this holds)
    await asyncio.wait_for(mains[1].running.wait(), EVENTUALLY)
    assert calls == 1 and not first.done() and not second.done()
    backend.set()
    for turn in (first, second):
        outcome, task = await turn
        assert outcome.verdict.allowed and task is not None
        await task
    outcome, task = await run_with_early_start(check, mains[2])
    assert outcome.from_cache and task is None and mains[2].started == 0
    assert calls == 1
