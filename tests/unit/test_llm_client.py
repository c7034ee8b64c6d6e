"""ChatClient, RetryPolicy and the per-loop client pool, over httpx2.MockTransport (no sockets)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from guardcache.errors import (
    BackendConnectionError,
    BackendDeclinedError,
    BackendError,
    BackendMisconfiguredError,
    BackendProtocolError,
    BackendRefusedConfigError,
    BackendStatusError,
    BackendTimeoutError,
    InputRejectedError,
)
from guardcache.llm.budget import DEFAULT_TIMEOUT
from guardcache.llm.client import ChatClient
from guardcache.llm.default_pools import aclose_all, get_http_client
from guardcache.llm.httpx_pool import ClientPool
from guardcache.llm.response import error_summary, parse_usage
from guardcache.llm.retry import RetryPolicy, parse_retry_after
from guardcache.llm.transport_contract import Reply
from guardcache.llm.types import ChatResult, Usage

BASE = "http://nim.test:8000/v1"
URL = f"{BASE}/chat/completions"
SECRET_USER_TEXT = "my card number is 4111 1111 1111 1111"
MESSAGES = [{"role": "user", "content": SECRET_USER_TEXT}]

Handler = Callable[[httpx2.Request], httpx2.Response]


def completion(
    content: str = '{"User Safety": "safe"} ',
    *,
    usage: Any = None,
    model: str | None = "served-model",
    finish_reason: str | None = "stop",
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "cmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
            }
        ],
    }
    if model is not None:
        body["model"] = model
    if usage is not None:
        body["usage"] = usage
    return body


USAGE = {"prompt_tokens": 400, "completion_tokens": 8, "total_tokens": 408}


class Script:
    """A MockTransport handler that plays a list of responses/exceptions and records requests."""

    def __init__(self, *steps: httpx2.Response | Exception | int) -> None:
        self.steps = list(steps)
        self.requests: list[httpx2.Request] = []
        self.delays: list[float] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        if isinstance(step, Exception):
            raise step
        if isinstance(step, int):
            return httpx2.Response(step, json={"error": {"message": "boom"}})
        return step

    async def sleep(self, delay: float) -> None:
        self.delays.append(delay)

    def client(self, retry: RetryPolicy | None = None, **kwargs: Any) -> ChatClient:
        return ChatClient(
            BASE,
            model="nvidia/llama-3.1-nemoguard-8b-content-safety",
            transport=httpx2.MockTransport(self),
            retry=retry,
            sleep=self.sleep,
            **kwargs,
        )


def ok(**kwargs: Any) -> httpx2.Response:
    return httpx2.Response(200, json=completion(usage=USAGE, **kwargs))


# --- request shape -------------------------------------------------------------------------------


async def test_request_is_a_post_to_chat_completions_with_model_messages_and_params() -> None:
    script = Script(ok())
    async with script.client(
        api_key="sk-test", default_params={"temperature": 1e-20, "max_tokens": 50}
    ) as client:
        await client.complete(MESSAGES, max_tokens=20, seed=7)
    (request,) = script.requests
    assert request.method == "POST"
    assert str(request.url) == URL
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.headers["content-type"] == "application/json"
    body = json.loads(request.content)
    assert body == {
        "model": "nvidia/llama-3.1-nemoguard-8b-content-safety",
        "messages": MESSAGES,
        "temperature": 1e-20,
        "max_tokens": 20,  # per-call params override default_params
        "seed": 7,
    }


async def test_no_authorization_header_without_api_key_and_trailing_slash_is_ignored() -> None:
    script = Script(ok())
    async with ChatClient(BASE + "/", model="m", transport=httpx2.MockTransport(script)) as client:
        await client.complete(MESSAGES)
    assert "authorization" not in script.requests[0].headers
    assert str(script.requests[0].url) == URL


async def test_api_key_never_appears_in_repr() -> None:
    client = ChatClient(BASE, model="m", api_key="sk-very-secret")
    assert "sk-very-secret" not in repr(client)


# --- response parsing ----------------------------------------------------------------------------


async def test_result_has_content_finish_reason_usage_and_one_attempt() -> None:
    script = Script(ok())
    async with script.client(provider="nim") as client:
        result = await client.complete(MESSAGES)
    assert result.content == '{"User Safety": "safe"} '  # returned as is; the parser strips
    assert result.finish_reason == "stop"
    assert result.attempts == 1
    assert result.duration >= 0
    assert result.usage == Usage(400, 8, 408, 0, model="served-model", provider="nim")


@pytest.mark.parametrize(
    ("usage", "expected_cached"),
    [
        ({**USAGE, "prompt_tokens_details": {"cached_tokens": 288}}, 288),
        ({**USAGE, "prompt_tokens_details": {"cached_tokens": None}}, 0),
        ({**USAGE, "prompt_tokens_details": None}, 0),
        ({**USAGE, "prompt_tokens_details": {}}, 0),
        (USAGE, 0),
    ],
    ids=["present", "cached-null", "details-null", "details-empty", "absent"],
)
async def test_cached_prompt_tokens_are_read_when_present_else_zero(
    usage: dict[str, Any], expected_cached: int
) -> None:
    script = Script(httpx2.Response(200, json=completion(usage=usage)))
    async with script.client() as client:
        result = await client.complete(MESSAGES)
    assert result.usage.cached_prompt_tokens == expected_cached
    assert (result.usage.prompt_tokens, result.usage.total_tokens) == (400, 408)


async def test_missing_usage_and_model_fall_back_to_zero_and_the_configured_model() -> None:
    script = Script(httpx2.Response(200, json=completion(usage=None, model=None)))
    async with script.client(provider="vllm") as client:
        result = await client.complete(MESSAGES)
    assert result.usage == Usage(model="nvidia/llama-3.1-nemoguard-8b-content-safety", provider="vllm")


def test_parse_usage_is_lenient_and_sums_a_missing_total() -> None:
    usage = parse_usage({"prompt_tokens": 10, "completion_tokens": 5.0, "total_tokens": None})
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (10, 5, 15)
    assert parse_usage({"prompt_tokens": "10", "completion_tokens": True}).total_tokens == 0
    assert parse_usage([1, 2]) == Usage()


@pytest.mark.parametrize(
    "response",
    [
        httpx2.Response(200, text="<html>proxy login</html>"),
        httpx2.Response(200, json=[1, 2]),
        httpx2.Response(200, json={"object": "chat.completion"}),
        httpx2.Response(200, json={"choices": []}),
        httpx2.Response(
            200,
            json={"choices": [{"message": {"content": None, "tool_calls": [{"id": "c"}]}}]},
        ),
        httpx2.Response(200, json={"choices": [{"message": "hi"}]}),
    ],
    ids=["not-json", "json-list", "no-choices", "empty-choices", "tool-call", "bad-message"],
)
async def test_malformed_200_body_is_a_protocol_error_and_is_not_retried(
    response: httpx2.Response,
) -> None:
    script = Script(response)
    async with script.client() as client:
        with pytest.raises(BackendProtocolError) as info:
            await client.complete(MESSAGES)
    assert len(script.requests) == 1
    assert info.value.status == 200
    assert info.value.url == URL
    assert URL in str(info.value)


@pytest.mark.parametrize(
    "body",
    [
        {"choices": [{"message": {"role": "assistant", "content": None, "refusal": "I can't help"}}]},
        {"choices": [{"message": {"content": None}, "finish_reason": "content_filter"}]},
        {"choices": [{"message": {"content": "safe"}, "finish_reason": "content_filter"}]},
        {"choices": [{"message": {"content": None}, "finish_reason": "stop"}]},
    ],
    ids=["refusal", "filtered-null", "filtered-with-text", "null-content"],
)
async def test_a_declined_answer_is_its_own_error_an_unsafe_input_never_retried(body: dict[str, Any]) -> None:
    script = Script(httpx2.Response(200, json=body))
    async with script.client() as client:
        with pytest.raises(BackendDeclinedError) as info:
            await client.complete(MESSAGES)
    assert isinstance(info.value, InputRejectedError)  # the rail blocks it whatever on_error says
    assert len(script.requests) == 1
    assert "I can't help" not in str(info.value)  # a refusal can quote the user


class TextAnswers(ChatClient):
    """A client of another JSON endpoint (as the jailbreak classifier's): its answer is the text."""

    def parse_answer(self, reply: Reply) -> ChatResult:
        if reply.text == "unreadable":
            raise ValueError("not this endpoint's answer")
        return ChatResult(content=reply.text, usage=Usage(model="classifier"), duration=0.0)


async def test_a_subclass_reads_its_endpoints_answers_through_the_public_parse_hook() -> None:
    script = Script(httpx2.Response(200, text='{"jailbreak": false}'))
    async with TextAnswers(BASE, model="m", transport=httpx2.MockTransport(script)) as client:
        result = await client.send({"input": "hello"})
    assert (result.content, result.usage.model, result.attempts) == ('{"jailbreak": false}', "classifier", 1)
    assert result.duration > 0  # filled in for the whole call, as for a chat answer


async def test_an_answer_the_parse_hook_cannot_read_is_a_protocol_error_never_retried() -> None:
    script = Script(httpx2.Response(200, text="unreadable"))
    async with TextAnswers(BASE, model="m", transport=httpx2.MockTransport(script)) as client:
        with pytest.raises(BackendProtocolError) as info:
            await client.send({"input": "hello"})
    assert len(script.requests) == 1
    assert info.value.status == 200 and URL in str(info.value)


@pytest.mark.parametrize("status", [301, 302, 307, 308, 401, 403, 404])
async def test_a_redirect_or_an_auth_or_not_found_status_is_a_misconfiguration_never_retried(
    status: int,
) -> None:
    headers = {"Location": "http://elsewhere.test/v1/chat/completions"} if status < 400 else {}
    script = Script(httpx2.Response(status, headers=headers), ok())
    async with script.client() as client:
        with pytest.raises(BackendRefusedConfigError) as info:
            await client.complete(MESSAGES)
    assert isinstance(info.value, BackendMisconfiguredError)
    assert info.value.status == status
    assert len(script.requests) == 1  # neither retried nor followed


async def test_a_401_says_why_no_key_was_sent_when_one_is_set_but_kept_back() -> None:
    note = "NVIDIA_API_KEY is set but not sent over http://"
    script = Script(httpx2.Response(401))
    async with script.client(key_note=note) as client:
        with pytest.raises(BackendRefusedConfigError) as info:
            await client.complete(MESSAGES)
    assert f"no API key was sent: {note}" in str(info.value)
    assert "is not set for this model" not in str(info.value)
    assert "Authorization" not in script.requests[0].headers


# --- retries on status ---------------------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_retryable_status_is_retried_then_succeeds(status: int) -> None:
    script = Script(status, ok())
    async with script.client() as client:
        result = await client.complete(MESSAGES)
    assert result.attempts == 2
    assert len(script.requests) == 2
    assert len(script.delays) == 1
    assert 0 <= script.delays[0] <= RetryPolicy().backoff_cap(0)


async def test_status_error_after_the_last_try_carries_the_status_and_the_url() -> None:
    script = Script(503)
    async with script.client(retry=RetryPolicy(max_retries=2)) as client:
        with pytest.raises(BackendStatusError) as info:
            await client.complete(MESSAGES)
    assert len(script.requests) == 3
    assert info.value.status == 503
    assert info.value.url == URL
    assert "after 3 attempts" in str(info.value)
    assert "HTTP 503" in str(info.value)


async def test_429_retry_after_seconds_is_honoured() -> None:
    limited = httpx2.Response(429, headers={"Retry-After": "0.01"})
    script = Script(limited, ok())
    async with script.client() as client:
        result = await client.complete(MESSAGES)
    assert result.attempts == 2
    assert script.delays == [0.01]


async def test_503_retry_after_http_date_is_honoured() -> None:
    when = datetime.now(UTC) + timedelta(seconds=3)
    busy = httpx2.Response(503, headers={"Retry-After": format_datetime(when, usegmt=True)})
    script = Script(busy, ok())
    async with script.client() as client:
        await client.complete(MESSAGES)
    (delay,) = script.delays
    assert 1.0 <= delay <= 3.0  # whole seconds in the header; the clock moved a little


async def test_retry_after_longer_than_the_cap_is_cut_to_the_cap() -> None:
    # Within the budget (10 s by default) a long wait is cut; past it the call fails at once
    # (tests/unit/test_llm_deadline.py).
    script = Script(httpx2.Response(429, headers={"Retry-After": "3"}), ok())
    async with script.client(retry=RetryPolicy(max_retry_after=0.25)) as client:
        await client.complete(MESSAGES)
    assert script.delays == [0.25]


async def test_retry_after_on_a_500_is_ignored_in_favour_of_backoff() -> None:
    script = Script(httpx2.Response(500, headers={"Retry-After": "4"}), ok())
    async with script.client() as client:
        await client.complete(MESSAGES)
    assert script.delays[0] <= RetryPolicy().backoff_cap(0)


async def test_real_sleep_is_counted_in_the_duration() -> None:
    script = Script(httpx2.Response(429, headers={"Retry-After": "0.02"}), ok())
    client = ChatClient(BASE, model="m", transport=httpx2.MockTransport(script))
    async with client:
        result = await client.complete(MESSAGES)
    assert result.duration >= 0.02


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_client_errors_other_than_429_are_not_retried(status: int) -> None:
    script = Script(status)
    async with script.client() as client:
        with pytest.raises(BackendStatusError) as info:
            await client.complete(MESSAGES)
    assert len(script.requests) == 1
    assert info.value.status == status
    assert "after 1 attempt]" in str(info.value)


async def test_401_message_says_to_check_the_api_key() -> None:
    script = Script(401)
    async with script.client() as client:
        with pytest.raises(BackendStatusError, match=r"check the API key.*is not set"):
            await client.complete(MESSAGES)


def test_server_error_summary_keeps_identifier_fields_and_never_the_message() -> None:
    openai = {
        "error": {
            "message": f"you said {SECRET_USER_TEXT}",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    assert error_summary(openai) == "type=invalid_request_error, code=context_length_exceeded"
    vllm = {"object": "error", "message": SECRET_USER_TEXT, "type": "BadRequestError", "code": 400}
    assert error_summary(vllm) == "type=BadRequestError, code=400"
    assert error_summary({"detail": "Not Found"}) is None
    assert error_summary({"detail": [{"input": SECRET_USER_TEXT}]}) is None
    assert error_summary({"error": {"type": SECRET_USER_TEXT, "code": "x" * 65}}) is None  # not identifiers
    assert error_summary({"error": "a string error", "type": True}) is None


# --- transport failures --------------------------------------------------------------------------


async def test_read_timeout_is_not_retried_by_default_and_raises_timeout_error() -> None:
    script = Script(httpx2.ReadTimeout("timed out"))
    async with script.client() as client:
        with pytest.raises(BackendTimeoutError) as info:
            await client.complete(MESSAGES)
    assert len(script.requests) == 1
    assert f"within {DEFAULT_TIMEOUT.read} s (read timeout)" in str(info.value)
    assert isinstance(info.value.__cause__, httpx2.ReadTimeout)


async def test_read_timeout_is_retried_when_the_policy_says_so() -> None:
    script = Script(httpx2.ReadTimeout("timed out"), ok())
    async with script.client(retry=RetryPolicy(retry_read_timeouts=True)) as client:
        result = await client.complete(MESSAGES)
    assert result.attempts == 2


async def test_pool_timeout_is_not_retried() -> None:
    script = Script(httpx2.PoolTimeout("pool"))
    async with script.client(retry=RetryPolicy(retry_read_timeouts=True)) as client:
        with pytest.raises(BackendTimeoutError, match="pool timeout"):
            await client.complete(MESSAGES)
    assert len(script.requests) == 1


@pytest.mark.parametrize(
    "exc",
    [httpx2.ConnectError("[Errno 111] Connection refused"), httpx2.ConnectTimeout("connect")],
    ids=["refused", "connect-timeout"],
)
async def test_connect_failures_are_retried_then_raise_connection_error(exc: Exception) -> None:
    script = Script(exc)
    async with script.client(retry=RetryPolicy(max_retries=2)) as client:
        with pytest.raises(BackendConnectionError) as info:
            await client.complete(MESSAGES)
    assert len(script.requests) == 3
    assert len(script.delays) == 2
    assert "could not connect to " + URL in str(info.value)


async def test_connect_errors_are_not_retried_when_disabled() -> None:
    script = Script(httpx2.ConnectError("refused"))
    async with script.client(retry=RetryPolicy(retry_connect_errors=False)) as client:
        with pytest.raises(BackendConnectionError):
            await client.complete(MESSAGES)
    assert len(script.requests) == 1


@pytest.mark.parametrize(
    "exc",
    [
        httpx2.RemoteProtocolError("Server disconnected without sending a response."),
        httpx2.ReadError("connection reset"),
    ],
)
async def test_dropped_connection_is_retried(exc: Exception) -> None:
    script = Script(exc, ok())
    async with script.client() as client:
        result = await client.complete(MESSAGES)
    assert result.attempts == 2


def test_base_url_without_http_scheme_is_rejected_at_construction() -> None:
    with pytest.raises(ValueError, match="http://"):
        ChatClient("nim:8000/v1", model="m")


async def test_every_backend_error_is_a_backend_error() -> None:
    for exc_type in (BackendTimeoutError, BackendConnectionError, BackendStatusError):
        assert issubclass(exc_type, BackendError)


async def test_retries_are_logged_at_warning_without_user_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    script = Script(502, ok())
    with caplog.at_level(logging.WARNING, logger="guardcache.llm.client"):
        async with script.client() as client:
            await client.complete(MESSAGES)
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    text = record.getMessage()
    assert "HTTP 502" in text and "retrying in" in text and URL in text
    assert SECRET_USER_TEXT not in text


# --- RetryPolicy ---------------------------------------------------------------------------------


@given(
    retry_index=st.integers(min_value=0, max_value=2_000),
    rand=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
    initial=st.floats(min_value=0.0, max_value=5.0, allow_subnormal=False),  # denormal products round
    maximum=st.floats(min_value=0.0, max_value=30.0),
    multiplier=st.floats(min_value=1.0, max_value=10.0),
)
def test_full_jitter_delay_is_within_zero_and_the_exponential_cap(
    retry_index: int, rand: float, initial: float, maximum: float, multiplier: float
) -> None:
    policy = RetryPolicy(backoff_initial=initial, backoff_max=maximum, backoff_multiplier=multiplier)
    cap = policy.backoff_cap(retry_index)
    try:
        exponential = initial * multiplier**retry_index
    except OverflowError:
        exponential = math.inf
    assert 0.0 <= cap <= maximum
    assert cap <= exponential * (1 + 1e-9)  # iterated products round slightly differently
    assert 0.0 <= policy.backoff_delay(retry_index, rand=lambda: rand) <= cap


def test_backoff_cap_grows_exponentially_up_to_the_max() -> None:
    policy = RetryPolicy(backoff_initial=0.05, backoff_multiplier=2, backoff_max=0.3)
    assert [policy.backoff_cap(n) for n in range(5)] == pytest.approx([0.05, 0.1, 0.2, 0.3, 0.3])
    assert RetryPolicy(jitter=False).backoff_delay(1) == pytest.approx(0.1)


def test_jitter_actually_varies() -> None:
    delays = {RetryPolicy().backoff_delay(3) for _ in range(50)}
    assert len(delays) > 40


@pytest.mark.parametrize(
    "kwargs", [{"max_retries": -1}, {"backoff_initial": -1.0}, {"backoff_multiplier": 0.5}]
)
def test_invalid_retry_policy_is_rejected(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="RetryPolicy"):
        RetryPolicy(**kwargs)


def test_parse_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("3", now=now) == 3.0
    assert parse_retry_after(" 0.5 ", now=now) == 0.5
    assert parse_retry_after("-4", now=now) == 0.0
    assert parse_retry_after("Wed, 01 Jan 2025 12:00:07 GMT", now=now) == 7.0
    assert parse_retry_after("Wed, 01 Jan 2025 11:00:00 GMT", now=now) == 0.0
    for unreadable in (None, "", "soon", "nan", "inf"):
        assert parse_retry_after(unreadable, now=now) is None


# --- the pool ------------------------------------------------------------------------------------


async def test_pool_shares_one_client_per_base_url_within_a_loop() -> None:
    try:
        first = get_http_client(BASE)
        assert get_http_client(BASE + "/") is first
        assert get_http_client("http://other.test/v1") is not first
    finally:
        await aclose_all()
    assert first.is_closed
    again = get_http_client(BASE)
    assert again is not first and not again.is_closed
    await aclose_all()


async def test_pool_gives_another_loop_its_own_client() -> None:
    pool = ClientPool()
    mine = pool.get(BASE)

    async def on_other_loop() -> tuple[httpx2.AsyncClient, httpx2.AsyncClient]:
        try:
            return pool.get(BASE), pool.get(BASE)
        finally:
            await pool.aclose_all()

    theirs, theirs_again = await asyncio.to_thread(asyncio.run, on_other_loop())
    assert theirs is theirs_again
    assert theirs is not mine
    assert theirs.is_closed and not mine.is_closed
    await pool.aclose_all()


async def test_chat_clients_with_one_base_url_share_one_pooled_client() -> None:
    script = Script(ok())
    pool = ClientPool(transport=httpx2.MockTransport(script))
    first = ChatClient(BASE, model="a", pool=pool)
    second = ChatClient(BASE, model="b", api_key="k", pool=pool)
    await first.complete(MESSAGES)
    await second.complete(MESSAGES)
    assert list(pool.clients_for_running_loop()) == [BASE]
    # Per-client auth is per request, so sharing the connection does not share the key.
    assert "authorization" not in script.requests[0].headers
    assert script.requests[1].headers["authorization"] == "Bearer k"
    await first.aclose()  # not owned: stays open
    assert not pool.clients_for_running_loop()[BASE].is_closed
    await pool.aclose_all()


async def test_one_chat_client_works_across_event_loops() -> None:
    script = Script(ok())
    client = script.client()
    await client.complete(MESSAGES)

    async def call_and_close() -> int:
        async with client:
            return (await client.complete(MESSAGES)).attempts

    assert await asyncio.to_thread(asyncio.run, call_and_close()) == 1
    await client.complete(MESSAGES)
    await client.aclose()
    assert len(script.requests) == 3


def test_transport_and_http_client_are_exclusive() -> None:
    with pytest.raises(ValueError, match="either"):
        ChatClient(
            BASE,
            model="m",
            transport=httpx2.MockTransport(Script(ok())),
            http_client=httpx2.AsyncClient(),
        )


async def test_given_http_client_is_used_and_left_open() -> None:
    script = Script(ok())
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(script))
    async with ChatClient(BASE, model="m", http_client=http) as client:
        await client.complete(MESSAGES)
    assert len(script.requests) == 1
    assert not http.is_closed
    await http.aclose()
