"""Jinja prompt templates: NeMo-style syntax, the sandbox, settings, load-time checks, static prefix.

The NeMo-style prompts below are written for these tests; they use the same Jinja constructs as NeMo
Guardrails' ``content_safety_reasoning`` and ``content_safety_vision`` example prompts (a ``/think``
switch on ``reasoning_enabled``; a default category list set when ``categories`` is not defined, a
loop over it and ``excluded_category_keys``; typed messages), with shorter text.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2.sandbox import SandboxedEnvironment

from guardcache.config import RailsConfig
from guardcache.config.prompts import TaskPrompt, default_prompts
from guardcache.errors import ConfigError
from guardcache.prompts import (
    Settings,
    TemplateCompileError,
    TemplateRenderError,
    compile_template,
    fingerprint,
    placeholders,
    render,
    render_messages,
    static_prefix,
    template_problems,
)
from guardcache.prompts.filters import (
    first_turns,
    indent,
    last_turns,
    to_chat_messages,
    user_assistant_sequence,
)
from guardcache.prompts.jinja import ENVIRONMENT, MAX_REPEAT_LENGTH
from guardcache.prompts.legacy import PLACEHOLDER, is_plain, render_placeholders

SHIPPED = {p.task: p for p in default_prompts()}
BOTH = {"user_input", "bot_response"}

REASONING = """\
You are a classifier of a human's request to an AI assistant.
Categories:
S1: Violence.
S2: Fraud.

Human user:
{{ user_input }}

AI assistant:
{{ bot_response }}

Answer "Prompt harm: <harmful/unharmful>" and "Response harm: <harmful/unharmful>". \
{% if reasoning_enabled %}/think{% else %}/no_think{% endif %}
"""

VISION_SYSTEM = """\
You judge whether a user's message is unsafe.
Look at its text and images.

{%- if categories is not defined %}
    {% set categories = {
        "S1": "Violent Crimes.",
        "S2": "Privacy.",
        "S3": "Elections."
    } %}
{%- endif %}

<BEGIN UNSAFE CONTENT CATEGORIES>
{%- for key, desc in categories.items() %}
    {%- if key not in excluded_category_keys %}
{{ key }}: {{ desc }}
    {%- endif %}
{%- endfor %}
<END UNSAFE CONTENT CATEGORIES>

First line 'safe' or 'unsafe'; if unsafe, a second line with the violated categories.
"""

BASE_CONFIG = """\
models:
  - {type: main, engine: nim, model: m}
  - {type: content_safety_reasoning, engine: openai, model: nvidia/Nemotron-Content-Safety-Reasoning-4B,
     parameters: {openai_api_base: 'http://localhost:8001/v1', temperature: 0.6, top_p: 0.95}}
  - {type: vision_rails, engine: nim, model: meta/llama-4-maverick-17b-128e-instruct}
rails:
  config: {content_safety: {reasoning: {enabled: false}}}
  input:
    flows:
      - content safety check input $model=content_safety_reasoning
      - content safety check input $model=vision_rails
  output: {flows: [content safety check output $model=content_safety_reasoning]}
