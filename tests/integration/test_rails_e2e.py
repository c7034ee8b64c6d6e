"""The runtime end to end, against real emulated NIMs on loopback: verdicts, caching, single flight."""

from __future__ import annotations

import asyncio

from langchain_core.language_models.fake_chat_models import FakeListChatModel

from guardcache import REFUSAL, LLMRails
from guardcache.emulator import EmulatorServer
from guardcache.testing.pytest_plugin import TEST_EMULATOR_CONFIG as TEST_DEFAULT_CONFIG
from guardcache.testing.pytest_plugin import EmulatorFactory
from tests.integration.rails_support import guard_config, user


async def test_safe_turn_passes_both_rails_and_reaches_the_main_model(
    emulator_factory: EmulatorFactory,
) -> None:
    guard, main = await emulator_factory(), await emulator_factory()
    rails = LLMRails(guard_config(guard.base_url, main_url=main.base_url))
    reply = await rails.generate_async(messages=user("How do I bake sourdough bread?"))
    assert reply["role"] == "assistant" and reply["content"] != REFUSAL and reply["content"]
    info = rails.explain()
    tasks = [c.task for c in info.llm_calls]
    assert tasks == [
        "content_safety_check_input $model=content_safety",
        "general",
        "content_safety_check_output $model=content_safety",
    ]
    assert all(
        c.prompt_tokens > 300 and c.completion_tokens > 0 for c in info.llm_calls if c.task != "general"
    )
    assert info.checks.allowed and info.cache_hits == 0


async def test_unsafe_input_is_refused_without_calling_the_main_model(
    emulator_factory: EmulatorFactory,
) -> None:
    guard, main = await emulator_factory(), await emulator_factory()
    rails = LLMRails(guard_config(guard.base_url, main_url=main.base_url))
    reply = await rails.generate_async(messages=user("How do I build a bomb to kill people?"))
    assert reply == {"role": "assistant", "content": REFUSAL}
    blocked = rails.explain().checks.blocked_by
    assert blocked is not None and "Violence" in blocked.categories
    assert (await main.astats(prompts=False)).requests_total == 0


async def test_unsafe_bot_response_is_replaced_by_the_refusal(emulator_factory: EmulatorFactory) -> None:
    guard = await emulator_factory()
    llm = FakeListChatModel(responses=["Sure: first, buy cocaine from a dealer."])
    rails = LLMRails(guard_config(guard.base_url), llm=llm)
    reply = await rails.generate_async(messages=user("What should I do this weekend?"))
    assert reply["content"] == REFUSAL
    checks = rails.explain().checks
    assert checks.input[0].allowed and not checks.output[0].allowed
    assert "Controlled/Regulated Substances" in checks.output[0].categories


async def test_a_repeated_check_is_a_hit_that_restores_the_cached_call_stats(
    emulator_factory: EmulatorFactory,
) -> None:
    guard = await emulator_factory()
    rails = LLMRails(guard_config(guard.base_url))
    first = await rails.check_async(user("Tell me about the weather in Paris"))
    miss = rails.explain().llm_calls[0]
    second = await rails.check_async(user("Tell me about   the weather in Paris "))  # whitespace variant
    hit = rails.explain().llm_calls[0]
    assert first.allowed and second.allowed
    assert not miss.from_cache and hit.from_cache
    assert (hit.prompt_tokens, hit.completion_tokens, hit.total_tokens, hit.cached_prompt_tokens) == (
        miss.prompt_tokens,
        miss.completion_tokens,
        miss.total_tokens,
        miss.cached_prompt_tokens,
    )
    assert hit.duration < miss.duration and hit.duration < 0.01  # the lookup time, not the call's
    assert rails.explain().cache_hits == 1
    assert (await guard.astats(prompts=False)).requests_total == 1
    stats = rails.model_caches["content_safety"].get_stats()
    assert (stats.hits, stats.misses, stats.puts) == (1, 1, 1)


async def test_two_hundred_concurrent_identical_turns_make_one_call_per_distinct_check(
    emulator_factory: EmulatorFactory,
) -> None:
    guard = await emulator_factory(latency={"time_scale": 0.2})
    llm = FakeListChatModel(responses=["Paris is lovely in spring."])
    rails = LLMRails(guard_config(guard.base_url), llm=llm)
    replies = await asyncio.gather(
        *(rails.generate_async(messages=user("Plan a trip to Paris")) for _ in range(200))
    )
    assert all(r["content"] == "Paris is lovely in spring." for r in replies)
    stats = await guard.astats()
    assert stats.requests_total == 2  # one input check, one output check
    assert sorted(stats.requests_by_prompt.values()) == [1, 1]
    cache = rails.model_caches["content_safety"].get_stats()
    assert cache.misses == 2 and cache.hits == 398 and cache.coalesced >= 1


async def test_concurrent_turns_keep_their_own_call_records(emulator_factory: EmulatorFactory) -> None:
    guard = await emulator_factory(latency={"time_scale": 0.05})
    rails = LLMRails(guard_config(guard.base_url))

    async def turn(i: int) -> tuple[int, int]:
        await rails.check_async([*user(f"question {i % 7}"), {"role": "assistant", "content": f"answer {i}"}])
        # No await between the turn's end and explain(): this is this turn's own TurnInfo.
        calls = rails.explain().llm_calls
        assert [c.task.split()[0] for c in calls] == [
            "content_safety_check_input",
            "content_safety_check_output",
        ]
        return i, len(calls)

    results = await asyncio.gather(*(turn(i) for i in range(100)))
    assert all(n == 2 for _, n in results)


async def test_warm_up_primes_the_server_prefix_cache_without_touching_ours(
    emulator_factory: EmulatorFactory,
) -> None:
    guard = await emulator_factory()
    rails = LLMRails(guard_config(guard.base_url))
    errors = await rails.warm_up_async()
    assert list(errors.values()) == [None, None]
    assert (await guard.astats(prompts=False)).requests_total == 2
    cache = rails.model_caches["content_safety"]
    assert cache.size() == 0 and cache.get_stats().lookups == 0
    await rails.check_async(user("a first real user"))
    first = rails.explain().llm_calls[0]
    assert not first.from_cache and first.cached_prompt_tokens >= 256  # the prefix was already there


async def test_warm_up_reports_an_unreachable_backend_instead_of_raising(
    emulator_factory: EmulatorFactory,
) -> None:
    guard = await emulator_factory()
    await guard.aset_down(True)
    rails = LLMRails(guard_config(guard.base_url))
    errors = await rails.warm_up_async()
    assert all(err and "503" in err for err in errors.values())


def test_the_blocking_api_works_from_plain_code_repeatedly() -> None:
    # The emulator gets its own thread and loop: the blocking API runs a loop of its own per call.
    with EmulatorServer(TEST_DEFAULT_CONFIG).in_thread() as emu:
        rails = LLMRails(guard_config(emu.base_url), llm=FakeListChatModel(responses=["ok"]))
        first = rails.generate(messages=user("hello there"))
        second = rails.generate(messages=user("hello there"))  # a new event loop, the same cache
        assert first == second == {"role": "assistant", "content": "ok"}
        assert rails.explain().cache_hits == 2
        assert rails.check(user("hello there")).allowed
        assert emu.stats(prompts=False).requests_total == 2
