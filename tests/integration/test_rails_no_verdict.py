"""No verdict, no pass: at the rails level, over real sockets.

A guard model that answers but declines to judge (a refusal, a content filter, no text) and a guard
backend that can never answer as configured (a redirect, 401, 403, 404) both give no verdict. Unlike
an outage (a 503: the explicit ``on_error`` policy decides), neither may let a message through: a
user can make a model decline at will, and a misconfigured guard must not become no guard. So the
input rail blocks whatever ``on_error`` says, nothing is cached, the next good answer is allowed and
cached, a misconfiguration is logged at ERROR at most once per 10 s and never retried, and nothing
the refusal (or an error body) said reaches a log record or an error.

Every backend is a scripted HTTP/1.1 server on 127.0.0.1 (tests/transport_support.py): nothing of
the client, its transport or the rails is mocked. The last test shows that a streamed main model's
own content filter is not subject to these guard rules: its answer is the user's to receive.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from guardcache import LLMRails
from guardcache.rails import rail as rail_module
from tests.integration.rails_support import guard_config, user
from tests.transport_support import (
    SSE_HEADERS,
    ScriptServer,
    ServerFactory,
    answer,
    response,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_proxy_env")]

MARKER = "zq-refusal-4b1d9e"
"""In every refusal and error body: it must never reach a log record or an error."""

SAFE = json.dumps({"User Safety": "safe"})
"""The content safety NIM's verdict for a safe input."""

RAIL_LOGGER = "guardcache.rails.rail"


def completion_body(message: dict[str, Any], finish_reason: str | None = "stop") -> bytes:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "nvidia/llama-3.1-nemoguard-8b-content-safety",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
    return response(json.dumps(body).encode())


DECLINED: dict[str, bytes] = {
    "refusal": completion_body({"content": None, "refusal": f"I will not repeat {MARKER}."}),
    "content_filter, null content": completion_body({"content": None}, "content_filter"),
    "content_filter with a safe verdict": completion_body({"content": SAFE}, "content_filter"),
    "empty content": completion_body({"content": ""}),
    "whitespace-only content": completion_body({"content": " \n\t  \r\n"}),
    "null content, nothing else": completion_body({"content": None}),
}
"""A guard model's answers that are no verdict, whatever on_error says."""

ERROR_BODY = json.dumps({"error": {"message": f"no access for {MARKER}", "type": "auth_error"}}).encode()

REDIRECTS = (301, 302, 307, 308)
MISCONFIGURED = (*REDIRECTS, 401, 403, 404)


@pytest.fixture(autouse=True)
def fresh_misconfigured_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rail module's ERROR limiter is process-wide: another test's misconfigured backend within
    the last 10 s must not swallow this test's first line."""
    limiter = rail_module._MISCONFIGURED_LOG
    assert limiter.interval == 10.0
    monkeypatch.setattr(limiter, "_next_at", float("-inf"))
    monkeypatch.setattr(limiter, "_last_at", float("-inf"))
    monkeypatch.setattr(limiter, "_suppressed", 0)


@pytest.fixture
async def rails_list() -> AsyncIterator[list[LLMRails]]:
    made: list[LLMRails] = []
    yield made
    for rails in made:
        await rails.aclose()


def rail_records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == RAIL_LOGGER and r.levelno == level]


def assert_no_marker(caplog: pytest.LogCaptureFixture, *errors: str | None) -> None:
    for record in caplog.records:
        assert MARKER not in record.getMessage(), record.getMessage()
        assert MARKER not in str(record.exc_info or ""), record.name
    assert MARKER not in caplog.text
    for error in errors:
        assert MARKER not in (error or "")


def status_answer(status: int, location: str) -> bytes:
    headers = [("Content-Type", "application/json")]
    if status in REDIRECTS:
        headers.append(("Location", location))
    return response(ERROR_BODY, status=status, reason="Whatever", headers=headers)


