"""Per-request LLM call records: values, totals, and isolation between concurrent requests."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from guardcache.llm import records
from guardcache.llm.records import ExplainInfo, LLMCallInfo, record_call, request_scope
from guardcache.llm.types import Usage


def call(task: str = "general", *, from_cache: bool = False, tokens: int = 10) -> LLMCallInfo:
    return LLMCallInfo(
        task=task,
        duration=0.01,
        prompt_tokens=tokens,
        completion_tokens=1,
        total_tokens=tokens + 1,
        cached_prompt_tokens=0,
        from_cache=from_cache,
    )


def test_from_usage_copies_the_usage_and_dates_the_start_back_by_the_duration() -> None:
    usage = Usage(400, 8, 408, 288, model="nemoguard", provider="nim")
    before = time.time()
    info = LLMCallInfo.from_usage(
        "content_safety_check_input $model=content_safety", usage, duration=0.5, from_cache=False
    )
    assert (info.prompt_tokens, info.completion_tokens, info.total_tokens) == (400, 8, 408)
    assert info.cached_prompt_tokens == 288
    assert (info.model, info.provider, info.from_cache) == ("nemoguard", "nim", False)
    assert before - 0.5 - 0.01 <= info.started_at <= time.time() - 0.5 + 0.01
    explicit = LLMCallInfo.from_usage("t", usage, duration=0.0, from_cache=True, started_at=12.0)
    assert explicit.started_at == 12.0


def test_call_info_is_frozen() -> None:
    with pytest.raises(AttributeError):
        call().task = "other"  # type: ignore[misc]


def test_record_call_outside_a_request_is_a_no_op() -> None:
    assert records.current() is None
    record_call(call())  # must not raise
    assert records.current() is None


def test_request_scope_collects_calls_and_restores_the_previous_request() -> None:
    with request_scope() as outer:
        record_call(call("outer-1"))
        with request_scope() as inner:
            assert records.current() is inner
            record_call(call("inner"))
        assert records.current() is outer
        record_call(call("outer-2"))
    assert records.current() is None
    assert [c.task for c in outer.llm_calls] == ["outer-1", "outer-2"]
    assert [c.task for c in inner.llm_calls] == ["inner"]


async def test_new_request_sets_the_current_request_for_this_task() -> None:
    async def handle() -> ExplainInfo:
        info = records.new_request()
        assert records.current() is info
        record_call(call())
        return info

    info = await asyncio.create_task(handle())
    assert len(info.llm_calls) == 1
    assert records.current() is None  # the task's context did not leak into ours


def test_totals_cache_hits_and_summary() -> None:
    info = ExplainInfo()
    info.add(call("content_safety_check_input $model=content_safety", tokens=400))
    info.add(call("general", from_cache=True, tokens=100))
    assert info.cache_hits == 1
    assert info.total_prompt_tokens == 500
    assert info.total_completion_tokens == 2
    assert info.total_tokens == 502
    assert info.total_cached_prompt_tokens == 0
    assert info.total_duration == pytest.approx(0.02)
    summary = info.summary()
    assert summary.splitlines()[0].startswith("2 LLM calls (1 from cache), 502 tokens")
    assert "content_safety_check_input $model=content_safety" in summary
    assert "[cache]" in summary
    assert ExplainInfo().summary().startswith("0 LLM calls (0 from cache)")


async def test_parallel_child_tasks_and_threads_record_into_the_parents_request() -> None:
    with request_scope() as info:

        async def rail(name: str) -> None:
            await asyncio.sleep(0)
            record_call(call(name))

        await asyncio.gather(*(rail(f"rail-{i}") for i in range(5)))
        await asyncio.to_thread(record_call, call("in-a-thread"))
    assert sorted(c.task for c in info.llm_calls) == [
        "in-a-thread",
        "rail-0",
        "rail-1",
        "rail-2",
        "rail-3",
        "rail-4",
    ]


async def test_500_concurrent_requests_each_see_exactly_their_own_calls() -> None:
    rng = random.Random(1234)
    plan = {request_id: rng.randint(1, 6) for request_id in range(500)}

    async def child(request_id: int, index: int) -> None:
        await asyncio.sleep(0)  # interleave with every other request's children
        record_call(call(f"req-{request_id}-call-{index}"))
        await asyncio.sleep(0)

    async def request(request_id: int) -> tuple[int, ExplainInfo]:
        with request_scope() as info:
            await asyncio.sleep(0)
            children = [asyncio.create_task(child(request_id, index)) for index in range(plan[request_id])]
            await asyncio.gather(*children)
            assert records.current() is info
        return request_id, info

    results = await asyncio.gather(*(request(request_id) for request_id in range(500)))
    seen: set[int] = set()
    for request_id, info in results:
        tasks = sorted(c.task for c in info.llm_calls)
        assert tasks == sorted(f"req-{request_id}-call-{i}" for i in range(plan[request_id]))
        seen.add(id(info))
    assert len(seen) == 500
    assert records.current() is None
