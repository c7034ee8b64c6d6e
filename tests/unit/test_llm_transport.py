"""The client's side of a model's transport: the one URL rule (a ValueError here; the config's
ConfigError in tests/unit/test_config_parameters.py), and a client built from TransportSettings."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

from guardcache.config.parameters import TRANSPORT_KEYS, parse_parameters
from guardcache.errors import BackendStatusError, ConfigError
from guardcache.llm.budget import DEFAULT_TIMEOUT
from guardcache.llm.client import ChatClient
from guardcache.llm.retry import RetryPolicy
from guardcache.llm.settings import TransportSettings, check_base_url
from tests.unit.test_llm_client import MESSAGES, Script, ok

# --- check_base_url ------------------------------------------------------------------------------


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
    assert check_base_url(url) == expected


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
def test_an_invalid_base_url_is_the_clients_own_value_error_that_says_why(url: Any, complaint: str) -> None:
    # llm raises no ConfigError (that is the config's, with the file and field): a ValueError.
    with pytest.raises(ValueError, match=complaint) as info:
        check_base_url(url)
    assert not isinstance(info.value, ConfigError)


def test_credentials_in_a_url_are_not_repeated_in_the_error() -> None:
    with pytest.raises(ValueError) as info:
        check_base_url("http://user:s3cret@nim:8000/v1")
    assert "s3cret" not in str(info.value)


def test_chat_client_uses_the_same_check() -> None:
    with pytest.raises(ValueError, match="ChatClient: base_url: credentials") as info:
        ChatClient("http://u:p@nim:8000/v1", model="m")
    assert "u:p" not in str(info.value)


def test_transport_settings_are_frozen_values_with_secrets_out_of_repr() -> None:
    settings = TransportSettings(default_headers=(("X-Proxy-Token", "tok-123"),), api_key="k-456")
    assert "tok-123" not in repr(settings) and "k-456" not in repr(settings)
    assert settings.headers == {"X-Proxy-Token": "tok-123"}
    hash(settings)  # frozen and hashable


# --- ChatClient.from_settings --------------------------------------------------------------------


def client_from(params: dict[str, Any], script: Script, **kwargs: Any) -> ChatClient:
    parsed = parse_parameters(params)
    return ChatClient.from_settings(
        parsed.transport,
        model="m",
        provider="vllm",
        default_base_url="http://default.test/v1",
        default_params=parsed.generation.as_body(),
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