async def assert_good_answer_is_allowed_and_cached(rails: LLMRails, server: ScriptServer, text: str) -> None:
    cache = rails.model_caches["content_safety"]
    good = await rails.check_async(user(text))
    assert good.allowed and good.input[0].allowed
    assert good.input[0].error is None and not good.input[0].from_cache
    assert cache.size() == 1 and cache.get_stats().puts == 1
    again = await rails.check_async(user(text))
    assert again.allowed and again.input[0].from_cache
    assert len(server.requests) == 2  # the blocked check's one request, then the good one


# -- a guard model that declines to judge --------------------------------------------------------


@pytest.mark.parametrize("on_error", ["allow", "block"])
@pytest.mark.parametrize("case", list(DECLINED))
async def test_a_declined_answer_blocks_whatever_on_error_and_is_never_cached(
    scripted: ServerFactory,
    rails_list: list[LLMRails],
    caplog: pytest.LogCaptureFixture,
    case: str,
    on_error: str,
) -> None:
    server = await scripted([DECLINED[case], answer(SAFE)])
    rails = LLMRails(guard_config(server.base_url, on_error=on_error, timeout=5.0))
    rails_list.append(rails)
    cache = rails.model_caches["content_safety"]
    text = "Please judge this message: declined?"
    with caplog.at_level(logging.DEBUG):
        result = await rails.check_async(user(text))
    rail = result.input[0]
    assert result.allowed is False and rail.allowed is False
    assert rail.error is not None and "BackendDeclinedError" in rail.error
    assert len(server.requests) == 1  # the same text is declined again: not retried
    assert cache.size() == 0 and cache.get_stats().puts == 0
    # Logged as a check without a verdict (WARNING), not as a misconfiguration (ERROR).
    assert any("could not get a verdict" in r.getMessage() for r in rail_records(caplog, logging.WARNING))
    assert not rail_records(caplog, logging.ERROR)
    assert_no_marker(caplog, rail.error)
    assert text not in caplog.text  # no user text either

    await assert_good_answer_is_allowed_and_cached(rails, server, text)


# -- a guard backend that can never answer as configured -----------------------------------------


@pytest.mark.parametrize("on_error", ["allow", "block"])
@pytest.mark.parametrize("status", MISCONFIGURED)
async def test_a_misconfigured_backend_blocks_whatever_on_error_logs_an_error_and_is_not_retried(
    scripted: ServerFactory,
    rails_list: list[LLMRails],
    caplog: pytest.LogCaptureFixture,
    status: int,
    on_error: str,
) -> None:
    elsewhere = await scripted(answer(SAFE))  # where a redirect points: must never be asked
    server = await scripted([status_answer(status, elsewhere.base_url + "/chat/completions"), answer(SAFE)])
    rails = LLMRails(guard_config(server.base_url, on_error=on_error, timeout=5.0))
    rails_list.append(rails)
    cache = rails.model_caches["content_safety"]
    with caplog.at_level(logging.DEBUG):
        result = await rails.check_async(user("Is this message fine?"))
    rail = result.input[0]
    assert result.allowed is False and rail.allowed is False
    assert rail.error is not None and "BackendRefusedConfigError" in rail.error
    assert f"HTTP {status}" in rail.error
    assert len(server.requests) == 1  # never retried
    assert not elsewhere.requests  # no redirect followed: the API key never goes to another host
    assert cache.size() == 0 and cache.get_stats().puts == 0
    errors = rail_records(caplog, logging.ERROR)
    assert len(errors) == 1 and "misconfigured" in errors[0].getMessage()
    assert_no_marker(caplog, rail.error)

    await assert_good_answer_is_allowed_and_cached(rails, server, "Is this message fine?")


