"""Backends that misbehave over real sockets: every check ends within its budget, a backend that
refuses the input makes it an unsafe input, and nothing the user wrote reaches logs or errors.

The misbehaving servers are a few lines of asyncio on 127.0.0.1 each, started by the test: a 429
asking for 30 s, a body dripped a byte at a time, a connect that is never accepted, an error body
that quotes the prompt. The burst test runs against the NIM emulator. Every test runs on each
network transport the project ships (tests/transport_support.py), over real sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import select
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import httpx2
import pytest

from guardcache import LLMRails
from guardcache.emulator import EmulatorServer
from guardcache.errors import (
    BackendError,
    BackendInputRejectedError,
    BackendStatusError,
    BackendTimeoutError,
    InputRejectedError,
)
from guardcache.llm import default_pools as pools
from guardcache.llm.client import ChatClient
from guardcache.llm.default_pools import aclose_all
from guardcache.testing.pytest_plugin import EmulatorFactory
from tests.integration.rails_support import guard_config, user
from tests.transport_support import TRANSPORTS, new_pool

pytestmark = pytest.mark.integration

MODEL = "nvidia/llama-3.1-nemoguard-8b-content-safety"
MARKER = "zq-private-7f3a9c"
BUDGET = 1.0
# What shows that the budget cut a call short is the error (it names the budget) and what the
# backend saw (one request). The wall clock only guards against a hang: 10x the budget, room for a
# CPU-starved CI VM running timers late.
HANG_GUARD = 10 * BUDGET

Reply = Callable[[asyncio.StreamReader, asyncio.StreamWriter, bytes], Awaitable[None]]


def response(status: int, body: bytes = b"{}", headers: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status} Whatever\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{headers}\r\n"
    ).encode() + body


class Backend:
    """An HTTP/1.1 server on 127.0.0.1 whose every answer is ``reply(reader, writer, body)``.

    ``read_body=False`` answers as soon as the head is read, then reads and discards the body
    before closing (a "lingering close", as nginx does for an early 413: closing with unread
    data would reset the connection, and the client would never see the answer).
    """

    def __init__(self, reply: Reply, *, read_body: bool = True) -> None:
        self.reply = reply
        self.read_body = read_body
        self.requests = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"

    async def __aenter__(self) -> Backend:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length) if self.read_body else b""
                self.requests += 1
                await self.reply(reader, writer, body)
                await writer.drain()
                if not self.read_body:
                    while await reader.read(1 << 20):
                        pass
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)


@contextlib.contextmanager
def never_accepting() -> Iterator[str]:
    """A port whose accept queue is full, so a new connection's SYN is dropped: connect hangs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(8):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        # Wait for the handshakes that fit the queue (a socket becomes writable once its connect is
        # through): the queue is full from then on.
        _, through, _ = select.select([], fillers, [], 30)
        assert through, "no connection reached the listener's queue within 30 s"
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


@pytest.fixture(autouse=True, params=TRANSPORTS)
async def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """The default pool of ChatClients built without a pool (``guardcache.llm.default_pools.default_pool``:
    guardcache's own HTTP/1.1 client), replaced by each network transport shipped in turn."""
    pool = new_pool(request.param)
    monkeypatch.setattr(pools, "_default_wire", pool)
    yield request.param
    await pool.aclose_all()
    await aclose_all()


async def timed_failure(client: ChatClient, **kwargs: object) -> tuple[float, BackendError]:
    started = time.monotonic()
    with pytest.raises(BackendError) as info:
        await client.complete([{"role": "user", "content": "hello"}], **kwargs)  # type: ignore[arg-type]
    return time.monotonic() - started, info.value


# --- 1. the timeout bounds the whole check -------------------------------------------------------


async def test_429_asking_for_30_s_fails_at_once() -> None:
    async def rate_limited(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _b: bytes) -> None:
        writer.write(response(429, headers="Retry-After: 30\r\n"))

    async with Backend(rate_limited) as backend:
        client = ChatClient(backend.base_url, model=MODEL, timeout=BUDGET)
        elapsed, error = await timed_failure(client)
    assert elapsed < HANG_GUARD
    assert isinstance(error, BackendStatusError) and error.status == 429
    assert backend.requests == 1  # not retried (it was: two capped 5 s waits, ~10 s)
    assert "Retry-After" in str(error) and "1 s budget" in str(error)
    assert "not retried" in str(error)


async def test_a_body_dripped_a_byte_at_a_time_is_cut_at_the_budget() -> None:
    payload = json.dumps({"choices": [{"message": {"content": "safe"}}]}).encode()

    async def drip(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _b: bytes) -> None:
        writer.write(response(200, payload)[: -len(payload)])  # the head only
        for byte in payload:  # each byte resets a read timeout, never the budget
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.2)

    async with Backend(drip) as backend:
        client = ChatClient(backend.base_url, model=MODEL, timeout=BUDGET)
        elapsed, error = await timed_failure(client)
    assert elapsed < HANG_GUARD
    # Cut by the budget: the whole body would have been read (~9 s: len(payload) * 0.2 s).
    assert isinstance(error, BackendTimeoutError)
    assert "within this call's 1 s budget" in str(error) and "1 attempt" in str(error)
    assert backend.requests == 1


async def test_a_connect_that_is_never_accepted_is_cut_at_the_budget() -> None:
    with never_accepting() as url:
        client = ChatClient(url, model=MODEL, timeout=BUDGET)
        elapsed, error = await timed_failure(client)
    assert elapsed < HANG_GUARD
    # Cut by the budget: it took 3 connect timeouts (3 s at timeout 1, 6 s at 2).
    assert isinstance(error, BackendTimeoutError)
    assert "within this call's 1 s budget" in str(error)


