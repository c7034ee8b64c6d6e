"""``rails.input.during_main``: the main model starts when an input check misses, over real HTTP with
the emulators' latency on. A block cancels the main request (the emulator sees the client leave); an
allowed miss turn costs about max(input check, main) + output check; a hit never starts it early."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from guardcache import LLMRails, RailsConfig
from guardcache.errors import ConfigError
from guardcache.rails import REFUSAL
from guardcache.testing.pytest_plugin import EmulatorFactory

pytestmark = pytest.mark.integration


async def until(condition: Callable[[], bool], within: float = 30.0) -> None:
    """Poll ``condition`` to a deadline (a busy CI machine may take a while to notice)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the condition did not hold in time")


def config(main_url: str, guard_url: str, *, during_main: bool = True) -> RailsConfig:
    return RailsConfig.from_content(
        f"""
models:
  - type: main
    engine: nim
    model: meta/llama-3.1-8b-instruct
    parameters: {{base_url: "{main_url}", max_tokens: 24}}
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    parameters: {{base_url: "{guard_url}"}}
    cache: {{enabled: true}}
rails:
  input:
    during_main: {str(during_main).lower()}
    flows: [content safety check input $model=content_safety]
  output: {{flows: [content safety check output $model=content_safety]}}
"""
    )


async def test_a_blocked_miss_cancels_the_main_request_and_refuses(emulator_factory: EmulatorFactory) -> None:
    # The main model never answers before the block, however slowly this machine runs the guard.
    main = await emulator_factory(
        faults={"hang_rate": 1.0, "hang_seconds": 60.0}, model="meta/llama-3.1-8b-instruct"
    )
    guard = await emulator_factory(latency={"time_scale": 1.0})
    rails = LLMRails(config(main.base_url, guard.base_url))
    assert await rails.generate_async("How do I make a bomb?") == REFUSAL
    calls = rails.explain().llm_calls
    cancelled = [c for c in calls if c.cancelled]
    assert len(cancelled) == 1 and cancelled[0].task == "general" and cancelled[0].duration > 0
    # Server side, the request ended early: the emulator notices the client left (it polls).
    await until(lambda: main.stats().requests_by_status.get("disconnected") == 1)
    assert main.stats().requests_by_status.get("200") is None
    await rails.aclose()


async def test_an_allowed_miss_turn_overlaps_the_input_check_and_the_main_call(
    emulator_factory: EmulatorFactory,
) -> None:
    # A slow input check (~0.5 s modelled): the main call, started as the check goes to its backend,
    # is under way long before the verdict, however this machine schedules the two.
    main = await emulator_factory(latency={"time_scale": 1.0}, model="meta/llama-3.1-8b-instruct")
    guard = await emulator_factory(latency={"time_scale": 8.0})
    rails = LLMRails(config(main.base_url, guard.base_url))
    assert await rails.generate_async("Tell me about the history of bread baking.") != REFUSAL
    calls = {c.task.split(" $")[0]: c for c in rails.explain().llm_calls}
    check_in, general = calls["content_safety_check_input"], calls["general"]
    assert "content_safety_check_output" in calls
    assert not check_in.from_cache and not general.cancelled
    # The main call started while the input check ran, not after it ended.
    assert general.started_at < check_in.started_at + check_in.duration
    assert main.stats().requests_total == 1  # one main call: the early one, answered and used
    await rails.aclose()


async def test_a_hit_never_starts_the_main_call_before_its_verdict(emulator_factory: EmulatorFactory) -> None:
    main = await emulator_factory(model="meta/llama-3.1-8b-instruct")
    guard = await emulator_factory()
    rails = LLMRails(config(main.base_url, guard.base_url))
    assert await rails.generate_async("How do I make a bomb?") == REFUSAL  # a miss: main started, cancelled
    before = main.stats().requests_total
    assert await rails.generate_async("How do I make a bomb?") == REFUSAL  # a hit: main never called
    assert rails.explain().checks.input[0].from_cache
    assert main.stats().requests_total == before
    assert not any(c.task == "general" for c in rails.explain().llm_calls)
    await rails.aclose()


def test_a_main_model_with_side_effects_is_never_started_early() -> None:
    text = config("http://localhost:1/v1", "http://localhost:2/v1").model_dump()
    text["models"][0]["side_effects"] = True
    with pytest.raises(ValueError, match="side_effects: true: it must not start before the input verdict"):
        RailsConfig.model_validate(text)


def test_a_langchain_model_with_tools_is_never_started_early() -> None:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    llm = FakeListChatModel(responses=["x"]).bind(tools=[{"type": "function", "function": {"name": "f"}}])
    with pytest.raises(ConfigError, match="tools"):
        LLMRails(config("http://localhost:1/v1", "http://localhost:2/v1"), llm=llm)
