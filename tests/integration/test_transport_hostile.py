"""Hostile networks: the client against servers (and proxies) that are broken or malicious.

What the transport contract (test_transport_contract.py) does not cover: an answer never belongs to
another request (a stray waiting unread in the kernel while the loop is busy, an unsolicited 408);
every read is bounded in size, memory and time (heads, headers, interim heads, bodies, compression
bombs, endless event-stream lines and events) and linear in what the server sends (10,000 repeated
headers); redirects are never followed, so the API key never reaches another host; proxies from the
environment (absolute form, CONNECT with TLS end to end, ALL_PROXY, NO_PROXY, what is refused); TLS
verification, whose failure is a misconfiguration that blocks even under ``on_error: allow``.

Real sockets on 127.0.0.1 only (servers and the proxy in tests/transport_support.py); every server
loop is bounded in count and time. Retry-After and deadlines are the contract suite's.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import ssl
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import trustme

from guardcache import LLMRails
from guardcache.errors import (
    BackendConnectionError,
    BackendError,
    BackendInputRejectedError,
    BackendMisconfiguredError,
    BackendProtocolError,
    BackendProxyError,
    BackendRefusedConfigError,
    BackendStatusError,
    BackendTLSError,
)
from guardcache.llm import wire
from guardcache.llm.client import ChatClient
from guardcache.llm.default_pools import default_pool
from guardcache.llm.lanes import shared_ssl_context
from guardcache.llm.retry import RetryPolicy
from guardcache.llm.stream import StreamTotals
from guardcache.llm.transport_contract import CHECK_LIMITS, MAIN_LIMITS, WireError, WireLimits, WirePool
from guardcache.llm.wire import LineSplitter
from tests.integration.rails_support import guard_config, user
from tests.transport_support import (
    EOF_WAIT,
    MODEL,
    SSE_HEADERS,
    Conn,
    HttpProxy,
    LoopThread,
    Request,
    ScriptServer,
    ServerFactory,
    Step,
    TLSScriptServer,
    answer,
    completion,
    drip,
    response,
    sse_body,
)

KEY = "sk-hostile-0123456789"

pytestmark = pytest.mark.usefixtures("no_proxy_env")

# -- fixtures and helpers -----------------------------------------------------------------------


def make_client(server: ScriptServer, pool: WirePool, *, retries: int = 0, **kwargs: Any) -> ChatClient:
    retry = RetryPolicy(max_retries=retries, backoff_initial=0.01, backoff_max=0.05)
    kwargs.setdefault("timeout", 5.0)
    return ChatClient(server.base_url, model=MODEL, pool=pool, retry=retry, **kwargs)


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def collect(client: ChatClient, text: str) -> list[str]:
    return [piece async for piece in client.stream(ask(text), StreamTotals())]


def stream_answer(pieces: Sequence[str], **kwargs: Any) -> bytes:
    kwargs.setdefault("headers", SSE_HEADERS)
    return response(sse_body(pieces), framing="chunked", chunk=64, **kwargs)


class Far:
    """ScriptServers on an event loop in another thread (:class:`LoopThread`): they answer while the
    test's loop is blocked, and ``send`` writes on one of their connections right now."""

    def __init__(self) -> None:
        self.thread = LoopThread().start()
        self.servers: list[ScriptServer] = []

    async def serve(self, script: Step | Sequence[Step]) -> ScriptServer:
        server = await self.thread.run(ScriptServer(script).start())
        self.servers.append(server)
        return server

    def send(self, conn: Conn, data: bytes, *, close: bool = False) -> None:
        """Writes ``data`` (then closes) from the far loop, blocking the caller's loop meanwhile."""

        async def write() -> None:
            await conn.write(data)
            if close:
                conn.close()

        self.thread.call(write())

    async def aclose(self) -> None:
        for server in self.servers:
            await self.thread.run(server.aclose())
        self.thread.stop()


@pytest.fixture
async def far() -> AsyncIterator[Far]:
    servers = Far()
    yield servers
    await servers.aclose()


def busy(seconds: float = 0.05) -> None:
    """Keeps the event loop from running (a CPU-bound step, a blocking call): bytes the server sends
    meanwhile wait in the kernel, unseen by the client."""
    time.sleep(seconds)


def pour(head: bytes, piece: bytes, count: int, sent: list[int], pause: float = 0.002) -> Step:
    """Writes ``head``, then ``piece`` up to ``count`` times ``pause`` s apart, ``sent[0]`` counting
    the bytes written; stops when the client hangs up (a write fails) or the count is reached."""

    async def step(conn: Conn, request: Request) -> None:
        sent.append(0)
        await conn.write(head)
        sent[0] += len(head)
        for _ in range(count):
            if conn.writer.is_closing():
                return
            await conn.write(piece)
            sent[0] += len(piece)
            await asyncio.sleep(pause)

    return step


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def content_of(request: Request) -> str:
    text: str = request.json()["messages"][-1]["content"]
    return text


