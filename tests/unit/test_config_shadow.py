"""Shadow rails' configuration (``rails.<input|output>.shadow_flows``, ``rails.shadow``) and the
pieces of ``guardcache.rails.shadow`` that need no network: the shadow namespace, the labels."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardcache import RailsConfig
from guardcache.cache import Namespace
from guardcache.checks.verdict import TOOL_CALL, RailResult
from guardcache.config.shadow import DEFAULT_SAMPLE
from guardcache.errors import ConfigError
from guardcache.rails.shadow import live_label, rail_label, shadow_namespace

MODELS = """
models:
  - {type: main, engine: nim, model: m, parameters: {base_url: "http://127.0.0.1:9/v1"}}
  - {type: content_safety, engine: nim, model: cs, parameters: {base_url: "http://127.0.0.1:9/v1"}}
"""
LIVE = "content safety check input $model=content_safety"


def load(tmp_path: Path, rails: str) -> RailsConfig:
    (tmp_path / "config.yml").write_text(MODELS + rails, encoding="utf-8")
    return RailsConfig.from_path(tmp_path)


def test_an_unknown_shadow_flow_is_an_error_naming_the_field_and_the_file(tmp_path: Path) -> None:
    rails = "rails:\n  input:\n    shadow_flows: [content safty check input $model=content_safety]\n"
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, rails)
    message = str(caught.value)
    assert "config.yml" in message and "rails.input.shadow_flows[0]" in message
    assert "unknown flow 'content safty check input'" in message and "did you mean" in message


@pytest.mark.parametrize("value", ["0", "-0.1", "1.5", "true", ".nan"])
def test_a_sample_outside_zero_to_one_is_an_error(tmp_path: Path, value: str) -> None:
    rails = f"rails:\n  input:\n    shadow_flows: [{LIVE}]\n  shadow: {{sample: {value}}}\n"
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, rails)
    assert "config.yml" in str(caught.value) and "rails.shadow.sample" in str(caught.value)


def test_shadow_settings_default_and_bounds(tmp_path: Path) -> None:
    config = load(tmp_path, f"rails:\n  input:\n    shadow_flows: [{LIVE}]\n  shadow: {{sample: 1}}\n")
    assert config.rails.shadow.sample == 1.0 and config.rails.input.shadow_refs()[0].text == LIVE
    assert load(tmp_path, "rails:\n  shadow:\n").rails.shadow.sample == DEFAULT_SAMPLE
    with pytest.raises(ConfigError, match=r"rails\.shadow\.max_concurrency"):
        load(tmp_path, "rails:\n  shadow: {max_concurrency: 0}\n")
    with pytest.raises(ConfigError, match=r"rails\.shadow\.samples: unknown key"):
        load(tmp_path, "rails:\n  shadow: {samples: 0.5}\n")


@pytest.mark.parametrize(
    ("rails", "where", "says"),
    [
        # A live rail again: promoting means moving it, never listing it twice.
        (
            f"  input: {{flows: [{LIVE}], shadow_flows: [{LIVE}]}}\n",
            "rails.input.shadow_flows[0]",
            "live rail",
        ),
        (
            "  output: {shadow_flows: [content safety check input $model=content_safety]}\n",
            "rails.output.shadow_flows[0]",
            "move it to rails.input.shadow_flows",
        ),
        ("  input: {shadow_flows: [content safety check input $model=nope]}\n", "shadow_flows[0]", "nope"),
        (
            f"  tool_input: {{shadow_flows: [{LIVE}]}}\n",
            "rails.tool_input.shadow_flows",
            "shadow rails judge",
        ),
    ],
)
def test_shadow_flows_are_checked_as_live_flows_are(
    tmp_path: Path, rails: str, where: str, says: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, "rails:\n" + rails)
    assert where in str(caught.value) and says in str(caught.value)


def test_a_shadow_check_on_main_gives_main_a_cache_for_its_verdicts() -> None:
    config = RailsConfig.from_content(
        MODELS + "rails:\n  input: {shadow_flows: [self check input]}\n",
        [{"task": "self_check_input", "content": 'Should "{{ user_input }}" be blocked? Answer Yes or No.'}],
    )
    assert config.flows_on("main") == ["self check input"]  # main then caches its verdicts


def test_the_shadow_namespace_differs_and_keeps_every_other_field() -> None:
    live = Namespace.of("content_safety", "cs", "template-fp", {"max_tokens": 50, "~flow": "x"})
    shadow = shadow_namespace(live)
    assert shadow.digest != live.digest and shadow.tag != live.tag
    assert (shadow.model_type, shadow.model, shadow.template) == (live.model_type, live.model, live.template)
    assert set(live.params) < set(shadow.params)
    assert shadow_namespace(live).digest == shadow.digest  # stable across restarts and replicas


def test_live_labels_prefer_the_same_flow_and_say_what_they_compare_with() -> None:
    other = RailResult("jailbreak detection model", False)
    same = RailResult(LIVE, True)
    assert live_label([same, other], frozenset({LIVE}), "input") == ("allowed", LIVE)
    assert live_label([other], frozenset({LIVE}), "input") == ("blocked", "the live input rails")
    outage = RailResult(LIVE, True, error="BackendTimeoutError: slow")
    assert live_label([outage], frozenset({LIVE}), "input") == ("error", LIVE)
    assert live_label([], frozenset(), "output") == ("none", "no live output rail")
    # A tool call is another text than the answer the shadow rail judged.
    assert live_label([RailResult(LIVE, False, kind=TOOL_CALL)], frozenset({LIVE}), "output")[0] == "none"
    assert rail_label(RailResult("x", True, error="ParseError: no")) == "error"
    assert rail_label(RailResult("x", False)) == "blocked"