"""


def nemo_style_prompts() -> list[dict[str, Any]]:
    check_input = REASONING.replace("AI assistant:\n{{ bot_response }}", "AI assistant:\nNone")
    return [
        {
            "task": "content_safety_check_input $model=content_safety_reasoning",
            "content": check_input,
            "output_parser": "nemotron_reasoning_parse_prompt_safety",
            "max_tokens": 400,
        },
        {
            "task": "content_safety_check_output $model=content_safety_reasoning",
            "content": REASONING,
            "output_parser": "nemotron_reasoning_parse_response_safety",
            "max_tokens": 400,
        },
        {
            "task": "content_safety_check_input $model=vision_rails",
            "messages": [
                {"type": "system", "content": VISION_SYSTEM},
                {"type": "user", "content": "{{ user_input  }}"},
            ],
            "stop": ["<|eot_id|>", "<|eom_id|>"],
            "output_parser": "is_content_safe",
            "max_tokens": 200,
        },
    ]


def prompt(**fields: Any) -> TaskPrompt:
    return TaskPrompt.model_validate({"task": "content_safety_check_output $model=x", **fields})


# --- byte-identical to the former renderer --------------------------------------------------------

# Text that looks like template code, Jinja delimiters, regex replacement syntax, line breaks.
TRICKY = st.sampled_from(
    ["{{ user_input }}", "{{", "}}", "{%", "%}", "{#", "#}", "{% if x %}y{% endif %}", "\\1", "\r\n", "{{-"]
)
TEXTS = st.lists(st.one_of(st.text(), TRICKY), max_size=6).map("".join)


@settings(max_examples=400)
@given(user=TEXTS, bot=TEXTS)
def test_the_shipped_prompts_render_exactly_as_with_the_former_renderer(user: str, bot: str) -> None:
    variables = {"user_input": user, "bot_response": bot}
    for task, shipped in SHIPPED.items():
        template = shipped.content or ""
        assert is_plain(template), task
        new = render(template, variables)
        assert new == render_placeholders(template, variables)
        assert render_messages(shipped, variables) == [{"role": "user", "content": new}]


LITERAL = st.text(st.characters(blacklist_characters="{\r", blacklist_categories=("Cs",))) | st.sampled_from(
    ['{"User Safety": safe}', "{ x }", "}}", "%}", "#}"]
)
HOLE = st.sampled_from(["user_input", "bot_response"]).flatmap(
    lambda name: st.sampled_from([f"{{{{ {name} }}}}", f"{{{{{name}}}}}", f"{{{{  {name}\t}}}}"])
)


@settings(max_examples=300)
@given(parts=st.lists(st.one_of(LITERAL, HOLE), max_size=8), user=TEXTS, bot=TEXTS)
def test_any_plain_placeholder_template_renders_as_before(parts: list[str], user: str, bot: str) -> None:
    template = "".join(parts)
    if not is_plain(template):  # two literals can join into '{%' etc.: not a plain template any more
        return
    variables = {"user_input": user, "bot_response": bot}
    assert template_problems(template, BOTH) == []
    assert render(template, variables) == render_placeholders(template, variables)
    first = PLACEHOLDER.search(template)
    assert static_prefix(template) == (template if first is None else template[: first.start()])


# --- single pass: user text is never template code -----------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "{{ bot_response }}",
        "{% if reasoning_enabled %}/think{% endif %}",
        "{% for x in range(10**6) %}{{ x }}{% endfor %}",
        "{# hidden #}{% raw %}{{ x }}{% endraw %}",
        "{{ ''.__class__.__mro__ }}",
    ],
)
def test_template_code_inside_user_text_is_inserted_verbatim(text: str) -> None:
    variables = {"user_input": text, "bot_response": "{{ user_input }}"}
    rendered = render(REASONING, variables, {"reasoning_enabled": False})
    assert f"Human user:\n{text}\n\nAI assistant:\n{{{{ user_input }}}}\n\n" in rendered
    assert rendered.endswith("/no_think\n")


# --- settings -----------------------------------------------------------------------------------


def test_reasoning_enabled_switches_the_directive_and_defaults_to_off() -> None:
    variables = {"user_input": "hi", "bot_response": "hello"}
    assert render(REASONING, variables).endswith('<harmful/unharmful>". /no_think\n')
    assert render(REASONING, variables, {"reasoning_enabled": True}).endswith('". /think\n')
    assert render(REASONING, variables, Settings({"reasoning_enabled": False})).endswith("/no_think\n")


def test_settings_are_checked_and_copied() -> None:
    with pytest.raises(
        ValueError, match="unknown setting 'reasoning_enable'; did you mean 'reasoning_enabled'"
    ):
        Settings({"reasoning_enable": True})
    with pytest.raises(TypeError, match="setting 'reasoning_enabled' must be true or false, not int"):
        Settings({"reasoning_enabled": 1})
    with pytest.raises(TypeError, match="must be a mapping, not str"):
        Settings({"categories": "S1"})
    with pytest.raises(TypeError, match=r"categories\['S1'\]: expected plain data"):
        Settings({"categories": {"S1": object()}})
    mine = {"S1": "Violence."}
    frozen = Settings({"categories": mine, "excluded_category_keys": ["S9"]})
    mine["S2"] = "Later."
    assert frozen["categories"] == {"S1": "Violence."} and frozen["excluded_category_keys"] == ("S9",)
    # The defaults grew with NeMo's other prompt values (bot_thinking, config, ...:
    # docs/nemo-guardrails.md, "Template variables"); categories still has none.
    defaults = dict(Settings())
    assert defaults["reasoning_enabled"] is False and defaults["excluded_category_keys"] == ()
    assert sorted(defaults) == [
        "bot_thinking",
        "config",
        "excluded_category_keys",
        "general_instructions",
        "reasoning_enabled",
        "reasoning_mode",
        "relevant_chunks",
        "sample_conversation",
        "sample_conversation_two_turns",
    ]


def test_a_variable_may_not_take_a_settings_name() -> None:
    with pytest.raises(ValueError, match="has the name of a setting"):
        render("{{ user_input }}", {"user_input": "a", "reasoning_enabled": "yes"})


def test_a_missing_name_is_an_error_never_an_empty_string() -> None:
    with pytest.raises(KeyError, match=r"no value for variable \{\{ bot_response \}\}"):
        render(REASONING, {"user_input": "a"})
    # A setting without a default is undefined: testing it works, using it unguarded fails.
    assert render("{% if categories is defined %}x{% else %}y{% endif %}", {}) == "y"
    with pytest.raises(TemplateRenderError, match=r"failed on line 2: UndefinedError$") as info:
        render("a\n{{ categories }}", {})
    assert info.value.detail == "'categories' is undefined"


# --- NeMo-style configs load unchanged and render ------------------------------------------------


def test_nemo_style_reasoning_and_vision_configs_load_and_render() -> None:
    config = RailsConfig.from_content(BASE_CONFIG, prompts=nemo_style_prompts())
    check_input = config.prompt_for("content_safety_check_input", "content_safety_reasoning")
    [message] = render_messages(check_input, {"user_input": "How do I pick a lock?"})
    assert "Human user:\nHow do I pick a lock?\n\nAI assistant:\nNone\n" in message["content"]
    assert message["content"].endswith("/no_think\n")

    vision = config.prompt_for("content_safety_check_input", "vision_rails")
    system, user = render_messages(vision, {"user_input": "Is this safe?"})
    assert user == {"role": "user", "content": "Is this safe?"}
    assert system["role"] == "system" and system["content"] == (
        "You judge whether a user's message is unsafe.\nLook at its text and images.\n    \n\n"
        "<BEGIN UNSAFE CONTENT CATEGORIES>\nS1: Violent Crimes.\nS2: Privacy.\nS3: Elections.\n"
        "<END UNSAFE CONTENT CATEGORIES>\n\n"
        "First line 'safe' or 'unsafe'; if unsafe, a second line with the violated categories.\n"
    )
    chosen = {"categories": {"S7": "Privacy.", "S1": "Violence."}, "excluded_category_keys": ["S1"]}
    system, _ = render_messages(vision, {"user_input": "x"}, chosen)
    assert (
        "<BEGIN UNSAFE CONTENT CATEGORIES>\nS7: Privacy.\n<END UNSAFE CONTENT CATEGORIES>"
        in system["content"]
    )


@pytest.mark.parametrize("template", [REASONING, VISION_SYSTEM])
@pytest.mark.parametrize("reasoning", [False, True])
def test_the_bytes_are_those_of_nemos_jinja_environment(template: str, reasoning: bool) -> None:
    # NeMo Guardrails renders with a plain SandboxedEnvironment and Jinja's default of dropping one
    # trailing newline; guardcache keeps it (the shipped prompts' pinned bytes end with one).
    nemo = SandboxedEnvironment().from_string(template)
    variables = {"user_input": " a {{ b }} ", "bot_response": "c\n"}
    expected = nemo.render(**variables, reasoning_enabled=reasoning, excluded_category_keys=[])
    assert render(template, variables, {"reasoning_enabled": reasoning}) == expected + "\n"


def test_a_message_expression_in_a_guard_prompt_is_a_load_error() -> None:
    prompts = [{"task": "content_safety_check_input $model=vision_rails", "messages": ["{{ history }}"]}]
    with pytest.raises(
        ConfigError, match=r"prompts\[2\]\.messages\[0\]\.content: a message expression \(a bare string\)"
    ):
        RailsConfig.from_content(BASE_CONFIG, prompts=[*nemo_style_prompts()[:2], *prompts])


def test_nemo_filters_and_jinja_builtins_render() -> None:
    template = "[{{ user_input | trim | upper }}]\n{{ bot_response | indent(2) }}|{{ bot_response | length }}"
    assert template_problems(template, BOTH) == []
    out = render(template, {"user_input": "  hi ", "bot_response": "a\n\nb"})
    assert out == "[HI]\n  a\n\n  b|4"


# --- the sandbox --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "error"),
    [
        (
            "{{ user_input.__class__ }}",
            "SecurityError: access to attribute '__class__' of 'str' object is unsafe",
        ),
        ("{{ range.__globals__ }}", "SecurityError"),
        ("{{ '{0.__class__}'.format(user_input) }}", "SecurityError"),
        ("{% set d = {} %}{{ d.update({'a': 1}) }}", "SecurityError"),
        ("{{ excluded_category_keys.append(1) }}", "UndefinedError"),  # a tuple: no append
        ("{{ user_input * 1000000 }}", f"SecurityError: '*' would build more than {MAX_REPEAT_LENGTH}"),
        ("{{ 2 ** 100000 }}", "SecurityError: exponent 100000 is larger than"),
        ("{{ range(10**7) | list }}", "OverflowError"),
    ],
)
def test_the_sandbox_refuses_what_a_prompt_has_no_business_doing(template: str, error: str) -> None:
    [problem] = template_problems(template, BOTH)
    assert problem.startswith("the template fails with the default settings on line 1: ")
    assert error in problem


def test_attributes_of_objects_other_than_plain_data_are_refused() -> None:
    with pytest.raises(Exception, match="unsafe"):
        ENVIRONMENT.from_string("{{ o.name }}").render(o=SimpleNamespace(name="x"))
    assert ENVIRONMENT.from_string("{{ o.upper() }}").render(o="x") == "X"


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ('{% include "other.yml" %}', "'{% include %}' on line 1 is not supported"),
        ('{% extends "base" %}', "'{% extends %}' on line 1 is not supported"),
        ('{% import "m" as m %}', "'{% import %}' on line 1 is not supported"),
        ("{{ lipsum() }}", "unknown variable 'lipsum'"),
        ("{{ user_input | random }}", "filter 'random' on line 1 is not available"),
        ("{{ history | to_messages }}", "filter 'to_messages' on line 1 is a NeMo Guardrails dialog filter"),
        ("{{ user_input | trimm }}", "unknown filter 'trimm' on line 1; did you mean 'trim'?"),
        ("{% if user_input is strng %}{% endif %}", "unknown test 'strng' on line 1; did you mean 'string'?"),
        ("a\r\n{{ user_input }}", "the template contains a carriage return"),
        ("line\n\n{% for %}", "template syntax error on line 3: "),
        ("{% if reasoning_enabled %}{{ user_input[99] }}{% endif %}", "fails with reasoning_enabled=true"),
    ],
)
def test_load_time_problems(template: str, problem: str) -> None:
    problems = template_problems(template, BOTH)
    assert problems and problem in problems[0], problems


def test_a_bad_filter_does_not_hide_unknown_variables() -> None:
    problems = template_problems("{{ history | colang }}\n{{ user_input | nofilter }}", {"user_input"})
    assert [p.split(" on line ")[0] for p in problems] == [
        "filter 'colang'",
        "unknown filter 'nofilter'",
        "unknown variable 'history'",
    ]
    with pytest.raises(TemplateCompileError, match="unknown filter 'nofilter'"):
        compile_template("{{ user_input | nofilter }}")


def test_a_runtime_failure_does_not_quote_the_user_text() -> None:
    template = compile_template('{{ {"a": 1}[user_input] }}')
    with pytest.raises(TemplateRenderError) as info:
        template.render({"user_input": "my secret"})
    assert "my secret" not in str(info.value) and "my secret" in info.value.detail


def test_rendering_is_deterministic() -> None:
    template = "{% for k, v in {'b': 1, 'a': 2}.items() %}{{ k }}{{ v }}{% endfor %}{{ [3, 1] | sort }}"
    assert {render(template, {}) for _ in range(20)} == {"b1a2[1, 3]"}


# --- compiled once ------------------------------------------------------------------------------


def test_a_template_is_compiled_once_and_shared_across_threads() -> None:
    assert compile_template(REASONING) is compile_template(REASONING)
    compiled = compile_template(REASONING)
    assert compiled.names == ("user_input", "bot_response", "reasoning_enabled")
    assert placeholders(REASONING) == ["user_input", "bot_response", "reasoning_enabled"]
    errors: list[str] = []

    def work(i: int) -> None:
        for j in range(200):
            user, bot = f"user {i} {j}", f"bot {i} {j}"
            out = compiled.render(
                {"user_input": user, "bot_response": bot}, {"reasoning_enabled": j % 2 == 0}
            )
            want = "/think" if j % 2 == 0 else "/no_think"
            if f"Human user:\n{user}\n\nAI assistant:\n{bot}\n" not in out or not out.endswith(f" {want}\n"):
                errors.append(out)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# --- static prefix (KV-cache reuse) -------------------------------------------------------------


def test_static_prefix_stops_at_the_first_tag_and_honours_whitespace_control() -> None:
    assert static_prefix("abc {{ x }}") == "abc "
    assert static_prefix("abc \n  {%- if x %}y{% endif %}") == "abc"
    assert static_prefix("abc{# note #}def{{ x }}") == "abcdef"
    assert static_prefix("{% set a = 1 %}text") == ""
    assert static_prefix(REASONING).endswith("Human user:\n")
    assert (
        static_prefix(VISION_SYSTEM)
        == "You judge whether a user's message is unsafe.\nLook at its text and images."
    )


@settings(max_examples=200)
@given(user=TEXTS, bot=TEXTS, reasoning=st.booleans())
def test_every_request_starts_with_the_same_bytes_whatever_the_input(
    user: str, bot: str, reasoning: bool
) -> None:
    variables = {"user_input": user, "bot_response": bot}
    chosen = {"reasoning_enabled": reasoning}
    for shipped in SHIPPED.values():
        prefix = static_prefix(shipped.content or "")
        assert len(prefix) > 900 and prefix.endswith("<BEGIN CONVERSATION>\n\nuser: ")
        [message] = render_messages(shipped, variables, chosen)
        assert message["content"].startswith(prefix)
    for template in (REASONING, VISION_SYSTEM):
        assert render(template, variables, chosen).startswith(static_prefix(template))


# --- fingerprint: settings a template reads are part of it -----------------------------------------


def test_the_fingerprint_covers_the_settings_a_template_reads() -> None:
    reasoning = prompt(content=REASONING)
    assert fingerprint(reasoning) == fingerprint(reasoning, {"reasoning_enabled": False})
    assert fingerprint(reasoning) != fingerprint(reasoning, {"reasoning_enabled": True})
    # Settings a template does not read change nothing: the shipped prompts keep their fingerprints.
    for shipped in SHIPPED.values():
        assert fingerprint(shipped) == fingerprint(shipped, {"reasoning_enabled": True})
    vision = prompt(content=None, messages=[{"type": "system", "content": VISION_SYSTEM}])
    a = fingerprint(vision, {"categories": {"S1": "a", "S2": "b"}})
    b = fingerprint(vision, {"categories": {"S2": "b", "S1": "a"}})  # another order renders differently
    assert len({fingerprint(vision), a, b}) == 3


# --- NeMo's filters -----------------------------------------------------------------------------


def test_indent_works_as_in_nemo_and_takes_jinjas_options() -> None:
    assert indent("a\n\nb\n", 2) == "  a\n\n  b\n"
    assert indent("a\nb", 2, first=False) == "a\n  b"
    assert indent("a\n\nb", "> ", blank=True) == "> a\n> \n> b"


def test_conversation_filters_read_nemo_events_and_chat_messages() -> None:
    image = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": "data:"}}]
    events = [
        {"type": "SystemMessage", "content": "Be nice."},
        {"type": "UserMessage", "text": "hi"},
        {"type": "StartUtteranceBotAction", "script": "Hello!"},
        {"type": "UserMessage", "text": image},
        {"type": "BotIntent", "intent": "ignored"},
    ]
    assert user_assistant_sequence(events) == "User: hi\nAssistant: Hello!\nUser: What is this? [+ image]"
    assert to_chat_messages(events) == [
        {"role": "system", "content": "Be nice."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": image},
    ]
    chat = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert user_assistant_sequence(chat) == "User: a\nAssistant: b"
    with pytest.raises(TypeError, match="expected a list of events"):
        user_assistant_sequence("User: a")


def test_first_and_last_turns_cut_a_colang_history() -> None:
    history = 'user "a"\n  greet\nbot greet\nuser "b"\n  ask\nuser "c"\n  bye'
    assert first_turns(history, 1) == 'user "a"\n  greet\nbot greet'
    assert first_turns(history, 5) == history
    assert last_turns(history, 1) == 'user "c"\n  bye'
    assert last_turns(history, 2) == 'user "b"\n  ask\nuser "c"\n  bye'
