"""User prompts override the defaults per (task, model type); templates are checked at load time."""

from __future__ import annotations

import pytest

from guardcache.config import RailsConfig
from guardcache.config.prompts import TaskPrompt, default_prompts, select_prompt, split_task
from guardcache.errors import ConfigError

CONFIG = """\
models:
  - {type: main, engine: nim, model: m}
  - {type: content_safety, engine: nim, model: nvidia/llama-3.1-nemoguard-8b-content-safety}
  - {type: llama_guard, engine: vllm_openai, model: meta-llama/LlamaGuard-7b,
     parameters: {base_url: 'http://localhost:5000/v1'}}
rails:
  input: {flows: [content safety check input $model=content_safety]}
  output: {flows: [content safety check output $model=content_safety]}
"""


def default(task: str) -> TaskPrompt:
    return next(p for p in default_prompts() if p.task == task)


def test_split_task_reads_the_model_suffix() -> None:
    assert split_task("content_safety_check_input $model=content_safety") == (
        "content_safety_check_input",
        "content_safety",
    )
    assert split_task("self_check_input") == ("self_check_input", None)


def test_without_user_prompts_the_defaults_are_used() -> None:
    config = RailsConfig.from_content(CONFIG)
    task = "content_safety_check_input $model=content_safety"
    assert config.prompt_for("content_safety_check_input", "content_safety") == default(task)
    assert config.prompt_for(task) == default(task)


def test_a_user_prompt_overrides_exactly_its_task_and_model_type() -> None:
    prompts = """\
prompts:
  - task: content_safety_check_input $model=content_safety
    output_parser: nemoguard_parse_prompt_safety
    content: "Mine: {{ user_input }}"
"""
    config = RailsConfig.from_content(CONFIG, prompts=prompts)
    assert config.prompt_for("content_safety_check_input", "content_safety").content == (
        "Mine: {{ user_input }}"
    )
    out = "content_safety_check_output $model=content_safety"
    assert config.prompt_for(out) == default(out)
    assert [p.task for p in config.prompts] == [
        "content_safety_check_input $model=content_safety",
        "content_safety_check_output $model=content_safety",
    ]


def test_a_prompt_for_another_model_type_does_not_override_the_default() -> None:
    prompts = [{"task": "content_safety_check_input $model=llama_guard", "content": "LG {{ user_input }}"}]
    config = RailsConfig.from_content(CONFIG, prompts=prompts)
    assert config.prompt_for("content_safety_check_input", "llama_guard").content == "LG {{ user_input }}"
    task = "content_safety_check_input $model=content_safety"
    assert config.prompt_for("content_safety_check_input", "content_safety") == default(task)


def test_a_missing_prompt_is_a_config_error_listing_what_exists() -> None:
    config = RailsConfig.from_content(CONFIG, source="config.yml")
    with pytest.raises(ConfigError) as info:
        config.prompt_for("content_safety_check_input", "llama_guard")
    assert str(info.value) == (
        "config.yml: no prompt for task 'content_safety_check_input' and model type 'llama_guard' "
        "(prompts exist for: content_safety_check_input $model=content_safety, "
        "content_safety_check_output $model=content_safety)"
    )


def test_the_models_filter_prefers_the_most_specific_prompt() -> None:
    def p(models: list[str] | None, content: str) -> TaskPrompt:
        return TaskPrompt(
            task="t $model=g", content=content, models=None if models is None else tuple(models)
        )

    prompts = [p(None, "any"), p(["nim"], "engine"), p(["nim/m1"], "exact"), p(["openai"], "other")]
    assert select_prompt(prompts, "t", "g", engine="nim", model="m1").content == "exact"  # type: ignore[union-attr]
    assert select_prompt(prompts, "t", "g", engine="nim", model="m2").content == "engine"  # type: ignore[union-attr]
    assert select_prompt(prompts, "t", "g", engine="vllm_openai", model="x").content == "any"  # type: ignore[union-attr]
    assert select_prompt(prompts[3:], "t", "g", engine="nim", model="m1") is None
    untyped = TaskPrompt(task="t", content="untyped")
    assert select_prompt([untyped], "t", "g") == untyped
    assert select_prompt([untyped, prompts[0]], "t", "g") == prompts[0]


