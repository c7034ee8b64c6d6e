"""A model's parameters parsed once, at validation, into typed settings: ``ModelConfig.transport``
(what the client is built from) and ``ModelConfig.generation`` (the request body); the URL rule's
ConfigError; what each consumer reads."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

from guardcache.cache import Namespace
from guardcache.checks.check import LLMCheck
from guardcache.config import ModelConfig, RailsConfig
from guardcache.config.parameters import (
    TRANSPORT_KEYS,
    GenerationSettings,
    Parameters,
    parse_parameters,
    validate_base_url,
)
from guardcache.errors import ConfigError
from guardcache.llm.settings import TransportSettings
from guardcache.prompts import fingerprint
from guardcache.prompts.jinja import Settings
from guardcache.rails.builder import build_client, build_runtime
from guardcache.rails.main_llm import ClientLLM
from guardcache.rails.runner import TurnRunner


def one_model(body: str) -> ModelConfig:
    return RailsConfig.from_content("models:\n  - type: guard\n" + body, source="config.yml").model("guard")


def guard_config(params: str) -> RailsConfig:
    return RailsConfig.from_content(
        "models:\n"
        "  - {type: main, engine: nim, model: m, parameters: {base_url: 'http://main.test/v1', "
        "temperature: 0.5, timeout: 30}}\n"
        "  - type: content_safety\n    engine: nim\n    model: cs\n"
        f"    parameters: {params}\n"
        "rails:\n  input:\n    flows: [content safety check input $model=content_safety]\n",
        source="config.yml",
    )


# --- validate_base_url: the URL rule as a ConfigError ---------------------------------------------


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("nim:8000/v1", "must start with http:// or https://"),
        ("ftp://nim/v1", "must start with http:// or https://"),
        ("http:///v1", "has no host"),
        ("http://nim:99999/v1", "not a valid URL"),
        ("http://nim:80 00/v1", "whitespace"),
        ("http://user:pw@nim:8000/v1", "credentials"),
        ("http://nim:8000/v1?x=1", "query or fragment"),
        ("http://nim:8000/v1#top", "query or fragment"),
        ("http://nim:8000/v1?", "query or fragment"),
        (8000, r"expected an http\(s\) URL"),
    ],
)
def test_an_invalid_base_url_is_a_config_error_that_names_the_field(url: Any, complaint: str) -> None:
    with pytest.raises(ConfigError, match=f"^nim_base_url: .*{complaint}") as info:
        validate_base_url(url, field_name="nim_base_url")
    assert isinstance(info.value, ValueError)


def test_credentials_in_a_url_are_not_repeated_in_the_error() -> None:
    with pytest.raises(ConfigError) as info:
        validate_base_url("http://user:s3cret@nim:8000/v1")
    assert "s3cret" not in str(info.value)
    assert validate_base_url(" http://nim:8000/v1/ ") == "http://nim:8000/v1"


# --- parse_parameters ------------------------------------------------------------------------------


def test_parsing_keeps_generation_settings_apart_and_typed() -> None:
    params = {
        "temperature": 0,
        "base_url": "http://nim:8000/v1/",
        "max_tokens": 50,
        "timeout": 2,
        "max_retries": 0,
        "default_headers": {"X-Route": "guard"},
        "top_p": 1,
        "stop": ["\n", "###"],
        "seed": 7,
    }
    parsed = parse_parameters(params)
    assert parsed.transport == TransportSettings(
        base_url="http://nim:8000/v1",
        timeout=2.0,
        max_retries=0,
        default_headers=(("X-Route", "guard"),),
    )
    generation = parsed.generation
    assert (generation.max_tokens, generation.temperature, generation.top_p) == (50, 0, 1)
    assert generation.stop == ("\n", "###") and dict(generation.extras) == {"seed": 7}
    # Values keep the type they were written with (temperature 0, not 0.0): the namespace digests them.
    assert generation.as_body() == {
        "max_tokens": 50,
        "temperature": 0,
        "top_p": 1,
        "stop": ("\n", "###"),
        "seed": 7,
    }
    assert type(generation.as_body()["temperature"]) is int
    assert TRANSPORT_KEYS.isdisjoint(generation.as_body())
    assert parsed == params and "base_url" in params  # the dict as written; the input not changed
    hash(parsed.transport)
    hash(generation)  # frozen values
    with pytest.raises(TypeError):
        generation.extras["seed"] = 8  # type: ignore[index]


def test_nemo_openai_api_base_is_a_base_url_and_the_two_must_agree() -> None:
    parsed = parse_parameters({"openai_api_base": "http://nim:8000/v1"})
    assert parsed.transport.base_url == "http://nim:8000/v1" and parsed.generation == GenerationSettings()
    same = parse_parameters({"base_url": "http://nim:8000/v1/", "openai_api_base": "http://nim:8000/v1"})
    assert same.transport.base_url == "http://nim:8000/v1"
    with pytest.raises(ConfigError, match="different servers"):
        parse_parameters({"base_url": "http://a:8000/v1", "openai_api_base": "http://b:8000/v1"})


def test_no_transport_keys_means_the_clients_defaults() -> None:
    parsed = parse_parameters({"temperature": 0.5})
    assert parsed.transport == TransportSettings()
    assert parsed.generation == GenerationSettings(temperature=0.5)


@pytest.mark.parametrize(
    ("params", "complaint"),
    [
        ({"base_url": "nim:8000"}, r"^base_url: 'nim:8000' must start with http"),
        ({"openai_api_base": None}, r"^openai_api_base: expected an http\(s\) URL"),
        ({"timeout": 0}, r"^timeout: expected seconds for the whole check, a number > 0 \(got 0\)"),
        ({"timeout": True}, r"^timeout: .*\(got True\)"),
        ({"timeout": "2"}, r"^timeout"),
        ({"timeout": float("inf")}, r"^timeout"),
        ({"max_retries": -1}, r"^max_retries: expected a whole number >= 0 \(got -1\)"),
        ({"max_retries": 1.5}, r"^max_retries"),
        ({"max_retries": False}, r"^max_retries"),
        ({"default_headers": ["X-A"]}, r"^default_headers: expected a mapping"),
        ({"default_headers": {"bad name": "x"}}, "not a valid header name"),
        ({"default_headers": {"X-A": 1}}, r"^default_headers\.X-A: expected a one-line string"),
        ({"default_headers": {"X-A": "a\r\nInjected: 1"}}, "one-line string"),
        ({"default_headers": {"Authorization": "Bearer k"}}, "api_key_env_var"),
        ({"default_headers": {"content-type": "text/plain"}}, "set by the client itself"),
        ({"max_tokens": 0}, r"^max_tokens: expected a whole number > 0 \(got 0\)"),
        ({"max_tokens": True}, r"^max_tokens: expected a whole number > 0 \(got true\)"),
        ({"temperature": "0"}, r"^temperature: expected a number from 0 to 2 \(got '0'\)"),
        ({"top_p": 1.5}, r"^top_p: expected a number from 0 to 1 \(got 1.5\)"),
        ({"stop": [1]}, r"^stop: expected a string or a list of up to 4 strings \(got a list\)"),
        ({"temperature": 2.5}, r"^temperature: expected a number from 0 to 2 \(got 2.5\)"),
        ({"stop": ["a", "b", "c", "d", "e"]}, r"^stop: expected a string or a list of up to 4 strings"),
        ({"presence_penalty": 3}, r"^presence_penalty: expected a number from -2 to 2 \(got 3\)"),
    ],
)
def test_invalid_parameters_are_config_errors_naming_the_key(params: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint):
        parse_parameters(params)


def test_header_values_are_kept_out_of_repr_and_errors() -> None:
    parsed = parse_parameters({"default_headers": {"X-Proxy-Token": "tok-123"}})
    assert "tok-123" not in repr(parsed.transport)
    with pytest.raises(ConfigError) as info:
        parse_parameters({"default_headers": {"X-Proxy-Token": "tok-123\n"}})
    assert "tok-123" not in str(info.value)


def test_every_problem_is_reported_at_its_key_with_the_file() -> None:
    with pytest.raises(ConfigError) as info:
        one_model("    engine: nim\n    model: m\n    parameters: {timeout: 0, max_retries: -1, top_p: 2}\n")
    assert str(info.value).splitlines() == [
        "config.yml: models[0].parameters.timeout: expected seconds for the whole check, a number > 0 "
        "(got 0)",
        "config.yml: models[0].parameters.max_retries: expected a whole number >= 0 (got -1)",
        "config.yml: models[0].parameters.top_p: expected a number from 0 to 1 (got 2)",
    ]


def test_two_servers_for_one_model_fail_at_load_not_at_build() -> None:
    body = "    engine: nim\n    model: m\n    parameters: {base_url: 'http://a/v1', openai_api_base: 'http://b/v1'}\n"
    with pytest.raises(ConfigError) as info:
        one_model(body)
    assert str(info.value) == (
        "config.yml: models[0].parameters.openai_api_base: base_url and openai_api_base name different "
        "servers ('http://a/v1', 'http://b/v1'); keep one"
    )


def test_a_bad_parameter_is_reported_beside_the_models_other_problems() -> None:
    with pytest.raises(ConfigError) as info:
        one_model("    engine: nimm\n    model: m\n    parameters: {timeout: 0}\n")
    lines = str(info.value).splitlines()
    assert any(".engine:" in line for line in lines) and any(".parameters.timeout:" in line for line in lines)


# --- ModelConfig.transport / .generation -----------------------------------------------------------


def test_the_model_entry_carries_typed_transport_and_generation_settings() -> None:
    model = one_model(
        "    engine: nim\n    model: m\n    parameters:\n"
        "      {base_url: 'http://nim.test/v1/', timeout: 3, max_retries: 1, default_headers: {X-Route: g},"
        " temperature: 0, max_tokens: 20, x: [1]}\n"
    )
    assert model.transport == TransportSettings("http://nim.test/v1", 3.0, 1, (("X-Route", "g"),))
    assert model.generation == GenerationSettings(max_tokens=20, temperature=0, extras={"x": [1]})
    assert model.base_url == model.transport.base_url == "http://nim.test/v1"
    # NeMo's field stays the dict as written.
    assert model.parameters == {
        "base_url": "http://nim.test/v1/",
        "timeout": 3,
        "max_retries": 1,
        "default_headers": {"X-Route": "g"},
        "temperature": 0,
        "max_tokens": 20,
        "x": [1],
    }


def test_the_engines_default_url_is_the_transports_url() -> None:
    model = one_model("    engine: openai\n    model: m\n")
    assert model.transport == TransportSettings(base_url="https://api.openai.com/v1")
    assert model.generation == GenerationSettings() and model.generation.as_body() == {}


def test_a_key_written_in_parameters_is_in_neither_typed_setting() -> None:
    model = one_model("    engine: nim\n    model: m\n    parameters: {api_key: s3cret, temperature: 0}\n")
    assert model.transport.api_key is None  # read by api_key() when the client is built (rotation)
    assert model.generation.as_body() == {"temperature": 0}
    assert model.api_key() == "s3cret"
    direct = parse_parameters({"api_key": "s3cret", "top_p": 0.5})
    assert "s3cret" not in repr(direct) and "api_key" not in direct and direct.transport.api_key == "s3cret"


def test_the_parsed_settings_survive_copies_and_dumps() -> None:
    model = one_model("    engine: nim\n    model: m\n    parameters: {timeout: 4, temperature: 0}\n")
    assert isinstance(model.parameters, Parameters)
    for params in (
        copy.copy(model.parameters),
        copy.deepcopy(model.parameters),
        pickle.loads(pickle.dumps(model.parameters)),
    ):
        assert isinstance(params, Parameters) and params == model.parameters
        assert (
            params.transport == model.parameters.transport
            and params.generation == model.parameters.generation
        )
    assert model.model_dump()["parameters"] == {"timeout": 4, "temperature": 0}
    again = ModelConfig.model_validate(model.model_dump())
    assert again.transport == model.transport and again.generation == model.generation
    deep = model.model_copy(deep=True)
    assert deep.transport == model.transport


def test_a_copy_with_other_parameters_never_pairs_them_with_old_settings() -> None:
    model = one_model("    engine: nim\n    model: m\n    parameters: {timeout: 4}\n")
    copied = model.model_copy(update={"parameters": {"timeout": 9, "top_p": 0.5}})
    assert copied.transport.timeout == 9.0 and copied.generation.top_p == 0.5
    assert model.transport.timeout == 4.0


def test_with_base_urls_changes_only_the_url() -> None:
    config = guard_config("{openai_api_base: 'http://old.test/v1', temperature: 0, timeout: 2}")
    moved = config.with_base_urls({"content_safety": "http://new.test:9/v1/"})
    model = moved.model("content_safety")
    assert model.transport == TransportSettings(base_url="http://new.test:9/v1", timeout=2.0)
    assert model.generation == config.model("content_safety").generation
    assert model.base_url == "http://new.test:9/v1" and "openai_api_base" not in model.parameters
    old = build_runtime(config).input_rails[0].check
    new = build_runtime(moved).input_rails[0].check
    assert isinstance(old, LLMCheck) and isinstance(new, LLMCheck)
    assert new.namespace == old.namespace and new.client.base_url == "http://new.test:9/v1"
    with pytest.raises(ConfigError, match=r"model 'content_safety': parameters\.base_url: .*must start with"):
        config.with_base_urls({"content_safety": "new.test/v1"})


# --- the consumers read the typed settings -------------------------------------------------------


def test_the_client_is_built_from_the_transport_settings() -> None:
    config = guard_config(
        "{base_url: 'http://cs.test/v1', timeout: 2, max_retries: 0, default_headers: {X-R: g}}"
    )
    client = build_client(config.model("content_safety"))
    assert client.base_url == "http://cs.test/v1" and client.deadline_s == 2.0
    assert client.retry.max_retries == 0 and client._headers["X-R"] == "g"


def test_a_check_sends_the_generation_settings_and_its_namespace_is_unchanged() -> None:
    params = {"base_url": "http://cs.test/v1", "timeout": 2, "temperature": 0, "top_p": 1, "seed": 3}
    config = guard_config("{base_url: 'http://cs.test/v1', timeout: 2, temperature: 0, top_p: 1, seed: 3}")
    check = build_runtime(config).input_rails[0].check
    assert isinstance(check, LLMCheck)
    assert TRANSPORT_KEYS.isdisjoint(check.params)
    assert {"temperature": 0, "top_p": 1, "seed": 3}.items() <= check.params.items()
    # The namespace as it was computed from the raw dict before the parameters were typed: cached
    # verdicts (the Redis tier's too) stay valid across the change.
    raw_split = {k: v for k, v in params.items() if k not in TRANSPORT_KEYS}
    before = {**check.spec.params, **raw_split}
    if check.prompt.max_tokens is not None:
        before["max_tokens"] = check.prompt.max_tokens
    if check.prompt.stop:
        before["stop"] = list(check.prompt.stop)
    settings = Settings.of(config.template_settings())
    expected = Namespace.of(
        "content_safety", "cs", fingerprint(check.prompt, settings), {**before, "~flow": check.spec.name}
    )
    assert check.namespace == expected


def test_the_main_model_gets_its_generation_settings_with_every_turn() -> None:
    runner = TurnRunner(guard_config("{base_url: 'http://cs.test/v1'}"))
    assert isinstance(runner.main, ClientLLM)
    assert runner.main.params == {"temperature": 0.5}
    assert runner.main.client.deadline_s == 30.0


def test_a_config_and_a_served_request_check_generation_fields_by_one_rule() -> None:
    """config/parameters.py accepted any temperature >= 0 and any number of stop strings while serve
    refused them: a config could build a model whose every call failed. Both read guardcache.generation."""
    from guardcache.generation import GENERATION_FIELDS
    from guardcache.server.protocol import PASSED_THROUGH

    assert list(PASSED_THROUGH) == list(GENERATION_FIELDS)
    for name, bad, good in [("temperature", 2.5, 2), ("stop", ["x"] * 5, ["x"] * 4), ("seed", 1.5, 7)]:
        assert not PASSED_THROUGH[name](bad) and PASSED_THROUGH[name](good)
        with pytest.raises(ConfigError, match=f"^{name}: expected "):
            parse_parameters({name: bad})
        parse_parameters({name: good})
