"""Guard verdict caches are on by default: NeMo's own configs, which carry no ``cache:`` block, run
against emulated NIMs over real HTTP and make no guard backend call on a repeated turn.

- NeMo's nemoguards example (tests/fixtures/nemo_configs/nemoguards, unchanged): Content Safety,
  Topic Control and the JailbreakDetect NIM, which has no model entry, all answer a repeat from
  their caches; the main model answers every turn.
- ``cache: {enabled: false}`` on a model (a ``jailbreak_detection`` entry for the NIM) turns its
  cache off: every turn calls it.
- A self check run on ``main`` (NeMo's getting-started "input rails" config, its LangChain guide and
  its tests' ``input_rails`` config all do this, with no ``cache:`` entry) is a guard verdict, cached
  by default like any other: a repeated turn asks the main model for its answer only.
  ``cache: {enabled: false}`` on ``main`` turns that off. The main model's answers are never cached.
- One INFO line per LLMRails says what each model got.
- NeMo's llama_guard example writes vLLM's placeholder key in the file (``api_key: EMPTY``): it is
  sent as the bearer token, and a key written so is never shown (logs, reprs, ``explain()``, errors).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from guardcache import LLMRails, RailsConfig
from guardcache.emulator import EmulatorServer, emulated
from guardcache.errors import BackendError
from guardcache.rails import REFUSAL
from guardcache.rails.builder import build_client
from guardcache.testing.pytest_plugin import EmulatorFactory

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_configs"
SAFE = "Hello! Where is my order?"
CACHES_LOGGER = "guardcache.rails.caches"
GUARDS = ("content_safety", "topic_control", "jailbreak_detection")


def nemoguards(tmp_path: Path, *, edit: tuple[str, str] | None = None) -> RailsConfig:
    """NeMo's nemoguards folder as NeMo would hold it: its config.yml and a prompts.yml with the
    topic rules (NeMo's topic_safety example's); ``edit`` replaces text of the config in the copy."""
    folder = tmp_path / "nemoguards"
    folder.mkdir()
    text = (FIXTURES / "nemoguards" / "config.yml").read_text(encoding="utf-8")
    assert "cache" not in text  # the point: a NeMo config that says nothing about caches
    if edit is not None:
        assert edit[0] in text
        text = text.replace(edit[0], edit[1], 1)
    (folder / "config.yml").write_text(text, encoding="utf-8")
    shutil.copy(FIXTURES / "topic_safety" / "prompts.yml", folder / "prompts.yml")
    return RailsConfig.from_path(folder)


def calls(servers: dict[str, EmulatorServer]) -> dict[str, int]:
    return {name: server.stats().requests_total for name, server in servers.items()}


def cache_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == CACHES_LOGGER]


async def test_a_nemo_config_without_cache_blocks_makes_no_guard_call_on_a_repeated_turn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = nemoguards(tmp_path)
    async with emulated(config, time_scale=0) as (config, servers):
        with caplog.at_level(logging.INFO, logger=CACHES_LOGGER):
            rails = LLMRails(config)
        assert sorted(rails.model_caches) == sorted(GUARDS)  # the NIM has no model entry
        assert "main" not in rails.model_caches
        assert await rails.generate_async(SAFE) != REFUSAL
        first = calls(servers)
        assert all(first[name] >= 1 for name in GUARDS) and first["main"] == 1
        assert servers["jailbreak_detection"].stats().requests_by_endpoint.get("classify") == 1

        assert await rails.generate_async(SAFE) != REFUSAL
        again = calls(servers)
        assert {n: again[n] for n in GUARDS} == {n: first[n] for n in GUARDS}  # zero guard calls
        assert again["main"] == 2  # the main model answers every turn
        turn = rails.explain()
        checks = (*turn.checks.input, *turn.checks.output)
        assert len(checks) == 4 and all(r.from_cache for r in checks)
        for name in GUARDS:
            stats = rails.model_caches[name].get_stats()  # stats are on by default
            assert stats.hits >= 1 and stats.current_size >= 1, name
            assert rails.model_caches[name].maxsize == 50000
        await rails.aclose()
    assert cache_lines(caplog) == [
        "guardcache caches: content_safety (50000, memory), topic_control (50000, memory), "
        f"jailbreak_detection (50000, memory); main: not cached [{tmp_path / 'nemoguards'}]"
    ]


@pytest.mark.parametrize(
    ("edit", "uncached"),
    [
        pytest.param(
            (
                "    model: nvidia/llama-3.1-nemoguard-8b-topic-control\n",
                "    model: nvidia/llama-3.1-nemoguard-8b-topic-control\n    cache: {enabled: false}\n",
            ),
            "topic_control",
            id="topic-control",
        ),
        pytest.param(
            (
                "rails:\n",
                "  - type: jailbreak_detection\n    engine: nim\n"
                "    model: nvidia/nemoguard-jailbreak-detect\n    cache: {enabled: false}\n\nrails:\n",
            ),
            "jailbreak_detection",
            id="jailbreak-nim",
        ),
    ],
)
async def test_cache_enabled_false_on_a_model_calls_it_on_every_turn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, edit: tuple[str, str], uncached: str
) -> None:
    config = nemoguards(tmp_path, edit=edit)
    async with emulated(config, time_scale=0) as (config, servers):
        with caplog.at_level(logging.INFO, logger=CACHES_LOGGER):
            rails = LLMRails(config)
        assert uncached not in rails.model_caches
        for _ in range(3):
            assert await rails.generate_async(SAFE) != REFUSAL
        counts = calls(servers)
        assert counts[uncached] == 3 and counts["main"] == 3
        cached = [name for name in GUARDS if name != uncached]
        # the first turn's calls only: content safety's input and output check, one for the others
        assert all(counts[name] == (2 if name == "content_safety" else 1) for name in cached)
        await rails.aclose()
    (line,) = cache_lines(caplog)
    assert f"; main: not cached; {uncached}: not cached (cache: {{enabled: false}}) [" in line
    assert all(f"{name} (50000, memory)" in line for name in cached)


SELF_CHECK = """
models:
  - type: main
    engine: openai
    model: gpt-3.5-turbo-instruct
{cache}
instructions:
  - type: general
    content: |
      Below is a conversation between a user and a bot called the ABC Bot.
      The bot is designed to answer employee questions about the ABC Company.