# -- 1. a response belongs to its request -------------------------------------------------------


@pytest.mark.parametrize("call", ["complete", "stream"])
async def test_stray_answer_waiting_unread_while_the_loop_is_busy_is_never_the_next_answer(
    far: Far, pool: WirePool, call: str
) -> None:
    # The stray arrives on the idle pooled connection while the asking task keeps the loop busy:
    # the bytes sit in the kernel, no data_received has seen them, and the next call picks the
    # connection. Only a poll of the socket before reuse tells it is not clean.
    if call == "complete":
        own, stray = answer("unsafe"), answer("safe")
    else:
        own, stray = stream_answer(["unsafe"]), stream_answer(["safe"])
    server = await far.serve([answer("safe"), own])
    client = make_client(server, pool)
    assert (await client.complete(ask("hello"))).content == "safe"
    far.send(server.conns[0], stray)  # the loop is blocked from here to the next call
    busy()
    if call == "complete":
        assert (await client.complete(ask("how do I make a bomb"))).content == "unsafe"
    else:
        assert await collect(client, "how do I make a bomb") == ["unsafe"]
    assert server.connections == 2
    assert [r.conn for r in server.requests] == [0, 1]
    assert [content_of(r) for r in server.requests] == ["hello", "how do I make a bomb"]
    await far.thread.run(server.wait_eof(0))


REQUEST_TIMEOUT = response(
    b"", status=408, reason="Request Timeout", headers=(("Connection", "close"),), framing="length"
)


@pytest.mark.parametrize("then_close", [True, False], ids=["then-close", "left-open"])
@pytest.mark.parametrize("loop_busy", [False, True], ids=["loop-idle", "loop-busy"])
async def test_unsolicited_408_on_an_idle_connection_is_not_the_next_answer(
    scripted: ServerFactory, far: Far, pool: WirePool, loop_busy: bool, then_close: bool
) -> None:
    # A server's idle timeout: "408 Request Timeout" on a connection no request is on, then (or
    # not yet) its close. Read by the loop (bytes on an idle connection close it) or waiting unread
    # in the kernel (the poll before reuse), it is never taken for the answer of the next request,
    # and that request never goes on the connection: the next call succeeds on a fresh one.
    server = await (far.serve if loop_busy else scripted)([answer("one"), answer("two")])
    client = make_client(server, pool)
    assert (await client.complete(ask("a"))).content == "one"
    if loop_busy:
        far.send(server.conns[0], REQUEST_TIMEOUT, close=then_close)
        busy()
    else:
        await server.conns[0].write(REQUEST_TIMEOUT)
        if then_close:
            server.conns[0].close()
        await asyncio.sleep(0.05)  # the loop is free: the client reads the 408 on the idle connection
    result = await client.complete(ask("b"))
    assert result.content == "two"
    assert result.attempts == 1
    assert server.connections == 2
    assert [r.conn for r in server.requests] == [0, 1]
    if not then_close:  # the client closed it itself
        await (far.thread.run(server.wait_eof(0)) if loop_busy else server.wait_eof(0))


CLOSING = ("Connection", "close")


@pytest.mark.parametrize(
    ("closing", "extra"),
    [
        (False, answer("stale")),
        (False, b"garbage that is no response\r\n\r\n"),
        (False, "later"),
        (True, answer("stale")),
        (True, b"junk"),
    ],
    ids=[
        "a-second-response",
        "garbage",
        "later-on-the-idle-connection",
        "a-second-response-after-connection-close",
        "junk-after-connection-close",
    ],
)
@pytest.mark.parametrize("call", ["complete", "stream"])
async def test_bytes_after_a_complete_answer_mark_the_connection_dead(
    scripted: ServerFactory, pool: WirePool, call: str, closing: bool, extra: bytes | str
) -> None:
    # The answer stands, whole; the connection is never reused; the next call gets its own answer.
    # Behind a "Connection: close" answer llhttp reports any byte as a parse error of its own (no
    # new message begins): failing the answer for it would turn an "unsafe" verdict into an outage,
    # which on_error: allow lets through.
    also = (CLOSING,) if closing else ()
    if call == "complete":
        first = answer("one", headers=(("Content-Type", "application/json"), *also))
    else:
        first = stream_answer(["one"], headers=(*SSE_HEADERS, *also))
    sent = asyncio.Event()

    async def answer_then_extra(conn: Conn, request: Request) -> None:
        if isinstance(extra, bytes):
            await conn.write(first + extra)
        else:
            await conn.write(first)
            await asyncio.sleep(0.1)
            await conn.write(answer("unsolicited"))
        sent.set()

    server = await scripted([answer_then_extra, answer("two")])
    client = make_client(server, pool)
    if call == "complete":
        assert (await client.complete(ask("a"))).content == "one"
    else:
        assert await collect(client, "a") == ["one"]
    await asyncio.wait_for(sent.wait(), EOF_WAIT)
    await server.wait_eof(0)
    assert (await client.complete(ask("b"))).content == "two"
    assert server.connections == 2
    assert [r.conn for r in server.requests] == [0, 1]


