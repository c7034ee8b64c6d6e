"""Backend failures: each injected fault gets the configured decision, nothing is cached, and the next
good answer is cached. The emulator's faults are real: 5xx and 429 responses, hangs past the client's
timeout, malformed model output, dropped connections, and the server taken down."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from guardcache import LLMRails
from guardcache.testing.pytest_plugin import EmulatorFactory
from tests.integration.rails_support import guard_config, user

FAULTS = {
    "500": {"error_rate": 1.0},
    "429": {"rate_limit_rate": 1.0, "retry_after_seconds": 0},
    "hang": {"hang_rate": 1.0, "hang_seconds": 30.0},
    "malformed": {"malformed_rate": 1.0},
    "invalid body": {"invalid_body_rate": 1.0},
    "dropped connection": {"drop_rate": 1.0},
}


@pytest.mark.parametrize("on_error", ["block", "allow"])
@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_fault_gets_the_configured_decision_and_is_never_cached(
    emulator_factory: EmulatorFactory, fault: str, on_error: str, caplog: pytest.LogCaptureFixture
) -> None:
    guard = await emulator_factory()
    # 2 s: what ends the hang, and room for a loaded machine's healthy calls after it.
    rails = LLMRails(guard_config(guard.base_url, on_error=on_error, timeout=2.0))
    cache = rails.model_caches["content_safety"]
    await guard.aset_faults(**FAULTS[fault])
    with caplog.at_level(logging.WARNING, logger="guardcache.rails.rail"):
        result = await rails.check_async(user("Is this message fine?"))
    rail = result.input[0]
    # An outage follows on_error; a model answer that is no verdict blocks whatever on_error says
    # (a user can make the model answer that way).
    outage = fault != "malformed"
    assert rail.error is not None and rail.allowed is (outage and on_error == "allow")
    assert any("could not get a verdict" in r.getMessage() for r in caplog.records)
    assert "Is this message fine" not in caplog.text  # no user text in logs
    assert cache.size() == 0 and cache.get_stats().puts == 0

    await guard.aset_faults(**{k: 0 for k in FAULTS[fault] if k.endswith("_rate")})
    good = await rails.check_async(user("Is this message fine?"))
    assert good.allowed and good.input[0].error is None and not good.input[0].from_cache
    again = await rails.check_async(user("Is this message fine?"))
    assert again.input[0].from_cache and cache.size() == 1


async def test_retries_absorb_a_transient_500(emulator_factory: EmulatorFactory) -> None:
    guard = await emulator_factory(faults={"error_rate": 0.5, "seed": 3})
    rails = LLMRails(guard_config(guard.base_url))
    results = [await rails.check_async(user(f"message {i}")) for i in range(10)]
    # With two retries, P(a check fails) = 0.125; the seeded run is deterministic.
    assert sum(r.input[0].error is None for r in results) >= 7
    assert rails.model_caches["content_safety"].size() == sum(r.input[0].error is None for r in results)


async def test_server_down_blocks_and_recovery_is_cached(emulator_factory: EmulatorFactory) -> None:
    guard = await emulator_factory()
    rails = LLMRails(guard_config(guard.base_url))
    await guard.aset_down(True)
    down = await rails.check_async(user("hello"))
    assert not down.allowed and down.input[0].error
    await guard.aset_down(False)
    up = await rails.check_async(user("hello"))
    assert up.allowed and rails.model_caches["content_safety"].size() == 1


async def test_a_stopped_server_fails_closed_quickly(emulator_factory: EmulatorFactory) -> None:
    guard = await emulator_factory()
    url = guard.base_url
    await guard.stop()
    rails = LLMRails(guard_config(url))
    started = time.monotonic()
    result = await rails.check_async(user("hello"))
    assert not result.allowed and "BackendConnectionError" in (result.input[0].error or "")
    assert time.monotonic() - started < 5


async def test_parallel_rails_first_block_cancels_the_others_and_poisons_nothing(
    emulator_factory: EmulatorFactory,
) -> None:
    fast = await emulator_factory()
    slow = await emulator_factory(faults={"hang_rate": 1.0, "hang_seconds": 30.0})
    extra = f"""
  - type: content_safety_slow
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    parameters: {{base_url: "{slow.base_url}", timeout: 20}}
    cache: {{enabled: true, maxsize: 100}}
"""
    config = guard_config(
        fast.base_url,
        extra_models=extra,
        parallel=True,
        prompts_for=("content_safety_slow",),
        input_flows=(
            "[content safety check input $model=content_safety_slow, "
            "content safety check input $model=content_safety]"
        ),
    )
    rails = LLMRails(config)
    started = time.monotonic()
    result = await asyncio.wait_for(rails.check_async(user("how to make a bomb")), 10)
    assert time.monotonic() - started < 5
    assert not result.allowed and result.blocked_by is not None
    assert result.blocked_by.flow.endswith("$model=content_safety")
    slow_cache = rails.model_caches["content_safety_slow"]
    assert slow_cache.size() == 0 and slow_cache.in_flight() == 0  # type: ignore[attr-defined]
    # the cancelled check is not stuck: once the backend is healthy it computes and caches
    await slow.aset_faults(hang_rate=0.0)
    ok = await rails.check_async(user("a friendly hello"))
    assert ok.allowed and slow_cache.size() == 1