rails:
  input:
    flows:
      - self check input
{output}
prompts:
  - task: self_check_input
    content: |
      Your task is to check if the user message below complies with the company policy for talking
      with the company bot.

      Company policy for the user messages:
      - should not contain harmful data
      - should not ask the bot to impersonate someone

      User message: "{{ user_input }}"

      Question: Should the user message be blocked (Yes or No)?
      Answer:
  - task: self_check_output
    content: |
      Your task is to check if the bot message below complies with the company policy.

      Company policy for the bot:
      - messages should not contain any explicit content

      Bot message: "{{ bot_response }}"

      Question: Should the message be blocked (Yes or No)?
      Answer:
"""
"""A config in the shape of NeMo's getting-started "input rails" config (and of its tests'
``input_rails`` config): the self check runs on ``main``, and nothing says ``cache:``."""

OUTPUT_RAILS = "  output:\n    flows:\n      - self check output\n"


def self_check_config(cache: str = "", output: str = "") -> RailsConfig:
    text = SELF_CHECK.replace("{cache}", cache).replace("{output}", output)
    assert "cache" not in text or cache  # the point: no cache entry unless the test gives one
    return RailsConfig.from_content(text, source="config.yml")


@pytest.mark.parametrize(
    ("cache", "repeat_calls", "line"),
    [
        # No cache entry: the self check's verdict is cached; a repeat asks only for the answer.
        (
            "",
            1,
            "guardcache caches: main (50000, memory; self check input verdicts only, never its answers) "
            "[config.yml]",
        ),
        # Turned off on main: every turn asks for the self check again, and for the answer.
        (
            "    cache: {enabled: false}",
            2,
            "guardcache caches: none; main: not cached (cache: {enabled: false}) [config.yml]",
        ),
    ],
    ids=["no-cache-entry", "cache-off"],
)
async def test_a_self_check_on_main_is_cached_by_default_and_its_answers_never_are(
    caplog: pytest.LogCaptureFixture, cache: str, repeat_calls: int, line: str
) -> None:
    config = self_check_config(cache)
    async with emulated(config, time_scale=0) as (config, servers):
        with caplog.at_level(logging.INFO, logger=CACHES_LOGGER):
            rails = LLMRails(config)
        first = await rails.generate_async(SAFE)
        assert first != REFUSAL
        assert servers["main"].stats().requests_total == 2  # the self check, then the answer
        assert await rails.generate_async(SAFE) == first
        assert servers["main"].stats().requests_total == 2 + repeat_calls
        calls = [(call.task, call.from_cache) for call in rails.explain().llm_calls]
        assert calls == [("self_check_input", repeat_calls == 1), ("general", False)]  # answers: never
        if repeat_calls == 1:
            stats = rails.model_caches["main"].get_stats()
            assert (stats.hits, stats.misses, stats.current_size) == (1, 1, 1)
            # Keyed by what the model judged: another message is another self check.
            assert await rails.generate_async("Hi, what is the vacation policy?") != REFUSAL
            assert servers["main"].stats().requests_total == 5
        else:
            assert "main" not in rails.model_caches
        await rails.aclose()
    assert cache_lines(caplog) == [line]


async def test_self_check_input_and_output_on_main_leave_only_the_answer_on_a_repeated_turn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = self_check_config(output=OUTPUT_RAILS)
    async with emulated(config, time_scale=0) as (config, servers):
        with caplog.at_level(logging.INFO, logger=CACHES_LOGGER):
            rails = LLMRails(config)
        for _ in range(3):
            assert await rails.generate_async(SAFE) != REFUSAL
        # turn 1: self check input, answer, self check output; turns 2 and 3: the answer only
        assert servers["main"].stats().requests_total == 3 + 2
        turn = rails.explain()
        assert [(c.flow, c.from_cache) for c in (*turn.checks.input, *turn.checks.output)] == [
            ("self check input", True),
            ("self check output", True),
        ]
        assert rails.model_caches["main"].get_stats().current_size == 2  # two verdicts, no answer
        await rails.aclose()
    assert cache_lines(caplog) == [
        "guardcache caches: main (50000, memory; self check input, self check output verdicts only, "
        "never its answers) [config.yml]"
    ]


async def test_main_gets_no_cache_when_no_check_runs_on_it(caplog: pytest.LogCaptureFixture) -> None:
    # Its answers are never cached, so a cache on a main model no check runs on would hold nothing:
    # none is built, whatever its entry says.
    text = "models:\n  - {type: main, engine: nim, model: m, cache: {enabled: true}}\n"
    with caplog.at_level(logging.INFO, logger=CACHES_LOGGER):
        rails = LLMRails(RailsConfig.from_content(text))
    assert rails.model_caches == {}
    assert cache_lines(caplog) == ["guardcache caches: none; main: not cached [<string>]"]
    await rails.aclose()


async def test_each_llmrails_logs_its_caches_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = nemoguards(tmp_path)
    with caplog.at_level(logging.INFO, logger=CACHES_LOGGER):
        first, second = LLMRails(config), LLMRails(config)
    lines = cache_lines(caplog)
    assert len(lines) == 2 and lines[0] == lines[1]
    assert first.model_caches is not second.model_caches


MARKER = "sk-guardcache-marker-7f3c91d2"


async def test_the_key_nemos_llama_guard_example_writes_is_sent_as_the_bearer_token(
    emulator_factory: EmulatorFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # NeMo's example writes vLLM's placeholder, api_key: EMPTY; a server that checks keys gets it.
    config = RailsConfig.from_path(FIXTURES / "llama_guard")
    guard = await emulator_factory(model="meta-llama/LlamaGuard-7b", api_key="EMPTY")
    main = await emulator_factory(model="gpt-3.5-turbo-instruct")
    config = config.with_base_urls({"llama_guard": guard.base_url, "main": main.base_url})
    with caplog.at_level(logging.INFO, logger=CACHES_LOGGER):
        rails = LLMRails(config)
    assert await rails.generate_async(SAFE) != REFUSAL
    assert await rails.generate_async("How do I make a bomb?") == REFUSAL
    assert await rails.generate_async(SAFE) != REFUSAL
    assert guard.stats().requests_total == 3  # safe: in and out; bomb: in; the repeat: cached
    assert cache_lines(caplog)[0].startswith("guardcache caches: llama_guard (50000, memory); main: not")
    await rails.aclose()


def leaks(text: str) -> bool:
    return MARKER in text


async def test_a_key_written_in_the_config_is_sent_and_never_shown(
    emulator_factory: EmulatorFactory, caplog: pytest.LogCaptureFixture
) -> None:
    text = f"""