# Each message names the prompt's task now, beside the file and the field; ``history`` is allowed
# in every task (None outside topic control, as NeMo renders it).
PROMPT = "<prompts>: prompts[0].content: prompt 'content_safety_check_input $model=content_safety': "


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "Check {{ user_inptu }}",
            f"{PROMPT}unknown variable 'user_inptu' on line 1; "
            "did you mean 'user_input'? (this task can use: history, user_input; settings: ",
        ),
        (
            "Check {{ user_input }}\n{{ bot_response }}",
            f"{PROMPT}unknown variable 'bot_response' on line 2 "
            "(this task can use: history, user_input; settings: ",
        ),
        (
            "Check {{ user_input | uper }}",
            f"{PROMPT}unknown filter 'uper' on line 1; did you mean 'upper'?",
        ),
        (
            "Check {% for x in user_input %}",
            f"{PROMPT}template syntax error on line 1: Unexpected end of template",
        ),
    ],
)
def test_a_bad_template_fails_when_the_config_loads(content: str, message: str) -> None:
    prompts = [{"task": "content_safety_check_input $model=content_safety", "content": content}]
    with pytest.raises(ConfigError) as info:
        RailsConfig.from_content(CONFIG, prompts=prompts)
    assert str(info.value).startswith(message)


def test_the_output_template_may_use_the_bot_response() -> None:
    prompts = [
        {
            "task": "content_safety_check_output $model=content_safety",
            "content": "{{ user_input }} / {{ bot_response }}",
        }
    ]
    config = RailsConfig.from_content(CONFIG, prompts=prompts)
    prompt = config.prompt_for("content_safety_check_output", "content_safety")
    assert prompt.content == "{{ user_input }} / {{ bot_response }}"


def test_message_list_prompts_load_and_are_checked() -> None:
    prompts = """\
prompts:
  - task: content_safety_check_input $model=content_safety
    messages:
      - type: system
        content: Rules.
      - type: user
        content: "{{ user_input }}"
"""
    config = RailsConfig.from_content(CONFIG, prompts=prompts)
    messages = config.prompt_for("content_safety_check_input", "content_safety").messages
    assert messages is not None and [m.type for m in messages] == ["system", "user"]
    bad = prompts.replace('"{{ user_input }}"', '"{{ bot_response }}"')
    with pytest.raises(
        ConfigError,
        match=r"prompts\[0\]\.messages\[1\]\.content: prompt '[^']+': unknown variable 'bot_response'",
    ):
        RailsConfig.from_content(CONFIG, prompts=bad)


def test_prompts_of_tasks_guardcache_never_renders_load_unchecked() -> None:
    # NeMo prompts.yml files often carry other tasks with Jinja syntax; they are kept, not rendered.
    prompts = [
        {
            "task": "generate_user_intent",
            "content": "{{ user_input }} {% if x %}{{ history | colang }}{% endif %}",
        },
        {"task": "general", "messages": ["{{ history | to_chat_messages }}"], "stop": ["\n"], "mode": "chat"},
    ]
    config = RailsConfig.from_content(CONFIG, prompts=prompts)
    assert config.prompts[1].messages is not None and config.prompts[1].messages[0].type is None


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ({"task": "t", "content": "a", "messages": [{"type": "user", "content": "b"}]}, "got both"),
        ({"task": "t"}, "got neither"),
        ({"task": "t", "content": "a", "max_tokens": True}, "max_tokens: expected a number (got true)"),
        ({"task": "t $model", "content": "a"}, "task: cannot read '$model'"),
        ({"task": "t", "content": "a", "temperature": 0}, "temperature: unknown key"),
    ],
)
def test_malformed_prompts_are_config_errors(prompt: dict[str, object], message: str) -> None:
    with pytest.raises(
        ConfigError, match=message.replace("$", r"\$").replace("(", r"\(").replace(")", r"\)")
    ):
        RailsConfig.from_content(CONFIG, prompts=[prompt])
