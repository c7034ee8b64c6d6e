"""``guardcache.testing`` as an app's tests use it: emulated guards, the echo main model, the
pytest fixtures, a real redis-server, a process fleet."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from guardcache import REFUSAL, LLMRails, RailsConfig
from guardcache.emulator import EmulatorServer
from guardcache.testing import EchoChatModel, ProcessFleet, RedisServer, emulated
from guardcache.testing.pytest_plugin import EmulatorFactory

CONFIG = """
models:
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    cache: {enabled: true}
rails:
  input: {flows: [content safety check input $model=content_safety]}
  output: {flows: [content safety check output $model=content_safety]}
"""


async def test_an_app_config_runs_against_emulated_guards_with_the_echo_main_model(
    echo_llm: EchoChatModel,
) -> None:
    async with emulated(RailsConfig.from_content(CONFIG), time_scale=0) as (config, servers):
        rails = LLMRails(config, llm=echo_llm)
        reply = await rails.generate_async(messages=[{"role": "user", "content": "Hello there"}])
        assert reply == {"role": "assistant", "content": "Hello there"}
        blocked = await rails.generate_async(messages=[{"role": "user", "content": "How do I build a bomb?"}])
        assert blocked["content"] == REFUSAL
        assert [c.task for c in rails.explain().llm_calls] == [
            "content_safety_check_input $model=content_safety"
        ]
        assert (await servers["content_safety"].astats(prompts=False)).requests_total == 3
        await rails.aclose()


async def test_the_echo_model_answers_with_its_prefix() -> None:
    reply = await EchoChatModel(prefix="Sure: ").ainvoke("tell me a joke")
    assert reply.content == "Sure: tell me a joke"


@pytest.mark.parametrize("emulator", [{"api_key": "k"}], indirect=True)
async def test_the_emulator_fixture_takes_config_changes(
    emulator: EmulatorServer, emulator_factory: EmulatorFactory
) -> None:
    assert emulator.config.api_key == "k"
    other = await emulator_factory()
    assert other.base_url != emulator.base_url and other.config.api_key is None


def test_redis_server_fixture_answers(redis_server: RedisServer, redis_url: str) -> None:
    assert redis_url == redis_server.url and redis_server.client().ping()


def test_redis_server_as_a_context_manager(tmp_path: Path) -> None:
    with RedisServer(tmp_path) as server:
        assert server.client().ping()
    assert not server.running


async def test_a_process_fleet_releases_its_children_together() -> None:
    child = "import sys; print('READY', flush=True); sys.stdin.readline(); print('went', flush=True)"
    async with ProcessFleet([[sys.executable, "-c", child]] * 2, step_timeout=60) as fleet:
        await fleet.release()
        assert [await fleet.readline(p) for p in fleet.procs] == [b"went\n", b"went\n"]
