"""Shadow rails through ``LLMRails``, against emulated NIMs: a shadow guard judges sampled turns after
they are answered, decides nothing, caches under its own namespace, drops samples past its
concurrency limit when its NIM hangs, and never holds up ``aclose()``."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from guardcache import LLMRails, RailsConfig
from guardcache.emulator import EmulatorServer
from guardcache.rails.shadow import CLOSED, LIMIT
from guardcache.testing.pytest_plugin import EmulatorFactory
from guardcache.testing.shadow import (
    LIVE_IN,
    LIVE_OUT,
    MAIN_MODEL,
    SHADOW_IN,
    SHADOW_OUT,
    SHADOW_POLICY,
    shadow_prompts,
    shadow_yaml,
    user,
)

pytestmark = pytest.mark.integration

WITHIN = 60.0
"""Seconds a condition may take to come true on a loaded machine (never a sleep: a deadline)."""


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WITHIN
    while not condition():
        assert time.monotonic() < deadline, f"not within {WITHIN} s: {what}"
        await asyncio.sleep(0.01)


async def requests_of(server: EmulatorServer) -> int:
    """Calls the emulator received (counted on arrival: a hanging one too)."""
    stats = await server.astats()
    return sum(stats.requests_by_prompt.values())


async def nims(
    factory: EmulatorFactory, tmp_path: Path, **shadow_faults: float
) -> tuple[EmulatorServer, EmulatorServer, EmulatorServer]:
    policy = tmp_path / "shadow_policy.yml"
    policy.write_text(SHADOW_POLICY, encoding="utf-8")
    main = await factory(model=MAIN_MODEL)
    live = await factory()
    shadow = await factory(policy_path=str(policy), faults=shadow_faults) if shadow_faults else None
    if shadow is None:
        shadow = await factory(policy_path=str(policy))
    return main, live, shadow


def config_for(
    main: EmulatorServer, live: EmulatorServer, shadow: EmulatorServer, **kw: float
) -> RailsConfig:
    yaml = shadow_yaml(main.base_url, live.base_url, shadow.base_url, **kw)  # type: ignore[arg-type]
    return RailsConfig.from_content(yaml, shadow_prompts(), source="shadow.yml")


async def test_a_shadow_unsafe_blocks_nothing_and_explain_lists_it(
    emulator_factory: EmulatorFactory, tmp_path: Path
) -> None:
    main, live, shadow = await nims(emulator_factory, tmp_path)
    rails = LLMRails(config_for(main, live, shadow, sample=1.0))
    try:
        reply = await rails.generate_async(messages=user("I like pineapple on pizza"))
        # The live guard says safe: the turn is answered, whatever the shadow guard says.
        assert reply == {"role": "assistant", "content": "You said: I like pineapple on pizza"}
        turn = rails.explain()
        assert turn.checks.allowed and [r.flow for r in turn.checks.input] == [LIVE_IN]
        await until(lambda: len(turn.shadow) == 2, "both shadow rails judged the turn")
        found = {s.flow: s for s in turn.shadow}
        assert set(found) == {SHADOW_IN, SHADOW_OUT}
        for flow, counterpart in ((SHADOW_IN, LIVE_IN), (SHADOW_OUT, LIVE_OUT)):
            judged = found[flow]
            assert (judged.live, judged.shadow, judged.agrees) == ("allowed", "blocked", False)
            assert judged.compared_with == counterpart
            assert judged.result.categories == ("Violence",) and judged.result.error is None
            assert not judged.result.from_cache
        assert "shadow rail content safety check input $model=content_safety_v2: blocked" in turn.summary()
        assert await requests_of(shadow) == 2  # the shadow guard's NIM was asked, by the shadow prompt
        stats = rails.runner.shadow.stats()  # type: ignore[union-attr]
        assert stats.sampled == 1 and stats.agreement == {
            (SHADOW_IN, "allowed", "blocked"): 1,
            (SHADOW_OUT, "allowed", "blocked"): 1,
        }

        # Its verdicts are cached, in its model's cache, under its own namespace: the same turn
        # again is judged from the cache, and the live cache holds only the live rails' verdicts.
        again = await rails.generate_async(messages=user("I like pineapple on pizza"))
        assert again == reply
        second = rails.explain()
        await until(lambda: len(second.shadow) == 2, "the repeated turn judged")
        assert all(s.result.from_cache and s.shadow == "blocked" for s in second.shadow)
        assert await requests_of(shadow) == 2
        assert rails.model_caches["content_safety_v2"].size() == 2
        assert rails.model_caches["content_safety"].size() == 2
        live_keys = set(rails.model_caches["content_safety"].keys_in_eviction_order())  # type: ignore[attr-defined]
        shadow_keys = set(rails.model_caches["content_safety_v2"].keys_in_eviction_order())  # type: ignore[attr-defined]
        assert not live_keys & shadow_keys
    finally:
        await rails.aclose()


async def test_a_hanging_shadow_guard_drops_samples_and_never_holds_up_turns_or_close(
    emulator_factory: EmulatorFactory, tmp_path: Path
) -> None:
    # The shadow guard's NIM never answers within the test; its calls would wait 120 s.
    main, live, shadow = await nims(emulator_factory, tmp_path, hang_rate=1.0, hang_seconds=600.0)
    rails = LLMRails(config_for(main, live, shadow, sample=1.0, max_concurrency=2, shadow_timeout=120.0))
    texts = [f"tell me about bread number {i}" for i in range(10)]
    replies = [await rails.generate_async(messages=user(text)) for text in texts]
    # Every live turn completed, answered as usual.
    assert [r["content"] for r in replies] == [f"You said: {text}" for text in texts]
    assert rails.explain().checks.allowed
    shadow_rails = rails.runner.shadow
    assert shadow_rails is not None
    # Two samples hang (the limit); the other eight were dropped, not queued: the NIM saw only
    # the two samples' calls (input and output rail each), never more.
    await until(lambda: shadow_rails.stats().in_flight == 2, "two samples under way")
    stats = shadow_rails.stats()
    assert stats.sampled == 2 and stats.dropped[LIMIT] == 8 and stats.agreement == {}
    server_saw = 0

    async def four_calls() -> bool:
        nonlocal server_saw
        server_saw = await requests_of(shadow)
        return server_saw == 4

    deadline = time.monotonic() + WITHIN
    while not await four_calls():
        assert time.monotonic() < deadline and server_saw < 4, f"the shadow NIM saw {server_saw} calls"
        await asyncio.sleep(0.01)
    one_more = await rails.generate_async(messages=user("and one more"))
    assert one_more["content"] == "You said: and one more"
    assert shadow_rails.stats().dropped[LIMIT] == 9 and await requests_of(shadow) == 4

    # Closing waits close_timeout for the hanging samples, then cancels them: it ends.
    await asyncio.wait_for(rails.aclose(), WITHIN)
    stats = shadow_rails.stats()
    assert stats.in_flight == 0 and stats.dropped[CLOSED] == 2 and stats.agreement == {}


async def test_a_tenth_of_200_turns_is_sampled_by_the_injected_rng(
    emulator_factory: EmulatorFactory, tmp_path: Path
) -> None:
    main, live, shadow = await nims(emulator_factory, tmp_path)
    rails = LLMRails(config_for(main, live, shadow, sample=0.1), shadow_rng=random.Random(31))
    draws = random.Random(31)
    expected = sum(draws.random() < 0.1 for _ in range(200))  # one draw per turn
    assert 8 <= expected <= 35  # the seed gives a plausible tenth (binomial(200, 0.1): 20 +- 4.2)
    shadow_rails = rails.runner.shadow
    assert shadow_rails is not None
    try:
        for i in range(200):
            await rails.generate_async(messages=user(f"question {i % 7}"))
        await until(lambda: shadow_rails.stats().in_flight == 0, "every sample judged")
        stats = shadow_rails.stats()
        assert stats.sampled == expected and stats.dropped[LIMIT] == 0
        assert sum(stats.agreement.values()) == 2 * expected  # an input and an output judgement each
        assert set(stats.agreement) <= {
            (SHADOW_IN, "allowed", "allowed"),
            (SHADOW_OUT, "allowed", "allowed"),
        }
    finally:
        await rails.aclose()
