"""Flow references: parsing NeMo's ``$name=value`` syntax, the registry, and cross-checks."""

from __future__ import annotations

import pytest

from guardcache.config import RailGroup, RailsConfig
from guardcache.errors import ConfigError
from guardcache.flows import KNOWN_FLOWS, FlowRef, FlowSpec, prompt_variables, register_flow

MODELS = """\
models:
  - {type: main, engine: nim, model: m}
  - {type: content_safety, engine: nim, model: nvidia/llama-3.1-nemoguard-8b-content-safety}
"""


def test_a_flow_string_parses_into_name_and_args() -> None:
    ref = FlowRef.parse("content safety check input $model=content_safety")
    assert ref.name == "content safety check input"
    assert dict(ref.args) == {"model": "content_safety"}
    assert ref.model_type == "content_safety"
    assert ref.text == "content safety check input $model=content_safety"


@pytest.mark.parametrize(
    "text",
    [
        'content safety check input $model="content_safety"',
        "content safety check input $model='content_safety'",
        "content  safety check input   $model = content_safety  ",
    ],
)
def test_quoted_values_and_extra_spaces_mean_the_same_flow(text: str) -> None:
    ref = FlowRef.parse(text)
    assert (ref.name, dict(ref.args)) == ("content safety check input", {"model": "content_safety"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected a name"),
        ("$model=x", "expected a name"),
        ("a $model", "cannot read '$model'"),
        ("a $model=x trailing", "cannot read 'trailing'"),
        ("a $m=1 $m=2", "argument $m is given twice"),
    ],
)
def test_malformed_flow_strings_raise_value_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("$", r"\$")):
        FlowRef.parse(text)


def test_flow_refs_are_hashable_values() -> None:
    a = FlowRef.parse("x $model=y")
    assert a == FlowRef.parse("x $model=y") and len({a, FlowRef.parse("x $model=y")}) == 1


def test_rail_group_parses_its_flows() -> None:
    group = RailGroup(flows=["content safety check input $model=content_safety"])
    assert [r.model_type for r in group.flow_refs()] == ["content_safety"]
    assert group.parallel is False and group.on_error == "block"


def test_the_known_flows_declare_their_prompt_variables() -> None:
    assert set(KNOWN_FLOWS) >= {"content safety check input", "content safety check output"}
    assert prompt_variables()["content_safety_check_input"] == {"user_input"}
    assert prompt_variables()["content_safety_check_output"] == {"user_input", "bot_response"}
    assert prompt_variables()["topic_safety_check_input"] == {"user_input", "history"}
    assert prompt_variables()["self_check_input"] == {"user_input"}


def test_a_registered_flow_becomes_loadable() -> None:
    spec = FlowSpec(name="test only check input", direction="input")
    register_flow(spec)
    try:
        register_flow(spec)  # the same spec again is fine
        with pytest.raises(ValueError, match="already registered"):
            register_flow(FlowSpec(name="test only check input", direction="output"))
        config = RailsConfig.from_content(MODELS + "rails:\n  input: {flows: [test only check input]}\n")
        assert config.rails.input.flow_refs()[0].name == "test only check input"
    finally:
        del KNOWN_FLOWS["test only check input"]


def test_a_flow_listed_twice_is_an_error() -> None:
    flows = (
        "[content safety check input $model=content_safety, content safety check input $model=content_safety]"
    )
    with pytest.raises(ConfigError) as info:
        RailsConfig.from_content(MODELS + f"rails:\n  input: {{flows: {flows}}}\n", source="c.yml")
    assert str(info.value) == (
        "c.yml: rails.input.flows[1]: flow 'content safety check input $model=content_safety' "
        "is already listed (flows[0])"
    )


def test_nemos_quoted_model_argument_loads() -> None:
    config = RailsConfig.from_content(
        MODELS
        + 'rails:\n  output:\n    flows:\n      - content safety check output $model="content_safety"\n'
    )
    assert config.rails.output.flow_refs()[0].model_type == "content_safety"


def test_several_flow_problems_are_all_reported() -> None:
    text = MODELS + "rails:\n  input: {flows: [nope, content safety check input $model=x]}\n"
    with pytest.raises(ConfigError) as info:
        RailsConfig.from_content(text, source="c.yml")
    lines = str(info.value).splitlines()
    assert len(lines) == 1 and lines[0].startswith("c.yml: rails.input.flows[0]: unknown flow 'nope'")
    # Unknown flows fail first (structure); cross-checks run on a structurally valid config.
    text = MODELS + (
        "rails:\n  input: {flows: [content safety check input $model=x]}\n"
        "  output: {flows: [content safety check output $model=y]}\n"
    )
    with pytest.raises(ConfigError) as info:
        RailsConfig.from_content(text, source="c.yml")
    assert [line.split(":")[1].strip() for line in str(info.value).splitlines()] == [
        "rails.input.flows[0]",
        "rails.output.flows[0]",
    ]
