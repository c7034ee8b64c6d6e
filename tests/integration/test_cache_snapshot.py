"""Warm restarts through the rails, against an emulated content-safety NIM over HTTP.

- A trace of turns fills the cache, the rails stop gracefully (``aclose``: the snapshot written),
  new rails start on the same config (the snapshot loaded): the first 1,000 turns of the trace
  replayed hit within 1 point of what the stopped rails would have hit on them (both run them), and
  far above a cold start's rate (so the comparison can fail).
- A modified file, a changed template, a changed ``cache.version``, a missing key: the new rails
  load nothing, one WARNING line says why and names the setting, and turns are judged as ever.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest

from guardcache import LLMRails, RailsConfig
from guardcache.cache import PolicyCache
from guardcache.config.prompts import default_prompts
from guardcache.testing.pytest_plugin import EmulatorFactory

KEY_ENV = "GUARDCACHE_SNAPSHOT_KEY"
LOGGER = "guardcache.cache.snapshot"
SETTING = "models[0].cache.snapshot"


def config(
    guard_url: str, snapshot: Path, *, policy: str = "lfu", version: str | None = None, template: str = ""
) -> RailsConfig:
    """One content-safety input rail whose cache is snapshotted; ``template`` is appended to the
    input prompt's text (a changed template)."""
    version_line = f", version: {version!r}" if version is not None else ""
    prompts = None
    if template:
        prompts = [
            {**p.model_dump(exclude_none=True), "task": f"{p.base_task} $model=content_safety"}
            for p in default_prompts()
            if p.base_task == "content_safety_check_input"
        ]
        prompts[0]["content"] = prompts[0]["content"] + template
    return RailsConfig.from_content(
        yaml_content=f"""
models:
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    parameters: {{base_url: "{guard_url}"}}
    cache: {{maxsize: 300, policy: {policy}, snapshot: "{snapshot}"{version_line}}}
rails:
  input: {{flows: [content safety check input $model=content_safety]}}
""",
        prompts=prompts,
        source="<test>",
    )


def trace(n: int, seed: int = 7) -> list[str]:
    """A skewed trace of user texts: a popular head, a long tail (guard traffic's shape)."""
    rng = random.Random(seed)
    return [f"Where is my order number {int(rng.paretovariate(0.3) * 3) % 100_000}?" for _ in range(n)]


def cache_of(rails: LLMRails) -> PolicyCache:
    cache = rails.model_caches["content_safety"]
    assert isinstance(cache, PolicyCache)
    return cache


async def hit_rate(rails: LLMRails, texts: list[str]) -> float:
    """The share of these turns' checks answered from the cache."""
    cache = cache_of(rails)
    before = cache.get_stats()
    for text in texts:
        result = await rails.check_async([{"role": "user", "content": text}])
        assert result.allowed
    done = cache.get_stats() - before
    assert done.hits + done.misses == len(texts)
    return done.hits / len(texts)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "an operator's snapshot key, 32+ bytes")


