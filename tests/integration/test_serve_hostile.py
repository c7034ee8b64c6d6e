"""``guardcache serve`` against hostile and broken clients, over raw sockets on 127.0.0.1: bodies that
stall, heads that are huge or trickle, idle connections, JSON nested 100,000 deep, clients that leave
mid-upload, mid-turn or before a stream's first byte. Both of uvicorn's parsers (httptools, h11)
where the limit lives in the HTTP protocol. Every loop is bounded in count and time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from guardcache.emulator import ThreadedEmulator
from tests.integration import test_serve as support
from tests.integration.test_serve import MAIN_MODEL, ServeProcess, emulator, sample, write_config
from tests.integration.test_speculation import until

serve = support.serve  # the fixtures
nims = support.nims

pytestmark = pytest.mark.integration

# The keep-alive timeout is far below the head timeout, so which one closed an idle connection
# shows even on a loaded machine.
HEADER_TIMEOUT = 4.0
BODY_TIMEOUT = 2.0
KEEP_ALIVE = 0.3
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module", params=["httptools", "h11"])
def guarded(
    request: pytest.FixtureRequest,
    nims: tuple[ThreadedEmulator, ThreadedEmulator],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServeProcess]:
    """A server with short connection timeouts and a concurrency limit of 4, per HTTP parser."""
    main, guard = nims
    folder = write_config(tmp_path_factory.mktemp("hostile") / "h", main.base_url, guard.base_url)
    server = ServeProcess(
        folder,
        "--http",
        request.param,
        "--max-concurrency",
        "4",
        "--header-timeout",
        str(HEADER_TIMEOUT),
        "--body-timeout",
        str(BODY_TIMEOUT),
        "--keep-alive-timeout",
        str(KEEP_ALIVE),
    ).start()
    yield server
    server.stop()


# -- raw-socket helpers ----------------------------------------------------------------------------


def connect(server: ServeProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def chat_head(length: int, *, extra: str = "") -> bytes:
    return (
        f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n{extra}\r\n"
    ).encode()


def read_until_closed(sock: socket.socket, within: float) -> tuple[bytes, float | None]:
    """What the server sends until it closes the connection, and when it closed (monotonic; None if
    it was still open after ``within`` seconds)."""
    deadline = time.monotonic() + within
    data = b""
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return data, time.monotonic()
        if not chunk:
            return data, time.monotonic()
        data += chunk
    return data, None


class Responses:
    """The responses (each with a Content-Length) on a connection that stays open, one by one:
    status and body. Bytes read past one response are kept for the next (pipelining)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.data = b""

    def _more(self, deadline: float) -> None:
        self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = self.sock.recv(65536)
        assert chunk, f"closed mid-response: {self.data[:200]!r}"
        self.data += chunk

    def next(self, within: float = 10.0) -> tuple[int, bytes]:
        deadline = time.monotonic() + within
        while b"\r\n\r\n" not in self.data:
            self._more(deadline)
        head, _, rest = self.data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        while len(rest) < length:
            self._more(deadline)
            head, _, rest = self.data.partition(b"\r\n\r\n")
        self.data = rest[length:]
        return status_of(head), rest[:length]


def status_of(data: bytes) -> int:
    assert data.startswith(b"HTTP/1.1 "), data[:200]
    return int(data.split(b" ", 2)[1])


def json_body(data: bytes) -> Any:
    return json.loads(data.partition(b"\r\n\r\n")[2])


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def assert_quiet(server: ServeProcess) -> None:
    """No ERROR line and no traceback in the server's log."""
    log = server.log()
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]


def chat_ok(server: ServeProcess, text: str = "hi") -> None:
    response = support.LOOPBACK.post(
        f"{server.url}{CHAT}", json={"messages": [{"role": "user", "content": text}]}, timeout=10
    )
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == f"You said: {text}"


# -- slow bodies -----------------------------------------------------------------------------------


def test_stalled_bodies_hold_no_place_of_the_concurrency_limit_and_are_dropped_after_body_timeout(
    guarded: ServeProcess,
) -> None:
    before = guarded.metrics()
    stalled: list[socket.socket] = []
    try:
        for _ in range(300):  # each sends its head and one byte of a 1000-byte body, then nothing
            sock = connect(guarded)
            sock.sendall(chat_head(1000) + b"{")
            stalled.append(sock)
        sent = time.monotonic()
        time.sleep(0.2)  # let the server read every head
        # --max-concurrency 4, 300 requests mid-body: a normal client is still served.
        chat_ok(guarded, "still served")
        assert sample(guarded.metrics(), "guardcache_requests_in_flight") == 0
        # Each stalled request gets 408 and its connection closed once body_timeout passed.
        # (The deadline is for a hang: 10x the body timeout.)
        for sock in stalled:
            data, closed = read_until_closed(sock, within=10 * BODY_TIMEOUT - (time.monotonic() - sent))
            assert closed is not None, "a stalled connection was never dropped"
            assert status_of(data) == 408 and json_body(data)["error"]["code"] == "request_timeout"
    finally:
        for sock in stalled:
            sock.close()
    after = guarded.metrics()
    timed_out = sample(after, "guardcache_requests_rejected_total", reason="body_timeout") - sample(
        before, "guardcache_requests_rejected_total", reason="body_timeout"
    )
    assert timed_out == 300
    chat_ok(guarded)
    assert_quiet(guarded)


