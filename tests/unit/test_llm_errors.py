"""How ChatClient classifies what a backend refuses, and that no user text leaks through its errors.

Over httpx2.MockTransport; tests/integration/test_backend_misbehaving.py does the same over sockets.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx2
import pytest

from guardcache.errors import (
    BackendConnectionError,
    BackendError,
    BackendInputRejectedError,
    BackendProtocolError,
    BackendStatusError,
    InputRejectedError,
)
from guardcache.llm.retry import DEFAULT_RETRY_STATUSES, RetryPolicy
from tests.unit.test_llm_client import Script, ok

MARKER = "zq-private-7f3a9c"
STATUS_LINE_MARKER = "zq-status-line-51e0"
MESSAGES = [{"role": "user", "content": f"my secret is {MARKER} please"}]


def echoing(status: int, **extra: Any) -> httpx2.Response:
    """An error body that quotes the request, as vLLM, NIMs and FastAPI validation errors do."""
    return httpx2.Response(
        status,
        json={
            "object": "error",
            "message": f"This model's maximum context length is 8192 tokens. However, you "
            f"requested 9001 tokens: {MESSAGES}",
            "detail": [{"loc": ["body", "messages"], "msg": "too long", "input": MESSAGES}],
            "type": "BadRequestError",
            "param": None,
            "code": status,
            **extra,
        },
        # Even the status line: our errors and logs use the standard phrase. (httpx2's own INFO line
        # "HTTP Request: ..." repeats the status line as sent; it never includes the body.)
        extensions={"reason_phrase": f"Bad {STATUS_LINE_MARKER}".encode()},
    )


def chain_text(exc: BaseException) -> str:
    """The messages of an exception and every exception it was raised from."""
    parts = []
    seen: BaseException | None = exc
    while seen is not None:
        parts.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


# --- a backend refusing the input is an unsafe input ---------------------------------------------


@pytest.mark.parametrize("status", [400, 413, 422])
async def test_400_413_422_are_an_input_rejection_and_not_retried(status: int) -> None:
    # Even a policy that lists them as retryable does not retry them: the same input is refused again.
    retry = RetryPolicy(retry_on_status=DEFAULT_RETRY_STATUSES | {status})
    script = Script(echoing(status), ok())
    async with script.client(retry=retry) as client:
        with pytest.raises(BackendInputRejectedError) as info:
            await client.complete(MESSAGES)
    assert len(script.requests) == 1 and script.delays == []
    error = info.value
    assert isinstance(error, InputRejectedError)  # the rails block it whatever on_error says
    assert isinstance(error, BackendStatusError) and isinstance(error, BackendError)
    assert error.status == status and error.url == client.url
    assert "treated as unsafe" in str(error) and "type=BadRequestError" in str(error)


@pytest.mark.parametrize("status", [401, 403, 404, 409, 429, 500, 503])
async def test_other_statuses_are_not_an_input_rejection(status: int) -> None:
    script = Script(status)
    async with script.client(retry=RetryPolicy(max_retries=0)) as client:
        with pytest.raises(BackendStatusError) as info:
            await client.complete(MESSAGES)
    assert not isinstance(info.value, InputRejectedError)
    assert info.value.status == status


# --- no user text in errors or logs --------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 413, 422, 429, 500, 502, 503])
async def test_an_echoing_error_body_reaches_no_error_message_and_no_log_record(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    script = Script(echoing(status))
    with caplog.at_level(logging.DEBUG):
        async with script.client() as client:
            with pytest.raises(BackendStatusError) as info:
                await client.complete(MESSAGES)
    assert MARKER in json.loads(script.requests[0].content)["messages"][0]["content"]  # it was sent
    assert MARKER not in chain_text(info.value)
    assert STATUS_LINE_MARKER not in chain_text(info.value)
    assert f"HTTP {status} " in str(info.value)  # the standard phrase, not the server's
    for record in caplog.records:  # every logger, httpx2's included
        assert MARKER not in record.getMessage()
        if record.name.startswith("guardcache"):
            assert STATUS_LINE_MARKER not in record.getMessage()
    assert status not in (500, 502, 503) or caplog.records  # the retries were logged


@pytest.mark.parametrize(
    "exc",
    [
        httpx2.RemoteProtocolError(f"illegal status line: bytearray(b'{MARKER}')"),
        httpx2.LocalProtocolError(f"Illegal header value b'{MARKER}'"),
        httpx2.DecodingError(f"bad gzip data near {MARKER}"),
    ],
    ids=["remote-protocol", "local-protocol", "decoding"],
)
async def test_protocol_errors_that_quote_bytes_are_named_by_class_only(
    exc: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    script = Script(exc, ok())
    with caplog.at_level(logging.DEBUG):
        async with script.client() as client:
            try:
                await client.complete(MESSAGES)
            except (BackendConnectionError, BackendProtocolError) as error:
                assert MARKER not in str(error)
                assert type(exc).__name__ in str(error)
    for record in caplog.records:
        assert MARKER not in record.getMessage()
