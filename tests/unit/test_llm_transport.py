"""A model's parameters split into transport settings and generation parameters, and the one URL check."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

from guardcache.errors import BackendStatusError, ConfigError
from guardcache.llm.client import DEFAULT_TIMEOUT, ChatClient
from guardcache.llm.retry import RetryPolicy
from guardcache.llm.transport import (
    TRANSPORT_KEYS,
    TransportSettings,
    split_parameters,
    validate_base_url,
)
from tests.unit.test_llm_client import MESSAGES, Script, ok

# --- validate_base_url ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://localhost:8000/v1", "http://localhost:8000/v1"),
        (" https://integrate.api.nvidia.com/v1/ ", "https://integrate.api.nvidia.com/v1"),
        ("HTTP://nim:8000/v1//", "HTTP://nim:8000/v1"),
        ("http://[::1]:8000/v1", "http://[::1]:8000/v1"),
    ],
)
def test_a_valid_base_url_is_returned_normalized(url: str, expected: str) -> None:
    assert validate_base_url(url) == expected


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
def test_an_invalid_base_url_is_a_config_error_that_says_why(url: Any, complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint) as info:
        validate_base_url(url)
    assert isinstance(info.value, ValueError)


def test_credentials_in_a_url_are_not_repeated_in_the_error() -> None:
    with pytest.raises(ConfigError) as info:
        validate_base_url("http://user:s3cret@nim:8000/v1")
    assert "s3cret" not in str(info.value)


def test_chat_client_uses_the_same_check() -> None:
    with pytest.raises(ConfigError, match="credentials"):
        ChatClient("http://u:p@nim:8000/v1", model="m")


# --- split_parameters ----------------------------------------------------------------------------


def test_split_keeps_generation_parameters_apart_and_in_order() -> None:
    params = {
        "temperature": 0.0,
        "base_url": "http://nim:8000/v1/",
        "max_tokens": 50,
        "timeout": 2,
        "max_retries": 0,
        "default_headers": {"X-Route": "guard"},
        "top_p": 1,
    }
    settings, generation = split_parameters(params)
    assert settings == TransportSettings(
        base_url="http://nim:8000/v1",
        timeout=2.0,
        max_retries=0,
        default_headers=(("X-Route", "guard"),),
    )
    assert list(generation.items()) == [("temperature", 0.0), ("max_tokens", 50), ("top_p", 1)]
    assert "base_url" in params  # the input is not changed
    assert TRANSPORT_KEYS.isdisjoint(generation)


def test_nemo_openai_api_base_is_a_base_url_and_the_two_must_agree() -> None:
    settings, generation = split_parameters({"openai_api_base": "http://nim:8000/v1"})
    assert settings.base_url == "http://nim:8000/v1" and generation == {}
    same, _ = split_parameters({"base_url": "http://nim:8000/v1/", "openai_api_base": "http://nim:8000/v1"})
    assert same.base_url == "http://nim:8000/v1"
    with pytest.raises(ConfigError, match="different servers"):
        split_parameters({"base_url": "http://a:8000/v1", "openai_api_base": "http://b:8000/v1"})


def test_no_transport_keys_means_defaults() -> None:
    settings, generation = split_parameters({"temperature": 0.5})
    assert settings == TransportSettings()
    assert generation == {"temperature": 0.5}
    hash(settings)  # frozen and hashable


@pytest.mark.parametrize(
    ("params", "complaint"),
    [
        ({"base_url": "nim:8000"}, r"parameters\.base_url"),
        ({"openai_api_base": None}, r"parameters\.openai_api_base"),
        ({"timeout": 0}, r"parameters\.timeout: expected seconds for the whole check"),
        ({"timeout": True}, r"parameters\.timeout"),
        ({"timeout": "2"}, r"parameters\.timeout"),
        ({"timeout": float("inf")}, r"parameters\.timeout"),
        ({"max_retries": -1}, r"parameters\.max_retries: expected a whole number >= 0"),
        ({"max_retries": 1.5}, r"parameters\.max_retries"),
        ({"max_retries": False}, r"parameters\.max_retries"),
        ({"default_headers": ["X-A"]}, r"parameters\.default_headers: expected a mapping"),
        ({"default_headers": {"bad name": "x"}}, "not a valid header name"),
        ({"default_headers": {"X-A": 1}}, "one-line string"),
        ({"default_headers": {"X-A": "a\r\nInjected: 1"}}, "one-line string"),
        ({"default_headers": {"Authorization": "Bearer k"}}, "api_key_env_var"),
        ({"default_headers": {"content-type": "text/plain"}}, "set by the client itself"),
    ],
)
def test_invalid_transport_settings_are_config_errors_naming_the_field(
    params: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(ConfigError, match=complaint):
        split_parameters(params)


def test_header_values_are_kept_out_of_repr_and_errors() -> None:
    settings, _ = split_parameters({"default_headers": {"X-Proxy-Token": "tok-123"}})
    assert "tok-123" not in repr(settings)
    with pytest.raises(ConfigError) as info:
        split_parameters({"default_headers": {"X-Proxy-Token": "tok-123\n"}})
    assert "tok-123" not in str(info.value)


# --- ChatClient.from_settings --------------------------------------------------------------------


def client_from(params: dict[str, Any], script: Script, **kwargs: Any) -> ChatClient:
    settings, generation = split_parameters(params)
    return ChatClient.from_settings(
        settings,
        model="m",
        provider="vllm",
        default_base_url="http://default.test/v1",
        default_params=generation,
        transport=httpx2.MockTransport(script),
        sleep=script.sleep,
        **kwargs,
    )


async def test_max_retries_takes_effect() -> None:
    script = Script(503)
    async with client_from({"max_retries": 0}, script) as client:
        with pytest.raises(BackendStatusError, match="after 1 attempt"):
            await client.complete(MESSAGES)
    assert len(script.requests) == 1
    script = Script(503)
    async with client_from({"max_retries": 4}, script) as client:
        with pytest.raises(BackendStatusError, match="after 5 attempts"):
            await client.complete(MESSAGES)
    assert len(script.requests) == 5


async def test_max_retries_replaces_only_the_count_of_a_given_policy() -> None:
    script = Script(503)
    policy = RetryPolicy(max_retries=9, backoff_initial=0.001, jitter=False)
    async with client_from({"max_retries": 1}, script, retry=policy) as client:
        assert client.retry == RetryPolicy(max_retries=1, backoff_initial=0.001, jitter=False)


async def test_settings_reach_the_request_and_generation_parameters_the_body() -> None:
    script = Script(ok())
    params = {
        "base_url": "http://nim.test:9000/v1",
        "timeout": 3,
        "default_headers": {"X-Route": "guard"},
        "temperature": 0.25,
    }
    async with client_from(params, script) as client:
        assert client.deadline_s == 3.0 and client.provider == "vllm"
        await client.complete(MESSAGES)
    (request,) = script.requests
    assert str(request.url) == "http://nim.test:9000/v1/chat/completions"
    assert request.headers["x-route"] == "guard"
    body = json.loads(request.content)
    assert body["temperature"] == 0.25
    assert TRANSPORT_KEYS.isdisjoint(body)


async def test_without_settings_the_defaults_apply() -> None:
    script = Script(ok())
    async with client_from({}, script) as client:
        assert client.base_url == "http://default.test/v1"
        assert client.deadline_s == DEFAULT_TIMEOUT.read
        assert client.retry == RetryPolicy()


def test_from_settings_needs_some_base_url() -> None:
    with pytest.raises(ValueError, match="no base_url"):
        ChatClient.from_settings(TransportSettings(), model="m")