async def test_a_server_failing_every_attempt_is_given_up_within_the_budget() -> None:
    async def unavailable(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _b: bytes) -> None:
        await asyncio.sleep(0.5)
        writer.write(response(503, headers="Retry-After: 0.5\r\n"))

    async with Backend(unavailable) as backend:
        client = ChatClient(backend.base_url, model=MODEL, timeout=BUDGET)
        elapsed, error = await timed_failure(client)
    assert elapsed < HANG_GUARD
    # Given up within the budget: it took 3 x 0.5 s of answers + 2 x 0.5 s of Retry-After.
    assert isinstance(error, BackendStatusError | BackendTimeoutError)
    assert "1 s budget" in str(error) and backend.requests == 1


async def test_the_callers_deadline_bounds_the_call_over_a_socket() -> None:
    async def hang(_r: asyncio.StreamReader, _w: asyncio.StreamWriter, _b: bytes) -> None:
        await asyncio.sleep(60)

    async with Backend(hang) as backend:
        client = ChatClient(backend.base_url, model=MODEL, timeout=30)
        elapsed, error = await timed_failure(client, deadline=time.monotonic() + 0.3)
    assert elapsed < 10 * 0.3  # the handler hangs a minute, the client's budget is 30 s
    assert isinstance(error, BackendTimeoutError) and "the caller's deadline" in str(error)


async def test_a_rail_with_timeout_1_decides_within_about_a_second_under_a_30_s_retry_after(
    emulator_factory: EmulatorFactory,
) -> None:
    guard = await emulator_factory(faults={"rate_limit_rate": 1.0, "retry_after_seconds": 30})
    rails = LLMRails(guard_config(guard.base_url, on_error="allow", timeout=BUDGET))
    started = time.monotonic()
    result = await rails.check_async(user("Is this message fine?"))
    assert time.monotonic() - started < HANG_GUARD
    assert result.input[0].error is not None
    assert guard.stats().requests_total == 1  # decided at once: not retried (it was ~10 s)


# --- 3. a backend that refuses the input ---------------------------------------------------------


def quoting_error(status: int, body: bytes) -> bytes:
    """What vLLM / a NIM answers for an over-long prompt: the message quotes the request."""
    try:
        text = json.loads(body)["messages"][-1]["content"][:200]
    except (ValueError, KeyError, IndexError):
        text = ""
    error = {
        "object": "error",
        "message": "This model's maximum context length is 8192 tokens. However, you requested "
        f"12000 tokens in the messages ({text!r}). Please reduce the length of the messages.",
        "type": "BadRequestError",
        "param": None,
        "code": status,
    }
    return response(status, json.dumps(error).encode())


@pytest.mark.parametrize("status", [400, 413, 422])
async def test_a_refused_input_is_an_input_rejection_sent_once(status: int) -> None:
    async def refuse(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> None:
        writer.write(quoting_error(status, body))

    async with Backend(refuse) as backend:
        client = ChatClient(backend.base_url, model=MODEL, timeout=5)
        _, error = await timed_failure(client)
    assert isinstance(error, BackendInputRejectedError) and isinstance(error, InputRejectedError)
    assert error.status == status and backend.requests == 1


async def test_a_20_mb_message_refused_with_413_before_its_body_is_read() -> None:
    async def too_large(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _b: bytes) -> None:
        writer.write(response(413, b'{"error": {"type": "request_too_large"}}', "Connection: close\r\n"))

    async with Backend(too_large, read_body=False) as backend:
        client = ChatClient(backend.base_url, model=MODEL, timeout=10)
        started = time.monotonic()
        with pytest.raises(BackendError) as info:
            await client.complete([{"role": "user", "content": "x" * 20_000_000}])
    assert isinstance(info.value, BackendInputRejectedError), info.value
    assert info.value.status == 413 and "type=request_too_large" in str(info.value)
    assert time.monotonic() - started < 10


# --- 4. no user text in logs or errors -----------------------------------------------------------


@pytest.mark.parametrize("status", [400, 500])
async def test_an_error_body_quoting_the_prompt_reaches_no_log_and_no_error(
    status: int, caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    async def refuse(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> None:
        writer.write(quoting_error(status, body))

    async with Backend(refuse) as backend:
        client = ChatClient(backend.base_url, model=MODEL, timeout=5)
        with caplog.at_level(logging.DEBUG), pytest.raises(BackendStatusError) as info:
            await client.complete([{"role": "user", "content": f"my secret is {MARKER}"}])
    assert backend.requests == (1 if status == 400 else 3)
    error: BaseException | None = info.value
    while error is not None:
        assert MARKER not in str(error)
        error = error.__cause__ or error.__context__
    # Not a vacuous scan where there are lines: the retry lines (500).
    assert caplog.records or status == 400
    for record in caplog.records:
        assert MARKER not in record.getMessage(), record.name


# --- 2. a burst queues within the deadline -------------------------------------------------------


async def test_2000_concurrent_distinct_calls_all_succeed(emulator: EmulatorServer) -> None:
    # The phases of an old default, when httpx2 carried every call: a queue for a connection longer
    # than pool=5 s failed the calls still waiting (2-5% of such a burst). Now only the call's
    # budget bounds the wait (the admission gate), whichever transport carries it.
    client = ChatClient(emulator.base_url, model=MODEL, timeout=httpx2.Timeout(120, connect=2, pool=5))
    results = await asyncio.gather(
        *(client.complete([{"role": "user", "content": f"distinct message {i}"}]) for i in range(2000)),
        return_exceptions=True,
    )
    failures = [r for r in results if isinstance(r, BaseException)]
    assert failures == []
    stats = await emulator.astats(prompts=False)
    assert stats.status(200) == 2000