async def test_a_misconfigured_backend_is_logged_once_per_10_s_and_each_check_asks_once(
    scripted: ServerFactory,
    rails_list: list[LLMRails],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(rail_module._MISCONFIGURED_LOG, "_clock", lambda: now[0])
    server = await scripted(status_answer(401, ""))
    rails = LLMRails(guard_config(server.base_url, on_error="allow", timeout=5.0))
    rails_list.append(rails)
    cache = rails.model_caches["content_safety"]
    with caplog.at_level(logging.DEBUG):
        for i in range(20):
            result = await rails.check_async(user(f"distinct message number {i}"))
            assert result.allowed is False and result.input[0].allowed is False
            assert len(server.requests) == i + 1  # one request per check: never retried
            now[0] += 0.4  # 20 checks within 8 s
        assert len(rail_records(caplog, logging.ERROR)) == 1
        assert cache.size() == 0 and cache.get_stats().puts == 0

        now[0] += 2.1  # 10.1 s after the first line
        await rails.check_async(user("one more distinct message"))
    errors = rail_records(caplog, logging.ERROR)
    assert len(errors) == 2
    assert "19 similar lines suppressed" in errors[1].getMessage()
    assert_no_marker(caplog)


# -- the distinction: an outage follows on_error --------------------------------------------------


@pytest.mark.parametrize("on_error", ["allow", "block"])
async def test_an_outage_still_follows_on_error(
    scripted: ServerFactory,
    rails_list: list[LLMRails],
    caplog: pytest.LogCaptureFixture,
    on_error: str,
) -> None:
    unavailable = response(
        ERROR_BODY,
        status=503,
        reason="Service Unavailable",
        headers=[("Content-Type", "application/json"), ("Retry-After", "0")],
    )
    server = await scripted([unavailable] * 3 + [answer(SAFE)])
    rails = LLMRails(guard_config(server.base_url, on_error=on_error, timeout=5.0))
    rails_list.append(rails)
    cache = rails.model_caches["content_safety"]
    with caplog.at_level(logging.DEBUG):
        result = await rails.check_async(user("Is this message fine?"))
    rail = result.input[0]
    assert rail.allowed is (on_error == "allow") and result.allowed is (on_error == "allow")
    assert rail.error is not None and "BackendStatusError" in rail.error
    assert len(server.requests) == 3  # an outage is retried (twice by default)
    assert cache.size() == 0 and cache.get_stats().puts == 0
    assert not rail_records(caplog, logging.ERROR)  # an outage is no misconfiguration
    assert any(f"on_error={on_error}" in r.getMessage() for r in rail_records(caplog, logging.WARNING))
    assert_no_marker(caplog, rail.error)

    good = await rails.check_async(user("Is this message fine?"))
    assert good.allowed and good.input[0].error is None and cache.size() == 1


# -- the main model is not a guard ----------------------------------------------------------------


def sse_events(events: Sequence[dict[str, Any]]) -> bytes:
    text = "".join(f"data: {json.dumps(event)}\n\n" for event in events)
    return (text + "data: [DONE]\n\n").encode()


async def test_a_streamed_main_models_content_filter_is_its_answer_not_a_guard_decline(
    scripted: ServerFactory, rails_list: list[LLMRails]
) -> None:
    pieces = ["I can help", " with part", " of that"]
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "main"}
    events = [
        *(
            {**chunk, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}
            for p in pieces
        ),
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "content_filter"}]},
        {**chunk, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}},
    ]
    main = await scripted(
        response(sse_events(events), headers=SSE_HEADERS, framing="chunked", chunk=64),
    )
    # The input check, then the output check (an input check answered with a "Response Safety"
    # rating blocks: see guardcache.checks.content_safety.parsers).
    guard = await scripted(
        [answer(SAFE), answer(json.dumps({"User Safety": "safe", "Response Safety": "safe"}))]
    )
    rails = LLMRails(guard_config(guard.base_url, main_url=main.base_url, on_error="block", timeout=5.0))
    rails_list.append(rails)
    stream = rails.stream_async(messages=user("Tell me something"))
    received = [piece async for piece in stream]
    assert "".join(received) == "".join(pieces)
    assert stream.blocked is None and stream.rail is None
    assert stream.finish_reason == "content_filter"
    assert len(main.requests) == 1 and main.requests[0].json()["stream"] is True
    assert len(guard.requests) == 2  # the input check, and the output check of the whole answer
    assert "".join(pieces) in guard.requests[1].json()["messages"][-1]["content"]