# -- 2. limits: every read bounded in size, memory and time -------------------------------------


SMALL_HEAD = 4096


async def test_endless_header_line_fails_at_the_head_limit(scripted: ServerFactory, pool: WirePool) -> None:
    # A header line that never ends: httptools holds an unfinished header in memory, so only the
    # bytes counted as they arrive can cut it. The server would send 10x the limit.
    sent: list[int] = []
    server = await scripted(pour(b"HTTP/1.1 200 OK\r\nX-Endless: ", b"a" * 512, 80, sent))
    client = make_client(server, pool, limits=WireLimits(max_head_bytes=SMALL_HEAD))
    started = time.monotonic()
    with pytest.raises(BackendProtocolError, match=r"size limit \(HeadTooLarge"):
        await client.complete(ask("a"))
    at_failure = sent[0]
    assert time.monotonic() - started < 2.0
    assert at_failure <= 3 * SMALL_HEAD, f"the client read on to {at_failure} bytes"
    await server.wait_eof(0)


async def test_endless_header_line_at_the_default_limit_costs_bounded_memory(
    scripted: ServerFactory, pool: WirePool
) -> None:
    # 10 MB offered in 64 KB writes (the default head limit is 64 KiB): the call fails long before,
    # and the client holds about the limit and one socket read (asyncio reads up to 256 KiB at a
    # time): ~300 KB traced here, where reading on would hold the 10 MB.
    limit = CHECK_LIMITS.max_head_bytes
    sent: list[int] = []
    server = await scripted(pour(b"HTTP/1.1 200 OK\r\nX-Endless: ", b"a" * 65536, 160, sent, pause=0.001))
    client = make_client(server, pool)
    tracemalloc.start()
    try:
        with pytest.raises(BackendProtocolError, match="HeadTooLarge"):
            await client.complete(ask("a"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sent[0] < 10 * limit, f"the server got {sent[0]} bytes out before the call failed"
    assert peak < 1 << 20, f"peak of {peak} bytes traced during the call"


def many_headers(count: int, value: str = "v" * 20) -> tuple[tuple[str, str], ...]:
    return (("Content-Type", "application/json"), *((f"X-Junk-{i}", value) for i in range(count)))


@pytest.mark.parametrize("delivery", ["one-write", "dripped"])
@pytest.mark.parametrize(("count", "fits"), [(1700, True), (3000, False)], ids=["59KB", "104KB"])
async def test_head_of_many_small_headers_is_bounded_however_it_arrives(
    scripted: ServerFactory, pool: WirePool, delivery: str, count: int, fits: bool
) -> None:
    # The default head limit is 64 KiB. Whether the head comes in one read with the body or in
    # pieces must not change the verdict.
    data = answer("ok", headers=many_headers(count))
    server = await scripted(data if delivery == "one-write" else drip(data, size=1024, pause=0.0005))
    client = make_client(server, pool)
    if fits:
        assert (await client.complete(ask("a"))).content == "ok"
    else:
        with pytest.raises(BackendProtocolError, match="HeadTooLarge"):
            await client.complete(ask("a"))


@pytest.mark.parametrize(("size", "fits"), [(8000, True), (9000, False)])
async def test_one_header_over_the_header_limit_fails(
    scripted: ServerFactory, pool: WirePool, size: int, fits: bool
) -> None:
    headers = (("Content-Type", "application/json"), ("X-Big", "b" * size))
    server = await scripted(answer("ok", headers=headers))
    client = make_client(server, pool)
    if fits:
        assert (await client.complete(ask("a"))).content == "ok"
    else:
        with pytest.raises(BackendProtocolError, match="HeaderTooLarge"):
            await client.complete(ask("a"))


@pytest.mark.parametrize("delivery", ["one-write", "dripped"])
async def test_endless_interim_heads_count_against_the_head_limit(
    scripted: ServerFactory, pool: WirePool, delivery: str
) -> None:
    # 4,000 "100 Continue" heads (100 KB) before the answer: each is legal, together they are a
    # head over 64 KiB.
    data = b"HTTP/1.1 100 Continue\r\n\r\n" * 4000 + answer("ok")
    server = await scripted(data if delivery == "one-write" else drip(data, size=1024, pause=0.0005))
    client = make_client(server, pool)
    with pytest.raises(BackendProtocolError, match="HeadTooLarge"):
        await client.complete(ask("a"))


SMALL_BODY = 64 * 1024


@pytest.mark.parametrize("framing", ["length", "chunked"])
async def test_success_body_over_the_limit_fails_without_reading_it_all(
    scripted: ServerFactory, pool: WirePool, framing: str
) -> None:
    sent: list[int] = []
    piece = b"x" * 8192
    if framing == "length":
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (
            100 * len(piece)
        )
    else:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        piece = chunk(piece)
    server = await scripted(pour(head, piece, 80, sent))  # 10x the limit
    client = make_client(server, pool, limits=WireLimits(max_body_bytes=SMALL_BODY))
    started = time.monotonic()
    with pytest.raises(BackendProtocolError, match="BodyTooLarge"):
        await client.complete(ask("a"))
    at_failure = sent[0]
    assert time.monotonic() - started < 2.0
    assert at_failure <= 3 * SMALL_BODY, f"the client read on to {at_failure} bytes"
    await server.wait_eof(0)


@pytest.mark.parametrize("framing", ["length", "chunked"])
@pytest.mark.parametrize(
    ("status", "reason", "error"),
    [(400, "Bad Request", BackendInputRejectedError), (500, "Internal Server Error", BackendStatusError)],
)
async def test_error_status_body_over_the_limit_is_cut_and_keeps_its_status(
    scripted: ServerFactory, pool: WirePool, framing: str, status: int, reason: str, error: type[BackendError]
) -> None:
    # A 400 quoting a long input is still a 400 (an unsafe input), a 500 still an outage.
    body = json.dumps({"error": {"message": "you said: " + "q" * (4 * SMALL_BODY), "code": "x"}}).encode()
    server = await scripted(
        [response(body, status=status, reason=reason, framing=framing, chunk=4096), answer("next")]
    )
    client = make_client(server, pool, limits=WireLimits(max_body_bytes=SMALL_BODY))
    with pytest.raises(BackendStatusError) as info:
        await client.complete(ask("a"))
    assert type(info.value) is error
    assert info.value.status == status
    assert "qqqq" not in str(info.value)
    assert (await client.complete(ask("b"))).content == "next"  # on a fresh connection
    assert server.connections == 2


class CountingZlib:
    """``zlib`` for :mod:`guardcache.llm.wire`, counting the bytes its inflaters put out."""

    def __init__(self) -> None:
        self.inflated = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(zlib, name)

    def decompressobj(self, *args: Any) -> Any:
        return _CountingInflater(zlib.decompressobj(*args), self)


class _CountingInflater:
    def __init__(self, inner: Any, counter: CountingZlib) -> None:
        self._inner, self._counter = inner, counter

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        out: bytes = self._inner.decompress(data, max_length)
        self._counter.inflated += len(out)
        return out

    def flush(self, *args: Any) -> bytes:
        out: bytes = self._inner.flush(*args)
        self._counter.inflated += len(out)
        return out


@functools.cache
def gzip_of_zeros(size: int) -> bytes:
    """gzip of ``size`` zero bytes, compressed a MiB at a time (never ``size`` bytes in memory)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    parts = [packer.compress(block[: min(len(block), size - at)]) for at in range(0, size, len(block))]
    return b"".join([*parts, packer.flush()])


@pytest.mark.parametrize(
    ("via", "inflated", "match"),
    [
        ("length", 64 << 20, "BodyTooLarge"),
        ("chunked", 64 << 20, "BodyTooLarge"),
        ("stream", 64 << 20, "BodyTooLarge"),
        ("length", 1_000_000, "DecodeRatio"),  # under max_decoded_bytes, 1000x the bytes received
    ],
)
async def test_compression_bomb_fails_fast_in_bounded_memory(
    scripted: ServerFactory,
    pool: WirePool,
    monkeypatch: pytest.MonkeyPatch,
    via: str,
    inflated: int,
    match: str,
) -> None:
    bomb = gzip_of_zeros(inflated)
    assert len(bomb) < 128 * 1024
    if via == "stream":
        headers: tuple[tuple[str, str], ...] = (*SSE_HEADERS, ("Content-Encoding", "gzip"))
    else:
        headers = (("Content-Type", "application/json"), ("Content-Encoding", "gzip"))
    framing = "length" if via == "length" else "chunked"
    server = await scripted(response(bomb, headers=headers, framing=framing, chunk=16384))
    client = make_client(server, pool)
    counting = CountingZlib()
    monkeypatch.setattr(wire, "zlib", counting)
    tracemalloc.start()
    try:
        with pytest.raises(BackendProtocolError, match=match):
            if via == "stream":
                await collect(client, "a")
            else:
                await client.complete(ask("a"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Fails fast: it stopped inflating at the limit (the work a bomb costs), whatever the bomb holds.
    assert 0 < counting.inflated <= CHECK_LIMITS.max_decoded_bytes + 1, counting.inflated
    assert peak < 8 << 20, f"peak of {peak} bytes traced while inflating a {inflated >> 20} MiB bomb"


async def test_close_delimited_stream_over_the_body_limit_fails_for_a_slow_reader(
    scripted: ServerFactory, pool: WirePool
) -> None:
    # A stream without framing ends with its connection. Cut at the limit, the connection is
    # closed by the client, and that close must not then read as the stream's end: a reader busy
    # elsewhere at that moment (handing a piece on) must still get the failure, not a cut stream.
    data = response(sse_body(["p" * 100] * 400), headers=SSE_HEADERS, framing="close")
    server = await scripted(drip(data, size=1024, pause=0.002))
    client = make_client(server, pool, limits=WireLimits(max_body_bytes=8192))
    pieces: list[str] = []
    with pytest.raises(BackendProtocolError, match="BodyTooLarge"):
        async for piece in client.stream(ask("a"), StreamTotals()):
            pieces.append(piece)
            await asyncio.sleep(0.01)  # the consumer forwards the piece somewhere
    assert 0 < len(pieces) < 80


SMALL_LINE = 16 * 1024


async def test_event_stream_line_that_never_ends_fails_at_the_line_limit(
    scripted: ServerFactory, pool: WirePool
) -> None:
    sent: list[int] = []
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    server = await scripted(pour(head + chunk(b"data: "), chunk(b"x" * 1024), 160, sent))  # 10x the limit
    client = make_client(server, pool, limits=WireLimits(max_line_bytes=SMALL_LINE))
    started = time.monotonic()
    with pytest.raises(BackendProtocolError, match="LineTooLong"):
        await collect(client, "a")
    at_failure = sent[0]
    assert time.monotonic() - started < 2.0
    assert at_failure <= 3 * SMALL_LINE, f"the client read on to {at_failure} bytes"
    await server.wait_eof(0)


def test_endless_line_in_small_pieces_costs_linear_time() -> None:
    # An endless line dripped in small packets (each one read is one feed): each piece must not
    # re-copy (and re-scan) the whole unfinished line, or a 1 MiB line costs O(n^2): ~3 s of a
    # blocked event loop in 10-byte pieces, against a few hundredths when kept in pieces. How the
    # cost grows is what is asserted, not what it is on this machine: 4x the line, 4x the CPU when
    # linear, 16x when quadratic (the best of 5 runs each, a ratio of CPU times, not a wall clock).
    def feed_until_too_long(max_line: int) -> float:
        splitter = LineSplitter(max_line)
        piece = b"x" * 10
        started = time.process_time()
        with pytest.raises(WireError, match="LineTooLong"):
            for _ in range(max_line):
                splitter.feed(piece)
        return time.process_time() - started

    full = CHECK_LIMITS.max_line_bytes
    short = min(feed_until_too_long(full // 4) for _ in range(5))
    long = min(feed_until_too_long(full) for _ in range(5))
    assert long < 8 * max(short, 1e-3), f"{long:.4f} s of CPU for a 1 MiB line, {short:.4f} s for 256 KiB"
    # ... and lines still come out whole, wherever the pieces were cut.
    splitter = LineSplitter(64)
    lines = [
        line
        for part in (b"da", b"ta: 1\r", b"\n\nda", b"ta: ", b"2\n", b"tail")
        for line in splitter.feed(part)
    ]
    assert [*lines, *splitter.end()] == ["data: 1", "", "data: 2", "tail"]


def event_lines(count: int, separate: bool) -> bytes:
    line = b'data: {"pad": "' + b"p" * 90 + b'"}\n'
    return (line + b"\n" if separate else line) * count + (b"" if separate else b"\n")


@pytest.mark.parametrize("separate", [True, False], ids=["100-events", "one-event-of-100-lines"])
async def test_event_whose_data_lines_pass_the_event_limit_fails(
    scripted: ServerFactory, pool: WirePool, separate: bool
) -> None:
    # 100 data lines of ~100 bytes: as 100 events each is small; as one event it is ~10 KB.
    body = event_lines(100, separate) + sse_body(["end"])
    server = await scripted(response(body, headers=SSE_HEADERS, framing="chunked", chunk=512))
    client = make_client(server, pool, limits=WireLimits(max_event_bytes=8192))
    if separate:
        assert await collect(client, "a") == ["end"]
    else:
        with pytest.raises(BackendProtocolError, match="EventTooLarge"):
            await collect(client, "a")


@pytest.mark.parametrize("call", ["complete", "stream"])
@pytest.mark.parametrize("limits", [MAIN_LIMITS, CHECK_LIMITS], ids=["MAIN_LIMITS", "CHECK_LIMITS"])
async def test_main_model_answer_over_the_check_limits_passes_with_the_main_limits(
    scripted: ServerFactory, pool: WirePool, call: str, limits: WireLimits
) -> None:
    # A long answer of the main model (3 MiB) is over a guard's 1 MiB, well within 64 MiB.
    pieces = ["w" * 1024] * 3072
    if call == "complete":
        data = response(completion("".join(pieces)), framing="chunked", chunk=65536)
    else:
        data = response(sse_body(pieces), headers=SSE_HEADERS, framing="chunked", chunk=65536)
    server = await scripted(data)
    client = make_client(server, pool, limits=limits)
    if limits is CHECK_LIMITS:
        with pytest.raises(BackendProtocolError, match="BodyTooLarge"):
            await (client.complete(ask("a")) if call == "complete" else collect(client, "a"))
    elif call == "complete":
        assert (await client.complete(ask("a"))).content == "".join(pieces)
    else:
        assert await collect(client, "a") == pieces


# -- 3. linear in the number of headers ---------------------------------------------------------


@pytest.mark.parametrize("name", ["Retry-After", "X-Junk"])
async def test_429_with_20000_repeated_headers_is_read_in_linear_time(
    scripted: ServerFactory, pool: WirePool, name: str
) -> None:
    # Repeated names are joined with ", " (a 429's headers are read for its Retry-After). Joined
    # one by one, 20,000 values of 500 bytes (a 10 MB head, the limit raised for it) took ~2 s of
    # a blocked event loop (10,000: ~0.7 s); gathered: ~30 ms. How the cost grows is asserted, not
    # what it is on this machine: 8x the headers, at most 8x the CPU when linear, 64x when quadratic
    # (the best of 5 runs each, a ratio of this process's CPU times, the server's writes included).
    async def cpu_to_read(count: int) -> float:
        headers = (("Content-Type", "application/json"), *((name, f"{i} " + "j" * 496) for i in range(count)))
        body = b'{"error": {"type": "rate_limit"}}'
        server = await scripted(response(body, status=429, reason="Too Many", headers=headers))
        client = make_client(server, pool, limits=WireLimits(max_head_bytes=32 << 20))
        started = time.process_time()
        with pytest.raises(BackendStatusError) as info:
            await client.complete(ask("a"))
        elapsed = time.process_time() - started
        assert info.value.status == 429
        return elapsed

    short = min([await cpu_to_read(2_500) for _ in range(5)])
    long = min([await cpu_to_read(20_000) for _ in range(5)])
    assert long < 24 * max(short, 1e-3), (
        f"{long:.3f} s of CPU for 20,000 {name} headers, {short:.3f} s for 2,500"
    )


# -- 4. no redirects: the API key never goes to another host ------------------------------------


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_redirect_is_refused_and_the_key_never_reaches_its_target(
    scripted: ServerFactory, pool: WirePool, status: int
) -> None:
    elsewhere = await scripted(answer("followed"))
    location = f"{elsewhere.base_url}/chat/completions"
    moved = response(b"", status=status, reason="Moved", headers=(("Location", location),))
    server = await scripted(moved)
    client = make_client(server, pool, retries=2, api_key=KEY)
    with pytest.raises(BackendRefusedConfigError, match="follows no redirect") as info:
        await client.complete(ask("a"))
    assert isinstance(info.value, BackendMisconfiguredError)
    assert info.value.status == status
    assert len(server.requests) == 1  # not retried either
    assert server.requests[0].header("Authorization") == f"Bearer {KEY}"
    await asyncio.sleep(0.05)
    assert elsewhere.connections == 0 and elsewhere.requests == []


# -- 5. proxies ---------------------------------------------------------------------------------


@pytest.fixture
async def proxy() -> AsyncIterator[HttpProxy]:
    started = await HttpProxy().start()
    yield started
    await started.aclose()


def basic(credentials: str) -> str:
    return "Basic " + base64.b64encode(credentials.encode()).decode()


@pytest.mark.parametrize("var", ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"])
async def test_http_target_goes_through_the_proxy_in_absolute_form(
    scripted: ServerFactory, pool: WirePool, proxy: HttpProxy, monkeypatch: pytest.MonkeyPatch, var: str
) -> None:
    # ALL_PROXY alone is honoured as curl does. The proxy's credentials (from its URL, percent-
    # decoded) go to the proxy alone, as Proxy-Authorization; the API key goes to the target.
    monkeypatch.setenv(var, proxy.url("alice:s%3Dcret"))
    server = await scripted([answer("one"), answer("two")])
    client = make_client(server, pool, api_key=KEY)
    assert (await client.complete(ask("a"))).content == "one"
    assert (await client.complete(ask("b"))).content == "two"
    target = f"http://127.0.0.1:{server.port}/v1/chat/completions"
    assert [seen.line for seen in proxy.seen] == [f"POST {target} HTTP/1.1"] * 2
    assert all(seen.header("Proxy-Authorization") == basic("alice:s=cret") for seen in proxy.seen)
    assert proxy.seen[0].header("Host") == f"127.0.0.1:{server.port}"
    # Plain http: the key crosses the proxy in cleartext (why a hosted endpoint is https).
    assert f"Bearer {KEY}".encode() in proxy.forwarded
    assert proxy.connections == 1  # kept alive through the proxy
    for request in server.requests:
        assert request.header("Authorization") == f"Bearer {KEY}"
        assert request.header("Proxy-Authorization") is None
        assert "alice" not in request.raw.decode("latin-1")


@pytest.mark.parametrize(
    ("no_proxy", "direct"),
    [
        ("127.0.0.1", True),
        ("*", True),
        ("example.com, 127.0.0.1", True),
        ("127.0.0.1:{port}", True),
        ("example.com", False),
        ("127.0.0.1:1", False),  # another port of the host
    ],
)
@pytest.mark.parametrize("var", ["NO_PROXY", "no_proxy"])
async def test_no_proxy_exempts_a_host(
    scripted: ServerFactory,
    pool: WirePool,
    proxy: HttpProxy,
    monkeypatch: pytest.MonkeyPatch,
    var: str,
    no_proxy: str,
    direct: bool,
) -> None:
    server = await scripted(answer("ok"))
    monkeypatch.setenv("HTTP_PROXY", proxy.url("alice:secret"))
    monkeypatch.setenv(var, no_proxy.format(port=server.port))
    client = make_client(server, pool)
    assert (await client.complete(ask("a"))).content == "ok"
    [request] = server.requests
    if direct:
        assert proxy.connections == 0 and proxy.seen == []
        assert request.line == "POST /v1/chat/completions HTTP/1.1"
        assert request.header("Proxy-Authorization") is None
    else:
        assert len(proxy.seen) == 1


@pytest.mark.parametrize(
    ("var", "url"),
    [
        ("ALL_PROXY", "socks5://127.0.0.1:1080"),
        ("all_proxy", "socks5h://127.0.0.1:1080"),
        ("HTTP_PROXY", "https://127.0.0.1:3128"),
    ],
)
async def test_proxy_the_client_cannot_speak_is_a_configuration_error(
    scripted: ServerFactory, pool: WirePool, monkeypatch: pytest.MonkeyPatch, var: str, url: str
) -> None:
    # Going direct would bypass a proxy the operator relies on: the call fails, naming the variable.
    monkeypatch.setenv(var, url)
    server = await scripted(answer("ok"))
    client = make_client(server, pool, retries=2)
    started = time.monotonic()
    with pytest.raises(BackendProxyError, match=var.upper()) as info:
        await client.complete(ask("a"))
    assert isinstance(info.value, BackendMisconfiguredError)
    assert time.monotonic() - started < 10  # a guard for a hang (the call's budget is 5 s)
    await asyncio.sleep(0.05)
    assert server.connections == 0


# -- 6. TLS (and https through a CONNECT tunnel) ------------------------------------------------


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


def server_context(ca: trustme.CA, *names: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*(names or ("127.0.0.1", "localhost"))).configure_cert(context)
    return context


@pytest.fixture
def trust_ca(ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """SSL_CERT_FILE names the test CA (the shared TLS context is rebuilt before and after)."""
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    shared_ssl_context.cache_clear()
    yield
    shared_ssl_context.cache_clear()


@pytest.fixture
def default_trust(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The default trust store, which knows nothing of the test CA."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    shared_ssl_context.cache_clear()
    yield
    shared_ssl_context.cache_clear()


async def start_tls_server(script: Step | Sequence[Step], context: ssl.SSLContext) -> TLSScriptServer:
    return await TLSScriptServer(script, context).start()


@pytest.mark.usefixtures("trust_ca")
async def test_tls_with_a_private_ca_works_and_reuses_the_connection(ca: trustme.CA, pool: WirePool) -> None:
    server = await start_tls_server(answer("secure"), server_context(ca))
    try:
        client = make_client(server, pool, api_key=KEY)
        for _ in range(3):
            assert (await client.complete(ask("a"))).content == "secure"
        assert server.connections == 1 and server.handshakes == 1
        assert server.requests[0].header("Authorization") == f"Bearer {KEY}"
    finally:
        await server.aclose()


@pytest.mark.parametrize("trust", ["default-store", "wrong-name"])
async def test_certificate_that_does_not_verify_is_a_tls_error_not_retried(
    ca: trustme.CA, pool: WirePool, request: pytest.FixtureRequest, trust: str
) -> None:
    if trust == "default-store":
        request.getfixturevalue("default_trust")
        context = server_context(ca)
    else:
        request.getfixturevalue("trust_ca")
        context = server_context(ca, "guard.example.com")  # trusted CA, another name
    server = await start_tls_server(answer("never"), context)
    try:
        client = make_client(server, pool, retries=2, api_key=KEY)
        started = time.monotonic()
        with pytest.raises(BackendTLSError, match="SSL_CERT_FILE") as info:
            await client.complete(ask("a"))
        assert isinstance(info.value, BackendMisconfiguredError)
        assert time.monotonic() - started < 10  # a guard for a hang (the call's budget is 5 s)
        await asyncio.sleep(0.05)  # a second attempt would have its chance to show
        assert server.handshakes == 1  # one attempt: the certificate is the same on the next
        assert server.requests == []
    finally:
        await server.aclose()


@pytest.mark.parametrize("trusted", [True, False])
async def test_untrusted_guard_certificate_blocks_even_under_on_error_allow(
    ca: trustme.CA, request: pytest.FixtureRequest, trusted: bool
) -> None:
    # An outage under on_error: allow lets the message through; a certificate that does not verify
    # is no outage but a guard that can never answer (or someone in between): blocked.
    request.getfixturevalue("trust_ca" if trusted else "default_trust")
    server = await start_tls_server(answer('{"User Safety": "safe"}'), server_context(ca))
    try:
        rails = LLMRails(guard_config(server.base_url, on_error="allow", timeout=2.0, cache=False))
        result = await rails.check_async(user("hello"))
        rail = result.input[0]
        if trusted:
            assert rail.allowed and rail.error is None
        else:
            assert not rail.allowed and not result.allowed
            assert rail.error is not None and "BackendTLSError" in rail.error
            assert server.requests == []
    finally:
        await default_pool().aclose_all()
        await server.aclose()


@pytest.mark.usefixtures("trust_ca")
@pytest.mark.parametrize("var", ["HTTPS_PROXY", "https_proxy", "ALL_PROXY"])
async def test_https_target_goes_through_a_connect_tunnel_with_tls_end_to_end(
    ca: trustme.CA, pool: WirePool, proxy: HttpProxy, monkeypatch: pytest.MonkeyPatch, var: str
) -> None:
    monkeypatch.setenv(var, proxy.url("alice:secret"))
    server = await start_tls_server([answer("one"), answer("two")], server_context(ca))
    try:
        client = make_client(server, pool, api_key=KEY)
        assert (await client.complete(ask("a"))).content == "one"
        assert (await client.complete(ask("b"))).content == "two"
        [connect] = proxy.seen  # one tunnel, kept alive
        assert connect.line == f"CONNECT 127.0.0.1:{server.port} HTTP/1.1"
        assert connect.header("Host") == f"127.0.0.1:{server.port}"
        assert connect.header("Proxy-Authorization") == basic("alice:secret")
        assert connect.header("Authorization") is None
        # The proxy carried TLS records only: no request line, no key, nothing in cleartext.
        assert proxy.tunnelled[:1] == b"\x16"  # a TLS handshake record
        assert KEY.encode() not in proxy.tunnelled and b"POST" not in proxy.tunnelled
        assert proxy.forwarded == b""
        assert server.connections == 1 and server.handshakes == 1
        for req in server.requests:
            assert req.header("Authorization") == f"Bearer {KEY}"
            assert req.header("Proxy-Authorization") is None
    finally:
        await server.aclose()


PROXY_AUTH_PAGE = b"<html><body><h1>407 Proxy Authentication Required</h1>" + b"." * 2000 + b"</body></html>"


@pytest.mark.usefixtures("trust_ca")
@pytest.mark.parametrize(
    ("status", "reason", "body", "error", "match"),
    [
        (407, "Proxy Authentication Required", b"", BackendProxyError, "wants credentials"),
        (407, "Proxy Authentication Required", PROXY_AUTH_PAGE, BackendProxyError, "wants credentials"),
        (403, "Forbidden", b"<html>denied by policy</html>", BackendConnectionError, "refused the tunnel"),
    ],
    ids=["407", "407-with-a-page", "403-with-a-page"],
)
async def test_proxy_refusing_the_tunnel(
    ca: trustme.CA,
    pool: WirePool,
    monkeypatch: pytest.MonkeyPatch,
    status: int,
    reason: str,
    body: bytes,
    error: type[BackendError],
    match: str,
) -> None:
    # Squid and its kin answer a refused CONNECT with a page: its status decides, not its body.
    headers = (("Proxy-Authenticate", 'Basic realm="proxy"'), ("Content-Type", "text/html"))
    refusing = await HttpProxy(
        connect_answer=response(body, status=status, reason=reason, headers=headers)
    ).start()
    server = await start_tls_server(answer("never"), server_context(ca))
    try:
        monkeypatch.setenv("HTTPS_PROXY", refusing.url())
        client = make_client(server, pool, retries=2 if error is BackendProxyError else 0)
        with pytest.raises(BackendConnectionError, match=match) as info:
            await client.complete(ask("a"))
        assert type(info.value) is error
        assert len(refusing.seen) == 1  # a configuration error is not retried
        assert server.connections == 0 and server.handshakes == 0
    finally:
        await server.aclose()
        await refusing.aclose()