@pytest.mark.parametrize("policy", ["lfu", "tinylfu"])
async def test_a_restart_hits_as_the_stopped_rails_would_have(
    emulator_factory: EmulatorFactory,
    tmp_path: Path,
    key: None,
    caplog: pytest.LogCaptureFixture,
    policy: str,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    guard = await emulator_factory()
    path = tmp_path / "content_safety.snapshot"
    turns = trace(4000)
    stopped = LLMRails(config(guard.base_url, path, policy=policy))
    await hit_rate(stopped, turns)
    await stopped.aclose()  # a graceful stop: the snapshot written
    assert path.exists()
    calls = guard.stats().requests_total

    restarted = LLMRails(config(guard.base_url, path, policy=policy))
    assert len(cache_of(restarted)) == len(cache_of(stopped)) == 300
    warm = await hit_rate(restarted, turns[:1000])
    assert guard.stats().requests_total - calls == round((1 - warm) * 1000)  # a miss asks the NIM
    await restarted.aclose()
    # The same turns on the stopped rails (still in memory), and on rails that start cold.
    before_stop = await hit_rate(stopped, turns[:1000])
    cold = await hit_rate(
        LLMRails(config(guard.base_url, tmp_path / "elsewhere", policy=policy)), turns[:1000]
    )
    assert abs(warm - before_stop) <= 0.01, (warm, before_stop)
    assert warm >= cold + 0.05, (warm, cold)
    assert warnings(caplog) == []
    assert any("loaded 300 entries" in r.getMessage() for r in caplog.records)


async def filled(guard_url: str, path: Path) -> None:
    rails = LLMRails(config(guard_url, path))
    await hit_rate(rails, trace(500))
    await rails.aclose()
    assert written(path)


def written(path: Path) -> bool:
    return path.exists()


async def loads_nothing(rails: LLMRails, caplog: pytest.LogCaptureFixture, *says: str) -> None:
    """The new rails hold nothing, one WARNING said why (naming the setting), and turns still run."""
    assert len(cache_of(rails)) == 0
    (line,) = warnings(caplog)
    assert SETTING in line, line
    for words in says:
        assert words in line, line
    assert await hit_rate(rails, ["Where is my order number 1?"]) == 0.0
    await rails.aclose()


async def test_a_modified_snapshot_loads_nothing(
    emulator_factory: EmulatorFactory, tmp_path: Path, key: None, caplog: pytest.LogCaptureFixture
) -> None:
    guard = await emulator_factory()
    path = tmp_path / "cs.snapshot"
    await filled(guard.base_url, path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x20
    path.write_bytes(bytes(data))
    caplog.clear()
    await loads_nothing(LLMRails(config(guard.base_url, path)), caplog, "signature does not match")


async def test_a_changed_template_loads_nothing(
    emulator_factory: EmulatorFactory, tmp_path: Path, key: None, caplog: pytest.LogCaptureFixture
) -> None:
    guard = await emulator_factory()
    path = tmp_path / "cs.snapshot"
    await filled(guard.base_url, path)
    caplog.clear()
    rails = LLMRails(config(guard.base_url, path, template="\nJudge strictly."))
    await loads_nothing(rails, caplog, "template")


async def test_a_changed_version_loads_nothing(
    emulator_factory: EmulatorFactory, tmp_path: Path, key: None, caplog: pytest.LogCaptureFixture
) -> None:
    guard = await emulator_factory()
    path = tmp_path / "cs.snapshot"
    await filled(guard.base_url, path)
    caplog.clear()
    await loads_nothing(LLMRails(config(guard.base_url, path, version="2")), caplog, "cache.version")


async def test_without_the_key_nothing_is_loaded_or_written(
    emulator_factory: EmulatorFactory,
    tmp_path: Path,
    key: None,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    guard = await emulator_factory()
    path = tmp_path / "cs.snapshot"
    await filled(guard.base_url, path)
    written = path.read_bytes()
    monkeypatch.delenv(KEY_ENV)
    caplog.clear()
    await loads_nothing(LLMRails(config(guard.base_url, path)), caplog, KEY_ENV, "is not set")
    assert path.read_bytes() == written  # and the rails' stop wrote nothing


async def test_an_unwritable_snapshot_path_fails_no_turn(
    emulator_factory: EmulatorFactory, tmp_path: Path, key: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    guard = await emulator_factory()
    path = tmp_path / "no-such-folder" / "cs.snapshot"
    rails = LLMRails(config(guard.base_url, path))
    (line,) = warnings(caplog)  # said at start, not at the first write minutes later
    assert SETTING in line and "does not exist" in line
    assert await hit_rate(rails, trace(50)) > 0
    await rails.aclose()  # the last write fails: one WARNING more, nothing raised
    assert len(warnings(caplog)) == 2 and SETTING in warnings(caplog)[1]
    assert not path.exists()
