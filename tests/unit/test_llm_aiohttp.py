"""The aiohttp transport: its failures become the same typed errors as httpx2's, retries, Retry-After,
the whole-call deadline and SSE streaming, over a scripted session (no sockets), and the per-loop pool.

Over real sockets the same transport runs in tests/integration/test_backend_misbehaving.py (every
misbehaving backend on both transports) and in the ``guardcache serve`` integration tests.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aiohttp import http_exceptions
from multidict import CIMultiDict, CIMultiDictProxy

from guardcache.errors import (
    BackendConnectionError,
    BackendError,
    BackendInputRejectedError,
    BackendProtocolError,
    BackendStatusError,
    BackendTimeoutError,
)
from guardcache.llm import pool as pools
from guardcache.llm.aiohttp_pool import AiohttpLane, AiohttpPool, wire_error
from guardcache.llm.client import ChatClient
from guardcache.llm.h1_pool import H1Pool
from guardcache.llm.retry import RetryPolicy
from guardcache.llm.wire import WireKind
from guardcache.rails.main_llm import ClientLLM, StreamTotals

BASE = "http://nim.test:8000/v1"
SECRET = "my card number is 4111 1111 1111 1111"
MESSAGES = [{"role": "user", "content": SECRET}]
ANSWER = {
    "model": "served-model",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42},
}


def key() -> Any:
    return SimpleNamespace(host="nim.test", port=8000, ssl=False)


class FakeResponse:
    def __init__(self, status: int, body: bytes, headers: dict[str, str] | None = None, delay: float = 0):
        self.status = status
        self.headers = CIMultiDictProxy(CIMultiDict(headers or {}))
        self._body = body
        self._delay = delay
        self._lines = [line + b"\n" for line in body.split(b"\n")] if body else []
        self.released = False
        self.content = self

    async def read(self) -> bytes:
        await asyncio.sleep(self._delay)
        return self._body

    async def readline(self) -> bytes:
        return self._lines.pop(0) if self._lines else b""

    def release(self) -> None:
        self.released = True


class Pending:
    """What ``session.post`` returns: awaitable, and an async context manager (as aiohttp's)."""

    def __init__(self, step: FakeResponse | BaseException) -> None:
        self.step = step

    async def _get(self) -> FakeResponse:
        await asyncio.sleep(0)
        if isinstance(self.step, BaseException):
            raise self.step
        return self.step

    def __await__(self) -> Any:
        return self._get().__await__()

    async def __aenter__(self) -> FakeResponse:
        return await self._get()

    async def __aexit__(self, *exc: object) -> None:
        if isinstance(self.step, FakeResponse):
            self.step.release()


class FakeSession:
    """Plays a list of responses or exceptions (the last one repeats) and records each request."""

    def __init__(self, *steps: FakeResponse | BaseException) -> None:
        self.steps = list(steps)
        self.requests: list[dict[str, Any]] = []
        self.closed = False

    def post(self, url: Any, **kwargs: Any) -> Pending:
        self.requests.append({"url": str(url), **kwargs})
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        return Pending(step)


class FakePool:
    def __init__(self, session: FakeSession, gate: int | None = 4) -> None:
        self.lane_ = AiohttpLane(session, asyncio.Semaphore(gate) if gate else None, (None, None))  # type: ignore[arg-type]

    def lane(self, base_url: str) -> AiohttpLane:
        return self.lane_

    async def aclose_all(self) -> None:
        pass


def ok(**headers: str) -> FakeResponse:
    return FakeResponse(200, json.dumps(ANSWER).encode(), headers)


class Client:
    def __init__(self, *steps: FakeResponse | BaseException, **kwargs: Any) -> None:
        self.session = FakeSession(*steps)
        self.delays: list[float] = []
        self.chat = ChatClient(BASE, model="m", pool=FakePool(self.session), sleep=self._sleep, **kwargs)

    async def _sleep(self, delay: float) -> None:
        self.delays.append(delay)


# --- the mapping of aiohttp's exceptions ----------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (aiohttp.ConnectionTimeoutError("Connection timeout to host"), WireKind.CONNECT_TIMEOUT),
        (aiohttp.SocketTimeoutError("Timeout on reading data from socket"), WireKind.READ_TIMEOUT),
        (aiohttp.ServerTimeoutError("timeout"), WireKind.READ_TIMEOUT),
        (aiohttp.ClientConnectorError(key(), OSError(111, "Connection refused")), WireKind.CONNECT),
        (aiohttp.ServerDisconnectedError(), WireKind.DROPPED),
        (aiohttp.ClientOSError(104, "Connection reset by peer"), WireKind.DROPPED),
        (aiohttp.ClientPayloadError("Response payload is not completed"), WireKind.DROPPED),
        (http_exceptions.HttpProcessingError(message="bad status line"), WireKind.DROPPED),
        (aiohttp.InvalidURL("nim:8000"), WireKind.UNSUPPORTED),
        (aiohttp.ClientProxyConnectionError(key(), OSError(111, "refused")), WireKind.OTHER),
    ],
)
def test_aiohttp_failures_are_classified(exc: BaseException, kind: WireKind) -> None:
    error = wire_error(exc)
    assert error.kind is kind
    assert error.name == type(exc).__name__


