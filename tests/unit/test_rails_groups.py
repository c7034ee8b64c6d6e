"""How a group of rails runs: parallel checks run as tasks only when one of them has a backend call to
overlap; when every verdict is cached they run in order, in the caller's task."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Hashable, Mapping
from typing import Any

from guardcache.cache import CacheInterface, LFUCache
from guardcache.checks.check import CheckOutcome, in_cache
from guardcache.checks.verdict import Verdict
from guardcache.config import RailGroup
from guardcache.flows import KNOWN_FLOWS, FlowRef
from guardcache.rails.llmrails import LLMRails
from guardcache.rails.rail import Rail

VARIABLES = {"user_input": "hello"}


class Timed:
    """A check whose verdict is cached or takes ``seconds``; records the task it ran in."""

    task = "timed"

    def __init__(self, *, is_cached: bool, allowed: bool = True, seconds: float = 0.05) -> None:
        self.is_cached, self.allowed, self.seconds = is_cached, allowed, seconds
        self.ran_in: list[asyncio.Task[Any] | None] = []

    def cached(self, variables: Mapping[str, Any]) -> bool:
        return self.is_cached

    async def run(self, variables: Mapping[str, Any], deadline: float | None = None) -> CheckOutcome:
        self.ran_in.append(asyncio.current_task())
        if not self.is_cached:
            await asyncio.sleep(self.seconds)
        return CheckOutcome(Verdict(self.allowed), self.is_cached, 0.0)

    async def prime(self) -> None:
        return None


class Meeting(Timed):
    """A miss whose backend answers only once ``every`` misses of the group are in flight together:
    run one after the other, the first would wait for the others forever (here: 10 s, then it says
    so in ``met``)."""

    def __init__(self, every: asyncio.Barrier) -> None:
        super().__init__(is_cached=False)
        self.every = every
        self.met = False

    async def run(self, variables: Mapping[str, Any], deadline: float | None = None) -> CheckOutcome:
        self.ran_in.append(asyncio.current_task())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.every.wait(), 10)
            self.met = True
        return CheckOutcome(Verdict(self.allowed), False, 0.0)


class Unreadable(Timed):
    def cached(self, variables: Mapping[str, Any]) -> bool:
        raise UnicodeEncodeError("utf-8", "\udfff", 0, 1, "surrogates not allowed")


def rails_of(*checks: Timed) -> list[Rail]:
    flows = [
        "content safety check input $model=content_safety",
        "topic safety check input $model=topic_control",
        "jailbreak detection model",
    ]
    out = []
    for flow, check in zip(flows, checks, strict=False):
        ref = FlowRef.parse(flow)
        out.append(Rail(ref=ref, spec=KNOWN_FLOWS[ref.name], check=check, on_error="block"))
    return out


async def run(rails: list[Rail]) -> list[Any]:
    return await LLMRails._run_group(rails, VARIABLES, RailGroup(parallel=True))


async def test_parallel_checks_all_cached_run_in_order_in_the_callers_task() -> None:
    checks = [Timed(is_cached=True) for _ in range(3)]
    results = await run(rails_of(*checks))
    me = asyncio.current_task()
    assert [c.ran_in for c in checks] == [[me], [me], [me]]
    assert [r.flow for r in results] == [r.name for r in rails_of(*checks)]
    assert all(r.allowed and r.from_cache for r in results)


async def test_one_miss_runs_every_check_as_a_task_so_the_misses_overlap() -> None:
    both = asyncio.Barrier(2)
    misses = [Meeting(both), Meeting(both)]
    checks = [misses[0], Timed(is_cached=True), misses[1]]
    results = await run(rails_of(*checks))
    me = asyncio.current_task()
    assert all(c.ran_in and c.ran_in[0] is not me for c in checks)
    assert len(results) == 3 and all(r.allowed for r in results)
    assert all(m.met for m in misses)  # both backend calls were in flight at once, not one by one


async def test_a_cached_block_stops_the_checks_after_it() -> None:
    checks = [Timed(is_cached=True), Timed(is_cached=True, allowed=False), Timed(is_cached=True)]
    results = await run(rails_of(*checks))
    assert [r.allowed for r in results] == [True, False]
    assert checks[2].ran_in == []


async def test_a_check_that_cannot_say_falls_back_to_tasks() -> None:
    checks = [Timed(is_cached=True), Unreadable(is_cached=True)]
    results = await run(rails_of(*checks))
    assert all(c.ran_in and c.ran_in[0] is not asyncio.current_task() for c in checks)
    assert len(results) == 2


class CountingOnly(CacheInterface):
    """A store with only the abstract methods: its ``contains`` is the interface's, which counts."""

    def __init__(self) -> None:
        self.data: dict[Hashable, Any] = {}
        self.gets = 0

    def get(self, key: Hashable, default: Any = None) -> Any:
        self.gets += 1
        return self.data.get(key, default)

    def put(self, key: Hashable, value: Any) -> None:
        self.data[key] = value

    def size(self) -> int:
        return len(self.data)

    def clear(self) -> None:
        self.data.clear()

    @property
    def maxsize(self) -> int:
        return 16


def test_in_cache_never_counts_a_lookup() -> None:
    lfu = LFUCache(4)
    lfu.put(b"k", 1)
    assert in_cache(lfu, b"k") and not in_cache(lfu, b"other")
    stats = lfu.get_stats()
    assert stats.hits == stats.misses == 0
    plain = CountingOnly()
    plain.put(b"k", 1)
    assert not in_cache(plain, b"k")  # it could only answer by counting: treated as not known
    assert plain.gets == 0
    assert not in_cache(None, b"k")
