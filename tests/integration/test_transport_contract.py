"""The transport contract: every network transport the project ships (guardcache's own HTTP/1.1
client, and httpx2's stack behind the same WireLane) against scripted servers over real sockets.

The same tests run on each (the ``pool`` fixture is parametrized over ``TRANSPORTS``): keep-alive
reuse, framing and codings, dropped connections, deadlines, retries and Retry-After, cancellation,
streams, header injection, unsolicited bytes, error statuses. Tests of one transport's own
machinery (h1's idle list, its lingering stream end) take the ``h1pool`` fixture instead. The
servers are in tests/transport_support.py; nothing of the client or its transport is mocked.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import struct
import time
import zlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import httpx2
import pytest

from guardcache.errors import (
    BackendConnectionError,
    BackendError,
    BackendProtocolError,
    BackendStatusError,
    BackendTimeoutError,
)
from guardcache.llm.client import ChatClient
from guardcache.llm.h1_pool import H1Lane, H1Pool
from guardcache.llm.retry import RetryPolicy
from guardcache.llm.stream import StreamTotals
from guardcache.llm.transport_contract import WirePool
from guardcache.rails.main_llm import ClientLLM
from tests.transport_support import (
    EOF_WAIT,
    MODEL,
    PIECES,
    SSE_HEADERS,
    Conn,
    Request,
    ScriptServer,
    ServerFactory,
    Step,
    answer,
    completion,
    drip,
    echo,
    first_event_then_wait,
    hang,
    hang_up,
    response,
    slow,
    sse_body,
    then_close,
)

pytestmark = pytest.mark.usefixtures("no_proxy_env")

# -- fixtures and helpers -----------------------------------------------------------------------


@pytest.fixture
async def h1pool() -> AsyncIterator[H1Pool]:
    h1 = H1Pool()
    yield h1
    await h1.aclose_all()


def make_client(
    server: ScriptServer,
    pool: WirePool,
    *,
    retries: int = 0,
    timeout: float | httpx2.Timeout = 5.0,
    **kwargs: Any,
) -> ChatClient:
    retry = RetryPolicy(max_retries=retries, backoff_initial=0.01, backoff_max=0.05)
    return ChatClient(server.base_url, model=MODEL, pool=pool, retry=retry, timeout=timeout, **kwargs)


def lane_of(pool: WirePool, server: ScriptServer) -> H1Lane:
    lane = pool.lanes_for_running_loop()[server.base_url]
    assert isinstance(lane, H1Lane)
    return lane


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- 1. keep-alive and the request on the wire --------------------------------------------------


async def test_twenty_sequential_calls_share_one_connection(scripted: ServerFactory, pool: WirePool) -> None:
    server = await scripted(echo)
    client = make_client(server, pool)
    answers = [(await client.complete(ask(f"q{i}"))).content for i in range(20)]
    assert answers == [f"echo:q{i}" for i in range(20)]
    assert server.connections == 1
    assert len(server.requests) == 20
    assert server.conns[0].extra == b""  # nothing but whole requests on the wire
    assert len(lane_of(pool, server).idle) == 1


async def test_request_is_one_well_formed_post(scripted: ServerFactory, pool: WirePool) -> None:
    server = await scripted(answer("ok"))
    client = make_client(server, pool, api_key="sk-test-123", default_headers={"X-Route": "blue"})
    text = "héllo wörld € 😀"
    result = await client.complete(ask(text), temperature=0.0)
    assert result.content == "ok"
    [request] = server.requests
    assert request.line == "POST /v1/chat/completions HTTP/1.1"
    names = [name.lower() for name, _ in request.headers]
    assert len(names) == len(set(names)), f"duplicated headers: {names}"
    assert request.header("Host") == f"127.0.0.1:{server.port}"
    assert request.header("Content-Type") == "application/json"
    assert request.header("Accept-Encoding") == "identity"
    assert request.header("Authorization") == "Bearer sk-test-123"
    assert request.header("X-Route") == "blue"
    assert request.header("Transfer-Encoding") is None
    assert request.header("Content-Length") == str(len(request.body))
    assert request.json() == {"model": MODEL, "messages": ask(text), "temperature": 0.0}


async def test_no_authorization_header_without_api_key(scripted: ServerFactory, pool: WirePool) -> None:
    server = await scripted(answer("ok"))
    await make_client(server, pool).complete(ask("hi"))
    assert server.requests[0].header("Authorization") is None


# -- 2. response framing and content codings ----------------------------------------------------


async def test_chunked_json_response_is_read_and_connection_reused(
    scripted: ServerFactory, pool: WirePool
) -> None:
    long_text = "chunked " * 500
    server = await scripted(
        [
            response(completion(long_text), framing="chunked", chunk=5),
            # A chunked body ending in a trailer field.
            response(completion("second"), framing="chunked", chunk=7)[:-2] + b"X-Trailer: 1\r\n\r\n",
        ]
    )
    client = make_client(server, pool)
    assert (await client.complete(ask("a"))).content == long_text
    assert (await client.complete(ask("b"))).content == "second"
    assert server.connections == 1


async def test_gzip_encoded_response_is_decoded(scripted: ServerFactory, pool: WirePool) -> None:
    headers = (("Content-Type", "application/json"), ("Content-Encoding", "gzip"))
    server = await scripted(
        [
            response(gzip.compress(completion("zipped")), headers=headers),
            response(gzip.compress(completion("zipped and chunked")), headers=headers, framing="chunked"),
        ]
    )
    client = make_client(server, pool)
    assert (await client.complete(ask("a"))).content == "zipped"
    assert (await client.complete(ask("b"))).content == "zipped and chunked"
    assert server.connections == 1


async def test_deflate_encoded_response_is_decoded(scripted: ServerFactory, pool: WirePool) -> None:
    headers = (("Content-Type", "application/json"), ("Content-Encoding", "deflate"))
    server = await scripted(response(zlib.compress(completion("deflated")), headers=headers))
    assert (await make_client(server, pool).complete(ask("a"))).content == "deflated"


async def test_brotli_response_is_a_protocol_error_not_retried(
    scripted: ServerFactory, pool: WirePool
) -> None:
    headers = (("Content-Type", "application/json"), ("Content-Encoding", "br"))
    server = await scripted(response(b"\x1b\x03\x00\xf8\xa5\x02", headers=headers))
    client = make_client(server, pool, retries=2)
    with pytest.raises(BackendProtocolError, match="could not be decoded"):
        await client.complete(ask("a"))
    assert len(server.requests) == 1


# -- 3./4. connections the server closes --------------------------------------------------------


@pytest.mark.parametrize("pause", [0.0, 0.1])
async def test_idle_connection_closed_by_server_is_replaced_transparently(
    scripted: ServerFactory, pool: WirePool, pause: float
) -> None:
    server = await scripted([then_close(answer("one")), answer("two")])
    client = make_client(server, pool, retries=0)
    assert (await client.complete(ask("a"))).content == "one"
    await asyncio.sleep(pause)  # 0: the close may still be in flight when the next request goes
    result = await client.complete(ask("b"))
    assert result.content == "two"
    assert result.attempts == 1
    assert server.connections == 2
    assert len(server.requests) == 2


async def test_reused_connection_dying_before_any_byte_is_resent_once_on_a_fresh_one(
    scripted: ServerFactory, pool: WirePool
) -> None:
    # The race a keep-alive client must survive: the server reads request 2 on the old connection
    # and closes it without a byte (it had decided to close while idle).
    server = await scripted([answer("one"), hang_up, answer("two")])
    client = make_client(server, pool, retries=0)
    assert (await client.complete(ask("a"))).content == "one"
    result = await client.complete(ask("b"))
    assert result.content == "two"
    assert result.attempts == 1  # the lane's own re-send, not a ChatClient retry
    assert server.connections == 2
    assert [r.conn for r in server.requests] == [0, 0, 1]
    assert server.requests[1].body == server.requests[2].body


async def test_fresh_connection_closed_without_answer_is_not_resent(
    scripted: ServerFactory, pool: WirePool
) -> None:
    server = await scripted([hang_up, answer("never")])
    client = make_client(server, pool, retries=0)
    with pytest.raises(BackendConnectionError, match="dropped before a complete response"):
        await client.complete(ask("a"))
    assert len(server.requests) == 1
    assert server.connections == 1


async def test_connection_closed_mid_body_is_a_connection_error(
    scripted: ServerFactory, pool: WirePool
) -> None:
    whole = answer("this answer is cut")
    server = await scripted(then_close(whole[: len(whole) - 10]))
    client = make_client(server, pool, retries=0)
    with pytest.raises(BackendConnectionError):
        await client.complete(ask("a"))
    assert len(server.requests) == 1


# -- 5./6. timeouts and refused connections -----------------------------------------------------


async def test_read_timeout_phase_raises_timeout_and_closes_connection(
    scripted: ServerFactory, pool: WirePool
) -> None:
    server = await scripted(hang)
    timeout = httpx2.Timeout(connect=1.0, read=0.3, write=1.0, pool=None)
    client = make_client(server, pool, retries=2, timeout=timeout, deadline_s=5.0)
    started = time.monotonic()
    with pytest.raises(BackendTimeoutError, match="read timeout"):
        await client.complete(ask("a"))
    # The read timeout, not the 5 s budget: the error says so; 10x the read timeout guards a hang.
    assert time.monotonic() - started < 10 * 0.3
    assert len(server.requests) == 1  # read timeouts are not retried by default
    await server.wait_eof(0)


async def test_whole_call_budget_raises_timeout_and_closes_connection(
    scripted: ServerFactory, pool: WirePool
) -> None:
    server = await scripted(hang)
    client = make_client(server, pool, timeout=0.5)
    started = time.monotonic()
    with pytest.raises(BackendTimeoutError, match=r"within this call's 0\.5 s budget"):
        await client.complete(ask("a"))
    assert time.monotonic() - started < 10 * 0.5  # the server never answers: a guard for a hang
    await server.wait_eof(0)
    assert lane_of(pool, server).idle == []


async def test_read_timeout_on_reused_connection_is_not_resent(
    scripted: ServerFactory, pool: WirePool
) -> None:
    # The lane re-sends only when a reused connection DIED before any byte; a server that is merely
    # slow got the request and may be working on it: a second copy doubles the wait and its load.
    server = await scripted([answer("one"), hang, answer("late copy")])
    timeout = httpx2.Timeout(connect=1.0, read=0.3, write=1.0, pool=None)
    client = make_client(server, pool, retries=0, timeout=timeout, deadline_s=5.0)
    assert (await client.complete(ask("a"))).content == "one"
    started = time.monotonic()
    try:
        outcome = (await client.complete(ask("b"))).content
    except BackendTimeoutError as exc:
        outcome = "read timeout" if "read timeout" in str(exc) else str(exc)
    elapsed = time.monotonic() - started
    sent = [r.json()["messages"][0]["content"] for r in server.requests]
    assert sent == ["a", "b"], f"requests seen by the server: {sent} (the timed-out one was re-sent)"
    assert outcome == "read timeout"  # the read timeout's, not the 5 s budget's
    assert server.connections == 1
    assert elapsed < 10 * 0.3


async def test_read_timeout_is_reset_by_each_byte(scripted: ServerFactory, pool: WirePool) -> None:
    # The whole answer takes ~1 s, more than the 0.6 s read timeout, but no gap reaches it.
    data = answer("dripped")
    server = await scripted(drip(data, size=max(1, len(data) // 10), pause=0.1))
    timeout = httpx2.Timeout(connect=1.0, read=0.6, write=1.0, pool=None)
    client = make_client(server, pool, timeout=timeout, deadline_s=5.0)
    started = time.monotonic()
    assert (await client.complete(ask("a"))).content == "dripped"
    assert time.monotonic() - started > 0.6  # longer than the read timeout as a whole


async def test_connection_refused_is_a_connection_error(pool: WirePool) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    client = ChatClient(url, model=MODEL, pool=pool, retry=RetryPolicy(max_retries=1, backoff_initial=0.01))
    started = time.monotonic()
    with pytest.raises(BackendConnectionError, match="could not connect"):
        await client.complete(ask("a"))
    assert time.monotonic() - started < 2.0


# -- 7. cancellation ----------------------------------------------------------------------------


async def test_cancelled_call_never_hands_its_answer_to_the_next(
    scripted: ServerFactory, pool: WirePool
) -> None:
    server = await scripted([slow(answer("A"), 0.5), answer("B")])
    client = make_client(server, pool)
    with pytest.raises(TimeoutError):
        # The caller's timeout fires once the request is at the server, before its answer.
        async with asyncio.timeout(None) as caller:
            received = asyncio.create_task(server.received.wait())
            received.add_done_callback(lambda _: caller.reschedule(asyncio.get_running_loop().time()))
            await client.complete(ask("first"))
    assert (await client.complete(ask("second"))).content == "B"
    assert server.connections == 2
    await server.wait_eof(0)
    assert server.conns[0].extra == b""  # the second request never went on the first connection
    assert [r.json()["messages"][0]["content"] for r in server.requests] == ["first", "second"]


async def test_task_cancel_closes_connection(scripted: ServerFactory, pool: WirePool) -> None:
    server = await scripted([slow(answer("A"), 0.5), answer("B")])
    client = make_client(server, pool)
    task = asyncio.create_task(client.complete(ask("first")))
    await asyncio.wait_for(server.received.wait(), EOF_WAIT)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await server.wait_eof(0)
    # Even after A's delay has passed, the next call gets its own answer.
    await asyncio.sleep(0.5)
    assert (await client.complete(ask("second"))).content == "B"
    assert lane_of(pool, server).busy == set()


# -- 8. streams ---------------------------------------------------------------------------------


async def collect(llm: ClientLLM, text: str, totals: StreamTotals | None = None) -> list[str]:
    return [piece async for piece in llm.stream(ask(text), totals or StreamTotals())]


@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
async def test_sse_stream_split_in_tiny_writes_is_read_whole_and_in_order(
    scripted: ServerFactory, pool: WirePool, framing: str
) -> None:
    data = response(sse_body(PIECES), headers=SSE_HEADERS, framing=framing, chunk=23)
    step = drip(data, size=7) if framing != "close" else then_close_after(drip(data, size=7))
    server = await scripted(step)
    llm = ClientLLM(make_client(server, pool))
    totals = StreamTotals()
    assert await collect(llm, "tell me", totals) == PIECES
    assert totals.finish_reason == "stop"
    assert totals.usage is not None and totals.usage.completion_tokens == len(PIECES)
    [request] = server.requests
    assert request.json()["stream"] is True


def then_close_after(step: Step) -> Step:
    assert callable(step)

    async def run(conn: Conn, request: Request) -> None:
        await step(conn, request)
        conn.close()

    return run


async def test_connection_reused_after_a_complete_stream(scripted: ServerFactory, pool: WirePool) -> None:
    # The stream's last bytes (the chunked terminator "0\r\n\r\n") arrive after "data: [DONE]", as
    # they do from servers that write each event as it is produced: the connection must still be
    # kept once the whole message is in, not closed because [DONE] ended the reading first.
    data = response(sse_body(PIECES), headers=SSE_HEADERS, framing="chunked", chunk=23)
    server = await scripted([drip(data, size=7), answer("after")])
    client = make_client(server, pool)
    assert await collect(ClientLLM(client), "tell me") == PIECES
    assert (await client.complete(ask("next"))).content == "after"
    assert server.connections == 1, "the connection of a complete stream was not reused"


async def test_connection_reused_after_a_stream_sent_in_one_write(
    scripted: ServerFactory, pool: WirePool
) -> None:
    server = await scripted(
        [response(sse_body(PIECES), headers=SSE_HEADERS, framing="chunked", chunk=64), answer("after")]
    )
    client = make_client(server, pool)
    assert await collect(ClientLLM(client), "tell me") == PIECES
    assert (await client.complete(ask("next"))).content == "after"
    assert server.connections == 1


async def test_abandoned_stream_closes_its_connection(scripted: ServerFactory, pool: WirePool) -> None:
    server = await scripted([first_event_then_wait, answer("B")])
    client = make_client(server, pool)
    stream = ClientLLM(client).stream(ask("long"), StreamTotals())
    assert isinstance(stream, AsyncGenerator)
    pieces = []
    async for piece in stream:
        pieces.append(piece)
        break
    await stream.aclose()
    assert pieces == ["first"]
    await server.wait_eof(0)
    assert (await client.complete(ask("next"))).content == "B"
    assert server.connections == 2
    assert server.conns[0].extra == b""


async def test_gzip_encoded_sse_stream_is_decoded(scripted: ServerFactory, pool: WirePool) -> None:
    headers = (*SSE_HEADERS, ("Content-Encoding", "gzip"))
    data = response(gzip.compress(sse_body(PIECES)), headers=headers, framing="chunked", chunk=11)
    server = await scripted(drip(data, size=5))
    assert await collect(ClientLLM(make_client(server, pool)), "zip it") == PIECES


async def test_stream_stalling_after_its_head_is_a_read_timeout(
    scripted: ServerFactory, pool: WirePool
) -> None:
    server = await scripted(first_event_then_wait)
    timeout = httpx2.Timeout(connect=1.0, read=0.3, write=1.0, pool=None)
    client = make_client(server, pool, timeout=timeout, deadline_s=5.0)
    pieces: list[str] = []
    started = time.monotonic()
    with pytest.raises(BackendTimeoutError, match="read timeout"):
        async for piece in ClientLLM(client).stream(ask("x"), StreamTotals()):
            pieces.append(piece)
    assert pieces == ["first"]
    assert time.monotonic() - started < 10 * 0.3  # the read timeout's, not the 5 s budget's
    await server.wait_eof(0)


async def test_stream_error_status_body_is_read(scripted: ServerFactory, pool: WirePool) -> None:
    body = json.dumps({"error": {"type": "server_error", "code": "overloaded"}}).encode()
    server = await scripted([response(body, status=503, reason="Service Unavailable"), answer("after")])
    client = make_client(server, pool)
    with pytest.raises(BackendStatusError, match="code=overloaded") as info:
        await collect(ClientLLM(client), "x")
    assert info.value.status == 503
    assert (await client.complete(ask("next"))).content == "after"
    assert server.connections == 1


# -- 9. header injection ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [{"X-Route": "blue\r\nX-Injected: 1"}, {"X-Route\r\nX-Injected": "1"}, {"X-Route": "a\nX-Injected: 1"}],
)
async def test_header_with_line_break_never_reaches_the_wire(
    scripted: ServerFactory, pool: WirePool, headers: dict[str, str]
) -> None:
    server = await scripted(answer("ok"))
    client = make_client(server, pool, retries=2, default_headers=headers)
    with pytest.raises(BackendError, match="InvalidHeader"):
        await client.complete(ask("a"))
    await asyncio.sleep(0.05)
    assert server.requests == []
    assert server.connections == 0  # refused before a connection was even opened
    assert all(b"X-Injected" not in conn.extra for conn in server.conns)


# -- 10. connection: close and close-delimited bodies -------------------------------------------


async def test_connection_close_response_is_not_reused(scripted: ServerFactory, pool: WirePool) -> None:
    closing = (("Content-Type", "application/json"), ("Connection", "close"))
    server = await scripted([answer("one", headers=closing), answer("two")])  # the server does not close
    client = make_client(server, pool)
    assert (await client.complete(ask("a"))).content == "one"
    assert (await client.complete(ask("b"))).content == "two"
    assert server.connections == 2
    assert [r.conn for r in server.requests] == [0, 1]
    await server.wait_eof(0)  # the client closed it itself


async def test_http10_response_is_not_reused(scripted: ServerFactory, pool: WirePool) -> None:
    old = answer("one").replace(b"HTTP/1.1", b"HTTP/1.0", 1)
    server = await scripted([old, answer("two")])
    client = make_client(server, pool)
    assert (await client.complete(ask("a"))).content == "one"
    assert (await client.complete(ask("b"))).content == "two"
    assert server.connections == 2


async def test_body_delimited_by_connection_close_is_read_whole(
    scripted: ServerFactory, pool: WirePool
) -> None:
    long_text = "x" * 200_000 + "end"
    data = answer(long_text, framing="close")

    async def in_pieces_then_close(conn: Conn, request: Request) -> None:
        third = len(data) // 3
        for piece in (data[:third], data[third : 2 * third], data[2 * third :]):
            await conn.write(piece)
            await asyncio.sleep(0.01)
        conn.close()

    server = await scripted([in_pieces_then_close, answer("next")])
    client = make_client(server, pool)
    assert (await client.complete(ask("a"))).content == long_text
    assert (await client.complete(ask("b"))).content == "next"
    assert server.connections == 2


async def test_close_delimited_body_cut_by_a_reset_is_a_connection_error(
    scripted: ServerFactory, pool: WirePool
) -> None:
    # RFC 9112, 8: a body delimited by the close is complete "unless an error was indicated by the
    # underlying connection"; a reset is one.
    data = answer("cut by a reset", framing="close")

    async def half_then_reset(conn: Conn, request: Request) -> None:
        await conn.write(data[: len(data) - 20])
        await asyncio.sleep(0.1)
        sock = conn.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.writer.transport.abort()  # RST, not FIN
        conn.closed_by_server = True

    server = await scripted(half_then_reset)
    client = make_client(server, pool, retries=0)
    with pytest.raises(BackendConnectionError):
        await client.complete(ask("a"))


# -- 11. idle bound ------------------------------------------------------------------------------


async def test_burst_keeps_at_most_max_idle_connections(scripted: ServerFactory) -> None:
    server = await scripted(slow(answer("ok"), 0.2))
    pool = H1Pool(max_idle=4)
    try:
        client = make_client(server, pool)
        results = await asyncio.gather(*(client.complete(ask(f"q{i}")) for i in range(20)))
        assert [r.content for r in results] == ["ok"] * 20
        opened = server.connections
        assert opened > 4  # the burst did run concurrently (20 on an idle machine)
        lane = lane_of(pool, server)
        assert len(lane.idle) == 4
        assert lane.busy == set()
        assert await server.count_eofs(opened - 4) == opened - 4  # those not kept were closed
        # The kept ones serve the next calls without new connections.
        await asyncio.gather(*(client.complete(ask("again")) for _ in range(4)))
        assert server.connections == opened
    finally:
        await pool.aclose_all()


# -- 12. unsolicited bytes ----------------------------------------------------------------------


async def test_unsolicited_bytes_on_idle_connection_drop_it(scripted: ServerFactory, pool: WirePool) -> None:
    sent = asyncio.Event()

    async def answer_then_chatter(conn: Conn, request: Request) -> None:
        await conn.write(answer("one"))
        await asyncio.sleep(0.1)
        await conn.write(answer("unsolicited"))
        sent.set()

    server = await scripted([answer_then_chatter, answer("two")])
    client = make_client(server, pool)
    assert (await client.complete(ask("a"))).content == "one"
    await asyncio.wait_for(sent.wait(), EOF_WAIT)
    await server.wait_eof(0)
    assert (await client.complete(ask("b"))).content == "two"
    assert server.connections == 2


@pytest.mark.parametrize(
    "extra",
    [answer("stale"), response(b'{"error": "late"}', status=500, reason="Internal Server Error")],
    ids=["200", "500"],
)
async def test_extra_response_in_same_write_never_mixes_into_the_answer(
    scripted: ServerFactory, pool: WirePool, extra: bytes
) -> None:
    # A broken server (or one answering twice) sends a second response right behind the first,
    # in the same packet: the first is the answer, whole; the rest is never read as any answer.
    server = await scripted([answer("one") + extra, answer("two")])
    client = make_client(server, pool)
    first = await client.complete(ask("a"))
    assert first.content == "one"
    assert (await client.complete(ask("b"))).content == "two"
    assert server.connections == 2
    assert len(server.requests) == 2


async def test_informational_1xx_response_in_the_same_write_is_skipped(
    scripted: ServerFactory, pool: WirePool
) -> None:
    server = await scripted(b"HTTP/1.1 100 Continue\r\n\r\n" + answer("final"))
    assert (await make_client(server, pool).complete(ask("a"))).content == "final"


async def test_informational_1xx_response_sent_before_a_pause_is_skipped(
    scripted: ServerFactory, pool: WirePool
) -> None:
    # RFC 9110, 15.2: a client must accept 1xx answers before the final one, even unasked for
    # (a proxy's "103 Early Hints", a server's "100 Continue").
    async def informational_then_final(conn: Conn, request: Request) -> None:
        await conn.write(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
        await asyncio.sleep(0.05)
        await conn.write(answer("final"))

    server = await scripted([informational_then_final, answer("next")])
    client = make_client(server, pool)
    assert (await client.complete(ask("a"))).content == "final"
    assert (await client.complete(ask("b"))).content == "next"
    assert len(server.requests) == 2


# -- 13. closing the pool -----------------------------------------------------------------------


async def test_aclose_all_closes_idle_connections(scripted: ServerFactory, pool: WirePool) -> None:
    server = await scripted(slow(answer("ok"), 0.3))
    client = make_client(server, pool)
    await asyncio.gather(*(client.complete(ask(f"q{i}")) for i in range(3)))
    lane = lane_of(pool, server)
    assert server.connections == 3
    assert len(lane.idle) == 3
    await pool.aclose_all()
    await server.wait_eof(0, 1, 2)
    assert lane.idle == []


# -- 15. HTTP error statuses --------------------------------------------------------------------


async def test_429_with_retry_after_is_retried_on_the_same_connection(
    scripted: ServerFactory, pool: WirePool
) -> None:
    limited = response(
        b'{"error": {"type": "rate_limit"}}',
        status=429,
        reason="Too Many Requests",
        headers=(("Content-Type", "application/json"), ("Retry-After", "0")),
    )
    server = await scripted([limited, answer("ok")])
    client = make_client(server, pool, retries=2)
    result = await client.complete(ask("a"))
    assert result.content == "ok"
    assert result.attempts == 2
    assert len(server.requests) == 2
    assert server.connections == 1


async def test_500_body_is_classified_when_retries_run_out(scripted: ServerFactory, pool: WirePool) -> None:
    body = json.dumps({"error": {"message": "boom", "type": "server_error", "code": "engine_dead"}}).encode()
    server = await scripted(response(body, status=500, reason="Internal Server Error", framing="chunked"))
    client = make_client(server, pool, retries=1)
    with pytest.raises(BackendStatusError, match="type=server_error, code=engine_dead") as info:
        await client.complete(ask("a"))
    assert info.value.status == 500
    assert len(server.requests) == 2
    assert server.connections == 1