# -- request heads ---------------------------------------------------------------------------------


def test_an_oversized_head_gets_431_and_the_server_does_not_grow(guarded: ServeProcess) -> None:
    assert guarded.proc is not None
    for i in range(20):  # settle the process's memory first
        chat_ok(guarded, f"warm {i}")
    # A head just under the limit (64 KiB) is served; so is a head with a large body in one write
    # (the read that crosses the head's limit is split where the head ends).
    with connect(guarded) as sock:
        sock.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 60_000 + b"\r\n\r\n")
        assert Responses(sock).next()[0] == 200
    padded = json.dumps(
        {"messages": [{"role": "user", "content": "hi"}], "metadata": {"pad": "p" * 300_000}}
    ).encode()
    with connect(guarded) as sock:
        sock.sendall(chat_head(len(padded)) + padded)
        status, body = Responses(sock).next()
        assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "You said: hi"
    before_rss = rss_kib(guarded.proc.pid)
    before = guarded.metrics()

    big = 8 << 20  # 8 MB of one header line, sent while the answer is read
    with connect(guarded) as sock:

        def send() -> None:
            try:
                sock.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\nX-Big: ")
                chunk = b"a" * 65536
                for _ in range(big // len(chunk)):
                    sock.sendall(chunk)
            except OSError:
                pass  # the server closed (after its linger): expected

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        data, closed = read_until_closed(sock, within=15)
        sender.join(15)
    assert status_of(data) == 431 and closed is not None
    error = json_body(data)["error"]
    assert error["code"] == "request_header_too_large" and "65536" in error["message"]
    grown = rss_kib(guarded.proc.pid) - before_rss
    assert grown < 4096, f"the server grew by {grown} KiB"
    refused = sample(guarded.metrics(), "guardcache_requests_rejected_total", reason="header_too_large")
    assert refused - sample(before, "guardcache_requests_rejected_total", reason="header_too_large") == 1
    chat_ok(guarded)
    assert_quiet(guarded)


def test_a_trickled_head_and_a_silent_connection_are_dropped_after_header_timeout(
    guarded: ServeProcess,
) -> None:
    before = guarded.metrics()
    with connect(guarded) as silent, connect(guarded) as trickle:
        trickle.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n")
        answer = b""
        # A header line every 0.1 s, never the end of the head: only the head timeout ends this
        # (the loop's own end, 10x later, is a deadline for a hang).
        for i in range(int(10 * HEADER_TIMEOUT / 0.1)):
            readable, _, _ = select.select([trickle], [], [], 0.1)
            if readable:
                answer, _ = read_until_closed(trickle, within=10)
                break
            try:
                trickle.sendall(f"X-Slow-{i}: y\r\n".encode())
            except OSError:
                break
        assert status_of(answer) == 408, answer
        assert json_body(answer)["error"]["code"] == "request_timeout"
        # A connection that never sent a byte is closed without an answer.
        data, closed = read_until_closed(silent, within=10 * HEADER_TIMEOUT)
        assert data == b"" and closed is not None
    after = guarded.metrics()
    timed_out = sample(after, "guardcache_requests_rejected_total", reason="header_timeout") - sample(
        before, "guardcache_requests_rejected_total", reason="header_timeout"
    )
    assert timed_out == 1  # the trickled head; an idle connection is no request
    assert_quiet(guarded)


def test_an_idle_kept_alive_connection_is_closed_after_keep_alive_timeout(guarded: ServeProcess) -> None:
    request = b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n"
    with connect(guarded) as sock:
        responses = Responses(sock)
        for _ in range(3):  # kept alive between requests
            sock.sendall(request)
            assert responses.next()[0] == 200
        sock.sendall(request * 3)  # pipelined: three heads in one read
        assert [responses.next()[0] for _ in range(3)] == [200, 200, 200]
        answered = time.monotonic()
        data, closed = read_until_closed(sock, within=10 * HEADER_TIMEOUT)
    assert data == b"" and closed is not None
    # Closed by the keep-alive timeout (0.3 s), not the head timeout (4 s, 13x later): an upper
    # bound with room for a loaded machine, no lower one.
    assert closed - answered < HEADER_TIMEOUT - 1, closed - answered


# -- bodies ----------------------------------------------------------------------------------------


def test_json_nested_100000_deep_is_a_400_naming_the_limit(guarded: ServeProcess) -> None:
    deep = 100_000
    for nesting in (deep, 100):  # too deep for the decoder; decodable but deeper than 64
        body = (
            b'{"messages": [{"role": "user", "content": "hi"}], "x": '
            + b"[" * nesting
            + b"]" * nesting
            + b"}"
        )
        response = httpx.post(f"{guarded.url}{CHAT}", content=body, timeout=10)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and error["code"] == "json_too_deep"
        assert "64 levels" in error["message"]
    at_limit = b'{"messages": [{"role": "user", "content": "hi"}], "x": ' + b"[" * 63 + b"]" * 63 + b"}"
    assert httpx.post(f"{guarded.url}{CHAT}", content=at_limit, timeout=10).status_code == 200
    assert_quiet(guarded)


def test_clients_that_leave_mid_upload_are_counted_not_logged_as_errors(guarded: ServeProcess) -> None:
    before = sample(guarded.metrics(), "guardcache_requests_rejected_total", reason="client_left")
    for _ in range(50):
        with connect(guarded) as sock:
            sock.sendall(chat_head(5000) + b'{"messages": [')
    counted = 0.0
    deadline = time.monotonic() + 30
    while counted < 50 and time.monotonic() < deadline:
        time.sleep(0.05)
        counted = (
            sample(guarded.metrics(), "guardcache_requests_rejected_total", reason="client_left") - before
        )
    assert counted == 50
    assert sample(guarded.metrics(), "guardcache_requests_in_flight") == 0
    chat_ok(guarded)
    assert_quiet(guarded)


# -- clients that leave mid-turn -------------------------------------------------------------------

LONG = " ".join(f"word{i}" for i in range(300))


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream-before-its-first-byte"])
async def test_a_client_that_leaves_mid_turn_cancels_the_turn_and_its_main_call(
    serve: Any, tmp_path: Path, stream: bool
) -> None:
    # The main model answers 200 tokens at ~170 ms each (~34 s); the output rails check the answer
    # whole, so a stream sends nothing before the end either. The client hangs up once the main
    # call is running.
    with emulator(model=MAIN_MODEL, time_scale=30.0) as main, emulator() as guard:
        config = write_config(tmp_path / "c", main.base_url, guard.base_url, main_params="max_tokens: 200")
        server = serve(config, "--ready-main", "off")  # the main model's calls are counted: turns only
        body = json.dumps({"messages": [{"role": "user", "content": LONG}], "stream": stream}).encode()
        with connect(server) as sock:
            sock.sendall(chat_head(len(body)) + body)
            await until(lambda: main.stats().running == 1, within=30)
        await until(lambda: main.stats().abandoned_requests == 1, within=30)
        stats = main.stats()  # cancelled long before its 200 tokens (~34 s)
        assert stats.abandoned_completion_tokens < 100
        assert stats.requests_by_status.get("200", 0) == 0
        metrics = server.metrics()
        assert sample(metrics, "guardcache_requests_in_flight") == 0
        mode = "stream" if stream else "plain"
        assert sample(metrics, "guardcache_turn_seconds_count", mode=mode, outcome="client_left") == 1
        assert_quiet(server)


async def test_under_another_http_protocol_a_task_watches_for_the_client(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The app under uvicorn's own httptools protocol (no DisconnectHook in the scope), in this
    # process: ClientWatch falls back to a task waiting on receive(), with the same effect.
    import uvicorn

    from guardcache.server.app import create_app, served_state
    from guardcache.server.settings import ServeSettings

    with emulator(model=MAIN_MODEL, time_scale=30.0) as main, emulator() as guard:
        config = write_config(tmp_path / "c", main.base_url, guard.base_url, main_params="max_tokens: 200")
        # The main model's calls are counted: no readiness probe among them.
        app = create_app(ServeSettings(config=str(config), warm_up=False, ready_main="off"))
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=0, http="httptools", log_config=None, lifespan="on")
        )
        serving = asyncio.create_task(server.serve())
        try:
            await until(lambda: server.started, within=30)
            port = server.servers[0].sockets[0].getsockname()[1]
            body = json.dumps({"messages": [{"role": "user", "content": LONG}]}).encode()
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(chat_head(len(body)) + body)
            await until(lambda: main.stats().running == 1, within=30)
            writer.close()
            # cancelled long before its 200 tokens (~34 s): not a 200, an abandoned request
            await until(lambda: main.stats().abandoned_requests == 1, within=30)
            assert main.stats().requests_by_status.get("200", 0) == 0
            state = served_state(app)
            await until(lambda: state.in_flight == 0, within=30)
            left = state.metrics.turn_latency.values[("c", "plain", "client_left")]
            assert sum(left[:-1]) == 1  # (a histogram row: counts per bucket, then the sum)
        finally:
            server.should_exit = True
            await asyncio.wait_for(serving, 30)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