def test_an_undecodable_body_is_a_decode_failure() -> None:
    exc = aiohttp.ClientPayloadError("Can not decode content-encoding: gzip")
    exc.__cause__ = http_exceptions.ContentEncodingError("gzip")
    assert wire_error(exc).kind is WireKind.DECODE


def test_parser_errors_keep_no_server_text() -> None:
    # A parser error can quote the bytes the server sent; only the class is kept.
    error = wire_error(http_exceptions.HttpProcessingError(message=f"bad line {SECRET}"))
    assert SECRET not in str(error) and error.detail == ""


# --- ChatClient over it ---------------------------------------------------------------------------


async def test_a_completion_is_read_and_the_request_is_json_with_the_clients_headers() -> None:
    client = Client(ok(), api_key="sk-secret")
    result = await client.chat.complete(MESSAGES, temperature=0.0)
    assert result.content == "ok" and result.attempts == 1
    assert result.usage.prompt_tokens == 40 and result.usage.model == "served-model"
    sent = client.session.requests[0]
    assert sent["url"] == f"{BASE}/chat/completions"
    assert json.loads(sent["data"]) == {"model": "m", "messages": MESSAGES, "temperature": 0.0}
    assert sent["headers"]["Content-Type"] == "application/json"
    assert sent["headers"]["Authorization"] == "Bearer sk-secret"
    assert sent["allow_redirects"] is False
    assert sent["timeout"].sock_connect == 2.0 and sent["timeout"].sock_read == 10.0


@pytest.mark.parametrize(
    ("exc", "error_type", "attempts"),
    [
        (aiohttp.ClientConnectorError(key(), OSError(111, "Connection refused")), BackendConnectionError, 3),
        (aiohttp.ServerDisconnectedError(), BackendConnectionError, 3),
        (aiohttp.ConnectionTimeoutError("Connection timeout"), BackendConnectionError, 3),
        (aiohttp.SocketTimeoutError("Timeout on reading data from socket"), BackendTimeoutError, 1),
        (aiohttp.InvalidURL("x"), BackendConnectionError, 1),
    ],
)
async def test_transport_failures_are_the_same_typed_errors_and_retried_as_with_httpx2(
    exc: BaseException, error_type: type[BackendError], attempts: int
) -> None:
    client = Client(exc)
    with pytest.raises(error_type) as info:
        await client.chat.complete(MESSAGES)
    assert len(client.session.requests) == attempts
    assert f"after {attempts} attempt" in str(info.value)
    assert isinstance(info.value.__cause__, type(exc))


async def test_a_dropped_connection_then_an_answer_succeeds() -> None:
    client = Client(aiohttp.ServerDisconnectedError(), ok())
    result = await client.chat.complete(MESSAGES)
    assert result.attempts == 2 and len(client.delays) == 1


async def test_retry_after_of_a_429_is_honoured() -> None:
    client = Client(FakeResponse(429, b"{}", {"Retry-After": "0.25"}), ok())
    result = await client.chat.complete(MESSAGES)
    assert result.attempts == 2 and client.delays == [0.25]


async def test_a_retry_after_longer_than_the_budget_fails_at_once() -> None:
    client = Client(FakeResponse(503, b"{}", {"Retry-After": "30"}), ok(), timeout=2)
    with pytest.raises(BackendStatusError, match="would pass") as info:
        await client.chat.complete(MESSAGES)
    assert info.value.status == 503 and client.delays == []


@pytest.mark.parametrize("status", [400, 413, 422])
async def test_a_refused_input_is_an_input_rejection_sent_once_without_the_users_text(status: int) -> None:
    quoting = json.dumps({"error": {"message": f"you sent {SECRET}", "type": "invalid_request_error"}})
    client = Client(FakeResponse(status, quoting.encode()))
    with pytest.raises(BackendInputRejectedError) as info:
        await client.chat.complete(MESSAGES)
    assert len(client.session.requests) == 1
    assert SECRET not in str(info.value) and "type=invalid_request_error" in str(info.value)


async def test_a_200_that_is_not_json_is_a_protocol_error() -> None:
    client = Client(FakeResponse(200, b"<html>proxy login</html>"))
    with pytest.raises(BackendProtocolError):
        await client.chat.complete(MESSAGES)