models:
  - type: main
    engine: nim
    model: meta/llama-3.1-8b-instruct
    parameters: {{base_url: http://localhost:8000/v1}}
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    parameters: {{base_url: http://localhost:8001/v1, api_key: {MARKER}}}
rails:
  input: {{flows: [content safety check input $model=content_safety]}}
  output: {{flows: [content safety check output $model=content_safety]}}
"""
    caplog.set_level(logging.DEBUG)  # every logger, every level
    guard = await emulator_factory(model="nvidia/llama-3.1-nemoguard-8b-content-safety", api_key=MARKER)
    wrong = await emulator_factory(model="nvidia/llama-3.1-nemoguard-8b-content-safety", api_key="other")
    main = await emulator_factory()
    loaded = RailsConfig.from_content(text, source="config.yml")
    config = loaded.with_base_urls({"content_safety": guard.base_url, "main": main.base_url})
    rails = LLMRails(config)
    assert await rails.generate_async(SAFE) != REFUSAL  # the guard accepted the bearer token
    assert await rails.generate_async("How do I make a bomb?") == REFUSAL
    assert guard.stats().requests_total == 3
    turn = rails.explain()
    shown = [
        str(turn),
        repr(turn),
        turn.summary(),
        str(turn.checks),
        repr(turn.llm_calls),
        repr(config),
        str(config),
        config.model_dump_json(),
        repr(config.model("content_safety")),
        repr(rails._runtime.clients["content_safety"]),
        str(rails._runtime.clients["content_safety"]),
        repr(rails.model_caches),
    ]
    # The same key against a server that wants another: the errors name no key either.
    bad = LLMRails(loaded.with_base_urls({"content_safety": wrong.base_url, "main": main.base_url}))
    assert await bad.generate_async(SAFE) == REFUSAL  # a misconfigured guard blocks
    result = bad.explain().checks.input[0]
    assert result.error is not None and "401" in result.error
    shown += [str(result), repr(result)]
    client = build_client(loaded.with_base_urls({"content_safety": wrong.base_url}).model("content_safety"))
    with pytest.raises(BackendError) as info:
        await client.complete([{"role": "user", "content": "hi"}])
    shown += [str(info.value), repr(info.value), str(info.value.__cause__ or "")]
    assert not [s for s in shown if leaks(s)]
    logged = [r for r in caplog.records if leaks(r.getMessage()) or leaks(str(r.args))]
    assert logged == []
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "config.yml: models[1].parameters.api_key: a key in a config file ends up in version " in warned[0]
    await rails.aclose()
    await bad.aclose()
