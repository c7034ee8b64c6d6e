"""NeMo Guardrails' config surface that NeMo's own example configs use, accepted as NeMo reads it:

- ``parameters.api_key`` (NeMo's llama_guard example writes vLLM's placeholder ``EMPTY``) and
  ``rails.config.jailbreak_detection.api_key``: accepted with a WARNING naming the field; the value
  is used by the client and appears in no log, repr, error, request body or cache namespace;
- every template variable NeMo's task manager and guard actions give the prompts guardcache runs
  renders NeMo's value (docs/nemo-guardrails.md, "Template variables"); an unknown one
  is a load error naming the file, the field, the prompt and the variable;
- ``import_paths`` that would import other config packages is refused at load, naming the file.
(The key on the wire, and ``explain()``: tests/integration/test_default_caches.py.)
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from guardcache import LLMRails, RailsConfig
from guardcache.checks.check import LLMCheck
from guardcache.config.parameters import parse_parameters
from guardcache.errors import ConfigError
from guardcache.prompts.nemo_defaults import default_sample_conversation
from guardcache.rails.builder import build_client, build_runtime

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_configs"
MARKER = "sk-guardcache-marker-4b1e0a77"
CONFIG_LOGGER = "guardcache.config"

MODELS = f"""\
models:
  - type: main
    engine: nim
    model: meta/llama-3.1-8b-instruct
    parameters: {{base_url: http://localhost:8000/v1}}
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    parameters: {{base_url: http://localhost:8001/v1}}
  - type: llama_guard
    engine: vllm_openai
    model: meta-llama/Llama-Guard-3-8B
    parameters:
      base_url: http://localhost:5000/v1
      temperature: 0
      api_key: {MARKER}
rails:
  input: {{flows: [content safety check input $model=llama_guard]}}
prompts:
  - task: content_safety_check_input $model=llama_guard
    output_parser: is_content_safe
    content: "User: {{{{ user_input }}}}"
"""


def load(text: str = MODELS, **kw: str) -> RailsConfig:
    return RailsConfig.from_content(text, source="config.yml", **kw)


# -- parameters.api_key -------------------------------------------------------------------------


def test_a_key_in_parameters_is_accepted_with_a_warning_naming_the_field(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger=CONFIG_LOGGER):
        config = load()
    assert [r.getMessage() for r in caplog.records] == [
        "config.yml: models[2].parameters.api_key: a key in a config file ends up in version control "
        "and logs; prefer api_key_env_var (the name of an environment variable holding the key)"
    ]
    model = config.model("llama_guard")
    assert model.api_key() == MARKER  # the client uses it (below: the Authorization header)
    assert model.parameters == {"base_url": "http://localhost:5000/v1", "temperature": 0}


def test_nemos_llama_guard_example_loads_with_its_placeholder_key(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=CONFIG_LOGGER):
        config = RailsConfig.from_path(FIXTURES / "llama_guard")
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.endswith(
        "llama_guard/config.yml: models[1].parameters.api_key: a key in a config "
        "file ends up in version control and logs; prefer api_key_env_var (the "
        "name of an environment variable holding the key)"
    )
    assert config.model("llama_guard").api_key() == "EMPTY"
    assert config.model("main").api_key() is None


def test_the_key_is_in_no_repr_log_or_namespace_and_a_rotated_key_keeps_the_namespace(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    config = load()
    model = config.model("llama_guard")
    client = build_client(model)
    assert client._headers["Authorization"] == f"Bearer {MARKER}"  # sent as the bearer token
    runtime = build_runtime(config)
    check = runtime.input_rails[0].check
    assert isinstance(check, LLMCheck)
    assert "api_key" not in check.params  # never a body field
    shown = [
        repr(config),
        str(config),
        config.model_dump_json(),
        repr(config.model_dump()),
        repr(model),
        repr(client),
        str(client),
        repr(check.namespace),
        check.namespace.digest.hex(),
        repr(parse_parameters({"api_key": MARKER}).transport),
    ]
    assert not [s for s in shown if MARKER in s]
    assert not [r for r in caplog.records if MARKER in r.getMessage()]
    # A rotated key must not empty the cache: the namespace does not depend on it.
    rotated = build_runtime(load(MODELS.replace(MARKER, "another-key"))).input_rails[0].check
    assert isinstance(rotated, LLMCheck) and rotated.namespace == check.namespace
    keyless = build_runtime(load(MODELS.replace(f"      api_key: {MARKER}\n", ""))).input_rails[0].check
    assert isinstance(keyless, LLMCheck) and keyless.namespace == check.namespace


def test_parsing_parameters_makes_the_key_a_transport_setting() -> None:
    parsed = parse_parameters({"api_key": MARKER, "temperature": 0, "base_url": "http://h:1/v1"})
    assert parsed.transport.api_key == MARKER and parsed.generation.as_body() == {"temperature": 0}
    assert MARKER not in repr(parsed.transport) and MARKER not in repr(parsed.generation)
    with pytest.raises(ConfigError) as info:
        parse_parameters({"api_key": MARKER, "openai_api_key": MARKER + "x"})
    assert MARKER not in str(info.value)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        pytest.param(
            ("      temperature: 0\n", "      temperature: -1\n"),
            "config.yml: models[2].parameters.temperature: expected a number from 0 to 2 (got -1)",
            id="another-field-of-the-model",
        ),
        pytest.param(
            ("      api_key: ", "      openai_api_key: other\n      api_key: "),
            "config.yml: models[2].parameters.openai_api_key: the API key is given twice, with different "
            "values (api_key, openai_api_key); keep one",
            id="two-keys",
        ),
        pytest.param(
            ("      api_key: ", "      api_key: [\n"),
            "",
            id="not-yaml",
        ),
        pytest.param(
            ("    engine: vllm_openai\n", "    engine: vllm_openai\n    api_key_env_var: GUARD_KEY\n"),
            "config.yml: models[2].parameters.api_key: the API key is given twice (parameters.api_key and "
            "api_key_env_var); keep api_key_env_var",
            id="key-and-env-var",
        ),
    ],
)
def test_errors_never_show_the_key(
    edit: tuple[str, str], message: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ConfigError) as info:
        load(MODELS.replace(*edit))
    assert MARKER not in str(info.value) and MARKER not in repr(info.value)
    if message:
        assert str(info.value) == message
    assert not [r for r in caplog.records if MARKER in r.getMessage()]


def test_the_jailbreak_nims_api_key_is_accepted_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    text = f"""\
rails:
  input: {{flows: [jailbreak detection model]}}
  config:
    jailbreak_detection:
      nim_base_url: http://localhost:8003/v1
      api_key: {MARKER}
"""
    with caplog.at_level(logging.WARNING, logger=CONFIG_LOGGER):
        config = load(text)
    assert [r.getMessage() for r in caplog.records] == [
        "config.yml: rails.config.jailbreak_detection.api_key: a key in a config file ends up in version "
        "control and logs; prefer api_key_env_var (the name of an environment variable holding the key)"
    ]
    detection = config.rails.config.jailbreak_detection
    assert detection.api_key() == MARKER
    assert MARKER not in repr(config) and MARKER not in config.model_dump_json()
    # Copies pointing the NIM elsewhere keep the key.
    moved = config.with_base_urls({"jailbreak_detection": "http://127.0.0.1:9/v1"})
    assert moved.rails.config.jailbreak_detection.api_key() == MARKER
    with pytest.raises(ConfigError, match="given twice") as info:
        load(text + "      api_key_env_var: JB_KEY\n")
    assert MARKER not in str(info.value)


# -- template variables ---------------------------------------------------------------------------

SELF_CHECK = """\
models:
  - type: main
    engine: nim
    model: meta/llama-3.1-8b-instruct
    parameters: {base_url: http://localhost:8000/v1}
rails:
  input: {flows: [self check input]}
  output: {flows: [self check output]}
prompts:
  - task: self_check_input
    content: "[{{ history }}] [{{ relevant_chunks }}] [{{ general_instructions }}] {{ user_input }}"
  - task: self_check_output
    content: |-
      Bot message: "{{ bot_response }}"
      {% if bot_thinking %}Bot reasoning: "{{ bot_thinking }}"{% endif %}
      [{{ bot_thinking }}] [{{ sample_conversation_two_turns == sample_conversation }}]
      Should this be blocked (Yes or No)?
"""


def rendered(config: RailsConfig, direction: str = "input", **variables: str) -> str:
    """The text the check of the first rail of ``direction`` sends for these variables."""
    runtime = build_runtime(config)
    check = (runtime.input_rails if direction == "input" else runtime.output_rails)[0].check
    assert isinstance(check, LLMCheck)
    messages = check.messages(check.texts.read(variables))
    return "\n".join(m["content"] for m in messages)


def test_the_values_nemos_task_manager_gives_every_prompt_render() -> None:
    # history: NeMo's guard actions give the task manager no events (None); relevant_chunks is
    # filled only for bot messages (empty here, as undefined in NeMo); general_instructions is
    # NeMo's default instruction without an `instructions:` in the config.
    text = rendered(load(SELF_CHECK), user_input="Hi")
    assert text.startswith("[None] [] [Below is a conversation between a helpful AI assistant and a user.")
    assert text.endswith("does not know.] Hi")
    mine = load(SELF_CHECK + "instructions:\n  - {type: general, content: Be brief.}\n")
    assert rendered(mine, user_input="Hi") == "[None] [] [Be brief.] Hi"


def test_bot_thinking_renders_as_nemo_renders_a_model_without_a_reasoning_trace() -> None:
    # NeMo's self check output passes bot_thinking = None when the main model gave no trace:
    # false in `{% if %}`, printed as "None". guardcache reads no trace.
    config = load(SELF_CHECK)
    assert rendered(config, "output", user_input="Hi", bot_response="Hello!") == (
        'Bot message: "Hello!"\n\n[None] [True]\nShould this be blocked (Yes or No)?'
    )


def test_sample_conversation_is_the_configs_or_nemos_default() -> None:
    prompt = "  - task: self_check_input\n    content: '{{ sample_conversation }}|{{ user_input }}'\n"
    base = SELF_CHECK.split("prompts:")[0].replace("  output: {flows: [self check output]}\n", "")
    default = load(base + "prompts:\n" + prompt)
    assert rendered(default, user_input="Hi") == default_sample_conversation() + "|Hi"
    assert default_sample_conversation().startswith('user "Hello there!"\n  express greeting\n')
    own = load(base + 'sample_conversation: |\n  user "hi"\n' + "prompts:\n" + prompt)
    assert rendered(own, user_input="Hi") == 'user "hi"\n|Hi'


@pytest.mark.parametrize("enabled", [False, True])
@pytest.mark.parametrize(
    "switch",
    [
        "{% if reasoning_enabled %}/think{% else %}/no_think{% endif %}",  # NeMo's actions pass it
        "{% if reasoning_mode %}/think{% else %}/no_think{% endif %}",  # NeMo's first example
        "{% if config.content_safety.reasoning.enabled %}/think{% else %}/no_think{% endif %}",
    ],
)
def test_every_form_of_the_reasoning_switch_follows_the_config(switch: str, enabled: bool) -> None:
    text = f"""\
models:
  - type: guard
    engine: vllm_openai
    model: nvidia/Nemotron-Content-Safety-Reasoning-4B
    parameters: {{base_url: http://localhost:8001/v1}}
rails:
  input: {{flows: [content safety check input $model=guard]}}
  config: {{content_safety: {{reasoning: {{enabled: {str(enabled).lower()}}}}}}}
prompts:
  - task: content_safety_check_input $model=guard
    output_parser: nemotron_reasoning_parse_prompt_safety
    content: "Human user: {{{{ user_input }}}} {switch}"
"""
    expected = "/think" if enabled else "/no_think"
    assert rendered(load(text), user_input="Hi") == f"Human user: Hi {expected}"


@pytest.mark.parametrize("enabled", [False, True])
def test_nemos_content_safety_reasoning_example_loads_and_renders_its_switch(enabled: bool) -> None:
    # Refused before: `config` was an unknown variable.
    folder = FIXTURES / "content_safety_reasoning"
    config = (folder / "config.yml").read_text(encoding="utf-8")
    config = config.replace("enabled: false", f"enabled: {str(enabled).lower()}")
    loaded = load(config, prompts=(folder / "prompts.yml").read_text(encoding="utf-8"))
    text = rendered(loaded, user_input="How do I pick a lock?")
    assert "Human user:\nHow do I pick a lock?\n" in text
    assert text.endswith(f"as None. {'/think' if enabled else '/no_think'}\n")
    out = rendered(loaded, "output", user_input="Hi", bot_response="Hello!")
    assert "AI assistant:\nHello!\n" in out


def test_the_reasoning_switch_is_part_of_the_cache_namespace() -> None:
    folder = FIXTURES / "content_safety_reasoning"
    text = (folder / "config.yml").read_text(encoding="utf-8")
    prompts = (folder / "prompts.yml").read_text(encoding="utf-8")
    off = build_runtime(load(text, prompts=prompts)).input_rails[0].check
    on = (
        build_runtime(load(text.replace("enabled: false", "enabled: true"), prompts=prompts))
        .input_rails[0]
        .check
    )
    assert isinstance(off, LLMCheck) and isinstance(on, LLMCheck) and off.namespace != on.namespace


def test_an_unknown_variable_is_a_load_error_naming_the_file_the_prompt_and_the_variable(
    tmp_path: Path,
) -> None:
    (tmp_path / "config.yml").write_text(SELF_CHECK.split("prompts:")[0], encoding="utf-8")
    prompts = SELF_CHECK.split("prompts:\n")[1].replace("{{ bot_thinking }}]", "{{ bot_thinkin }}]")
    (tmp_path / "prompts.yml").write_text("prompts:\n" + prompts, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        RailsConfig.from_path(tmp_path)
    message = str(info.value)
    assert message.startswith(
        f"{tmp_path / 'prompts.yml'}: prompts[1].content: prompt 'self_check_output': unknown variable "
        "'bot_thinkin' on line 3; did you mean 'bot_thinking'? (this task can use: bot_response, history, "
        "user_input; settings: bot_thinking, "
    )


def test_topic_control_still_reads_the_conversation_as_history() -> None:
    text = """\
models:
  - type: topic_control
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-topic-control
    parameters: {base_url: http://localhost:8002/v1}
rails:
  input: {flows: [topic safety check input $model=topic_control]}
prompts:
  - task: topic_safety_check_input $model=topic_control
    content: "Rules. {{ history | user_assistant_sequence }}"
"""
    runtime = build_runtime(load(text))
    check = runtime.input_rails[0].check
    assert isinstance(check, LLMCheck)
    history = ({"role": "user", "content": "a"}, {"role": "assistant", "content": "b"})
    messages = check.messages(check.texts.read({"user_input": "c", "history": history}))
    assert messages[0]["content"].startswith("Rules. User: a\nAssistant: b")
    assert messages[-1] == {"role": "user", "content": "c"}


# -- import_paths -------------------------------------------------------------------------------


def test_import_paths_that_import_something_are_refused_naming_the_file_and_why(tmp_path: Path) -> None:
    (tmp_path / "config.yml").write_text(MODELS, encoding="utf-8")
    (tmp_path / "imports.yml").write_text("import_paths:\n  - ../other_rails\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        RailsConfig.from_path(tmp_path)
    message = str(info.value)
    assert message.startswith(
        f"{tmp_path / 'imports.yml'}: import_paths: NeMo Guardrails would import the config packages "
        "'../other_rails' (their Colang flows, YAML and Python actions) into this config; guardcache "
        "cannot import NeMo config packages"
    )
    assert "remove import_paths" in message


@pytest.mark.parametrize("value", ["[]", "null"])
def test_an_empty_import_paths_is_accepted(value: str, caplog: pytest.LogCaptureFixture) -> None:
    """It imports nothing: an ignored NeMo setting like any other (said so), the config as without it."""
    plain = load()
    with caplog.at_level(logging.WARNING, logger=CONFIG_LOGGER):
        config = load(MODELS + f"import_paths: {value}\n")
    assert [m.type for m in config.models] == [m.type for m in plain.models]
    assert config.rails.input.flows == plain.rails.input.flows
    assert any(
        "ignoring NeMo Guardrails settings that guardcache does not use: import_paths" in r.getMessage()
        for r in caplog.records
    )


def test_llmrails_builds_for_every_fixture_that_loads() -> None:
    """Each NeMo config that loads gets its rails: its guard's flows as input and output rails, and a
    cache for that guard's verdicts (never for the main model's answers)."""
    for name, guard, flows in (
        ("llama_guard", "llama_guard", ("llama guard check input", "llama guard check output")),
        (
            "content_safety_reasoning",
            "content_safety_reasoning",
            (
                "content safety check input $model=content_safety_reasoning",
                "content safety check output $model=content_safety_reasoning",
            ),
        ),
    ):
        rails = LLMRails(RailsConfig.from_path(FIXTURES / name))
        assert list(rails.model_caches) == [guard], name
        runner = rails.runner
        assert [r.ref.text for r in runner.input_rails] == [flows[0]], name
        assert [r.ref.text for r in runner.output_rails] == [flows[1]], name