async def test_the_whole_call_budget_bounds_a_slow_body() -> None:
    client = Client(FakeResponse(200, json.dumps(ANSWER).encode(), delay=30), timeout=0.3)
    started = time.monotonic()
    with pytest.raises(BackendTimeoutError, match="budget"):
        await client.chat.complete(MESSAGES)
    assert time.monotonic() - started < 0.3 + 0.75


async def test_the_admission_gate_is_released_after_failures() -> None:
    client = Client(aiohttp.ServerDisconnectedError())
    client.chat.retry = RetryPolicy(max_retries=0)
    for _ in range(10):  # more than the gate's 4 places
        with pytest.raises(BackendConnectionError):
            await client.chat.complete(MESSAGES)
    gate = client.chat._lane().gate
    assert gate is not None and not gate.locked()


# --- streaming ------------------------------------------------------------------------------------


def sse(*events: dict[str, Any], done: bool = True) -> bytes:
    text = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
    return (text + ("data: [DONE]\n\n" if done else "")).encode()


def delta(text: str | None, finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": {"content": text} if text is not None else {}, "finish_reason": finish}
    return {"model": "served-model", "choices": [choice]}


async def collect(main: ClientLLM, totals: StreamTotals) -> list[str]:
    return [piece async for piece in main.stream(MESSAGES, totals)]


async def test_a_stream_yields_deltas_usage_and_finish_reason() -> None:
    usage = {"model": "served-model", "choices": [], "usage": ANSWER["usage"]}
    body = sse(delta("Hel"), delta("lo"), delta(None, "stop"), usage)
    client = Client(FakeResponse(200, body, {"Content-Type": "text/event-stream"}))
    totals = StreamTotals()
    assert await collect(ClientLLM(client.chat), totals) == ["Hel", "lo"]
    assert totals.finish_reason == "stop" and totals.usage is not None
    assert totals.usage.total_tokens == 42
    sent = json.loads(client.session.requests[0]["data"])
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert client.session.steps[0].released  # type: ignore[union-attr]


async def test_a_stream_refused_is_the_typed_error_of_a_plain_call() -> None:
    client = Client(FakeResponse(422, b'{"detail": [{"input": "x"}]}'))
    with pytest.raises(BackendInputRejectedError):
        await collect(ClientLLM(client.chat), StreamTotals())


async def test_a_stream_cut_before_its_end_is_an_error() -> None:
    client = Client(FakeResponse(200, sse(delta("Hel"), done=False)))
    with pytest.raises(BackendError, match="ended before the answer was complete"):
        await collect(ClientLLM(client.chat), StreamTotals())


async def test_a_stream_that_cannot_connect_is_a_connection_error() -> None:
    client = Client(aiohttp.ClientConnectorError(key(), OSError(111, "Connection refused")))
    with pytest.raises(BackendConnectionError, match="after 1 attempt"):
        await collect(ClientLLM(client.chat), StreamTotals())


# --- the pool -------------------------------------------------------------------------------------


async def test_the_pool_shares_one_session_per_base_url_within_a_loop_and_closes_them() -> None:
    pool = AiohttpPool()
    first = pool.lane(BASE)
    assert pool.lane(BASE + "/") is first
    assert pool.lane("http://other.test/v1") is not first
    assert list(pool.sessions_for_running_loop()) == [BASE, "http://other.test/v1"]
    assert first.gate is not None
    await pool.aclose_all()
    assert first.session.closed
    again = pool.lane(BASE)
    assert again is not first and not again.session.closed
    await pool.aclose_all()


async def test_the_pool_gives_another_loop_its_own_session() -> None:
    pool = AiohttpPool()
    mine = pool.lane(BASE)

    async def on_other_loop() -> Any:
        try:
            return pool.lane(BASE).session
        finally:
            await pool.aclose_all()

    theirs = await asyncio.to_thread(asyncio.run, on_other_loop())
    assert theirs is not mine.session and theirs.closed and not mine.session.closed
    await pool.aclose_all()


@pytest.fixture
def fresh_default(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    monkeypatch.setattr(pools, "_default_wire", None)
    yield None


@pytest.mark.parametrize(
    ("value", "kind"),
    [("", H1Pool), ("h1", H1Pool), ("aiohttp", AiohttpPool), ("httpx2", pools.ClientPool)],
)
def test_the_default_transport_is_h1_unless_the_environment_names_another(
    value: str, kind: type, monkeypatch: pytest.MonkeyPatch, fresh_default: None
) -> None:
    monkeypatch.setenv(pools.HTTP_CLIENT_ENV, value)
    assert isinstance(pools.default_pool(), kind)


def test_an_unknown_transport_name_is_refused(monkeypatch: pytest.MonkeyPatch, fresh_default: None) -> None:
    monkeypatch.setenv(pools.HTTP_CLIENT_ENV, "requests")
    with pytest.raises(ValueError, match="h1, aiohttp or httpx2"):
        pools.default_pool()
