"""Scripted HTTP/1.1 servers over real sockets, for the transport contract and hostile-network tests.

Every test starts a small ``asyncio.start_server`` on 127.0.0.1 (port 0) that records the connections
it accepted, the raw requests it read and whether each connection was closed by the client (EOF), and
answers each request per a script: canned bytes, or a coroutine that writes (slowly, in pieces),
closes, hangs... Nothing of the client or its transport is mocked.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pytest

from guardcache.llm.h1_pool import H1Pool
from guardcache.llm.transport_contract import WirePool

MODEL = "test-model"
PROXY_VARS = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
NO_PROXY_VARS = ("NO_PROXY", "no_proxy")
EOF_WAIT = 10.0  # a deadline for an event that takes milliseconds: only a hang reaches it
TRANSPORTS = ("h1",)
"""Every network transport the project ships (see guardcache.llm.default_pools.default_pool): a second one
would be added here and run the whole contract."""


def new_pool(transport: str) -> WirePool:
    if transport == "h1":
        return H1Pool()
    raise ValueError(f"unknown transport {transport!r}")


# -- the scripted server ------------------------------------------------------------------------


async def close_server(
    server: asyncio.Server, writers: Iterable[asyncio.StreamWriter], tasks: Iterable[asyncio.Task[Any]]
) -> None:
    """Stop accepting, close every connection, give the handlers a second to end, cancel the rest."""
    server.close()
    for writer in writers:
        writer.close()
    running = list(tasks)
    if running:
        _, pending = await asyncio.wait(running, timeout=1.0)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    await server.wait_closed()


@dataclass
class Request:
    """One request as the server read it off the wire."""

    conn: int  # index of the connection it came on (0: the first accepted)
    line: str
    headers: list[tuple[str, str]]
    body: bytes
    raw: bytes

    def header(self, name: str) -> str | None:
        values = [value for key, value in self.headers if key.lower() == name.lower()]
        assert len(values) <= 1, f"header {name!r} sent {len(values)} times"
        return values[0] if values else None

    def json(self) -> Any:
        return json.loads(self.body)


class Conn:
    """The server's side of one accepted connection."""

    def __init__(self, index: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.index = index
        self.reader = reader
        self.writer = writer
        self.eof = asyncio.Event()  # the client closed (or reset) the connection
        self.closed_by_server = False
        self.extra = b""  # bytes read that were not part of a request

    async def read_request(self) -> Request | None:
        """The next request, or None at EOF."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            self.extra += exc.partial
            self.eof.set()
            return None
        except ConnectionError:
            self.eof.set()
            return None
        text = head[:-4].decode("latin-1")
        line, *rest = text.split("\r\n")
        headers = []
        for item in rest:
            name, _, value = item.partition(":")
            headers.append((name, value.strip()))
        lengths = [value for name, value in headers if name.lower() == "content-length"]
        body = await self.reader.readexactly(int(lengths[0])) if lengths else b""
        return Request(self.index, line, headers, body, head + body)

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def wait_eof(self, within: float) -> bool:
        """Read until the client closes the connection (True) or ``within`` seconds pass (False)."""
        try:
            async with asyncio.timeout(within):
                while True:
                    data = await self.reader.read(65536)
                    if not data:
                        self.eof.set()
                        return True
                    self.extra += data
        except TimeoutError:
            return False
        except ConnectionError:
            self.eof.set()
            return True

    def close(self) -> None:
        self.closed_by_server = True
        self.writer.close()


Step = bytes | Callable[[Conn, Request], Awaitable[None]]
"""How the server answers one request: bytes to write, or a coroutine function that does it."""


class ScriptServer:
    """Answers request ``i`` (counted over all connections) with ``script[i]``; the last one repeats."""

    def __init__(self, script: Step | Sequence[Step]) -> None:
        self.script: list[Step] = [script] if isinstance(script, bytes) or callable(script) else list(script)
        self.conns: list[Conn] = []
        self.requests: list[Request] = []
        self.received = asyncio.Event()  # set at each request read
        self._tasks: set[asyncio.Task[Any]] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> ScriptServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def connections(self) -> int:
        return len(self.conns)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = Conn(len(self.conns), reader, writer)
        self.conns.append(conn)
        try:
            while not conn.closed_by_server:
                request = await conn.read_request()
                if request is None:
                    break
                self.requests.append(request)
                self.received.set()
                step = self.script[min(len(self.requests) - 1, len(self.script) - 1)]
                if isinstance(step, bytes):
                    await conn.write(step)
                else:
                    await step(conn, request)
        except (ConnectionError, asyncio.IncompleteReadError):
            conn.eof.set()
        except asyncio.CancelledError:
            pass  # only aclose() cancels a handler: ending quietly keeps asyncio from logging it
        finally:
            self._tasks.discard(task)
            writer.close()

    async def wait_eof(self, *indexes: int, within: float = EOF_WAIT) -> None:
        """Until each of these connections was closed by the client; fails the test after ``within`` s."""
        try:
            async with asyncio.timeout(within):
                for index in indexes:
                    await self.conns[index].eof.wait()
        except TimeoutError:
            open_ = [i for i in indexes if not self.conns[i].eof.is_set()]
            pytest.fail(f"the client did not close connection(s) {open_} within {within} s")

    async def count_eofs(self, at_least: int, within: float = EOF_WAIT) -> int:
        """How many connections the client closed, once ``at_least`` did or ``within`` s passed."""
        waits = [asyncio.ensure_future(conn.eof.wait()) for conn in self.conns]
        try:
            async with asyncio.timeout(within):
                while sum(w.done() for w in waits) < at_least:
                    pending = [w for w in waits if not w.done()]
                    await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            pass
        finally:
            for w in waits:
                w.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
        return sum(conn.eof.is_set() for conn in self.conns)

    async def aclose(self) -> None:
        assert self._server is not None
        # A handler waiting for bytes sees EOF and ends.
        await close_server(self._server, [conn.writer for conn in self.conns], self._tasks)


# -- answers ------------------------------------------------------------------------------------


ServerFactory = Callable[[Step | Sequence[Step]], Awaitable[ScriptServer]]
"""``await factory(script)``: a started :class:`ScriptServer` (the ``scripted`` fixture)."""


def completion(content: str) -> bytes:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
    return json.dumps(body, ensure_ascii=False).encode()


def chunked(body: bytes, size: int, trailer: bytes = b"") -> bytes:
    out = [b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size]) for i in range(0, len(body), size)]
    return b"".join(out) + b"0\r\n" + trailer + b"\r\n"


def response(
    body: bytes,
    *,
    status: int = 200,
    reason: str = "OK",
    headers: Sequence[tuple[str, str]] = (("Content-Type", "application/json"),),
    framing: str = "length",
    chunk: int = 16,
) -> bytes:
    """A whole HTTP/1.1 response; ``framing``: "length", "chunked" or "close" (neither)."""
    lines = [f"HTTP/1.1 {status} {reason}", *(f"{name}: {value}" for name, value in headers)]
    if framing == "length":
        lines.append(f"Content-Length: {len(body)}")
    elif framing == "chunked":
        lines.append("Transfer-Encoding: chunked")
        body = chunked(body, chunk)
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body


def answer(content: str, **kwargs: Any) -> bytes:
    return response(completion(content), **kwargs)


async def echo(conn: Conn, request: Request) -> None:
    """Answers with ``echo:`` and the last message's content."""
    await conn.write(answer("echo:" + request.json()["messages"][-1]["content"]))


def slow(data: bytes, delay: float) -> Step:
    """Writes ``data`` after ``delay`` seconds, unless the client hangs up first."""

    async def step(conn: Conn, request: Request) -> None:
        if not await conn.wait_eof(delay):
            await conn.write(data)

    return step


def drip(data: bytes, size: int = 7, pause: float = 0.001) -> Step:
    """Writes ``data`` ``size`` bytes at a time, ``pause`` seconds apart."""

    async def step(conn: Conn, request: Request) -> None:
        for i in range(0, len(data), size):
            await conn.write(data[i : i + size])
            await asyncio.sleep(pause)

    return step


def then_close(data: bytes) -> Step:
    """Writes ``data``, then closes the connection."""

    async def step(conn: Conn, request: Request) -> None:
        await conn.write(data)
        conn.close()

    return step


async def hang_up(conn: Conn, request: Request) -> None:
    """Reads the request and closes the connection without a byte of answer."""
    conn.close()


async def hang(conn: Conn, request: Request) -> None:
    """Reads the request and never answers (until the client closes the connection)."""
    await conn.wait_eof(30.0)


def sse_body(pieces: Sequence[str]) -> bytes:
    events: list[dict[str, Any]] = []
    for piece in pieces:
        chunk = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "model": MODEL,
            "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
        }
        events.append(chunk)
    events.append(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "model": MODEL,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        }
    )
    usage = {"prompt_tokens": 5, "completion_tokens": len(pieces), "total_tokens": 5 + len(pieces)}
    events.append({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage})
    text = "".join(f"data: {json.dumps(event, ensure_ascii=False)}\n\n" for event in events)
    return (text + "data: [DONE]\n\n").encode()


SSE_HEADERS = (("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"))


async def first_event_then_wait(conn: Conn, request: Request) -> None:
    """Sends a stream's head and its first event, then nothing until the client closes."""
    first = sse_body(["first"]).split(b"\n\n")[0] + b"\n\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    await conn.write(head + b"%x\r\n%s\r\n" % (len(first), first))
    await conn.wait_eof(10.0)


PIECES = ["Hel", "lo", ", wör", "ld ", "😀", " ✓", "!"]


# -- hostile networks: a server on a loop of its own, TLS, a proxy -------------------------------

T = TypeVar("T")


class LoopThread:
    """An event loop in a thread of its own, for a server that must keep going (and send when told)
    while the test's own loop is blocked: bytes that arrive while the client's loop is busy stay in
    the kernel's buffer, unseen by the client, until its loop next polls."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="test-loop-thread", daemon=True)

    def start(self) -> LoopThread:
        self._thread.start()
        return self

    def call(self, coro: Coroutine[Any, Any, T], within: float = EOF_WAIT) -> T:
        """Run ``coro`` on the thread's loop and wait for it, blocking the caller's loop."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(within)

    async def run(self, coro: Coroutine[Any, Any, T], within: float = EOF_WAIT) -> T:
        """Run ``coro`` on the thread's loop; the caller's loop keeps running meanwhile."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return await asyncio.wait_for(asyncio.wrap_future(future), within)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(EOF_WAIT)
        if not self._thread.is_alive():
            self.loop.close()


class TLSScriptServer(ScriptServer):
    """A :class:`ScriptServer` behind TLS (``context``: a server context, e.g. trustme's).

    ``handshakes`` counts the TLS handshakes started (ClientHellos received, verified or not).
    """

    def __init__(
        self, script: Step | Sequence[Step], context: ssl.SSLContext, host: str = "127.0.0.1"
    ) -> None:
        super().__init__(script)
        self.context = context
        self.host = host
        self.handshakes = 0
        context.sni_callback = self._hello

    def _hello(self, sock: Any, name: str | None, context: ssl.SSLContext) -> None:
        self.handshakes += 1

    async def start(self) -> TLSScriptServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def base_url(self) -> str:
        return f"https://{self.host}:{self.port}/v1"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: bytearray | None) -> None:
    """Copies ``reader`` to ``writer`` until EOF (recording into ``seen``), then closes ``writer``."""
    try:
        while data := await reader.read(65536):
            if seen is not None:
                seen += data
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


class HttpProxy:
    """A small HTTP proxy on 127.0.0.1, as the client meets one.

    Absolute-form requests (``POST http://host:port/path``) are forwarded in origin form on one
    upstream connection per client connection, minus ``Proxy-Authorization`` (for the proxy alone);
    ``CONNECT host:port`` opens a tunnel that copies bytes both ways. It records every request head
    it read (``seen``: CONNECTs and forwarded requests alike), the bytes it forwarded in cleartext
    (``forwarded``) and the bytes clients sent through tunnels (``tunnelled``). ``connect_answer``:
    what to answer a CONNECT instead of opening the tunnel (a 407...).
    """

    def __init__(self, *, connect_answer: bytes | None = None) -> None:
        self.connect_answer = connect_answer
        self.seen: list[Request] = []
        self.forwarded = bytearray()
        self.tunnelled = bytearray()
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> HttpProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def url(self, credentials: str = "") -> str:
        """The proxy's URL, as an environment variable names it (``credentials``: ``user:pass``)."""
        return f"http://{credentials + '@' if credentials else ''}127.0.0.1:{self.port}"

    def _track(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._track()
        self._writers.append(writer)
        client = Conn(self.connections, reader, writer)
        self.connections += 1
        upstream: asyncio.StreamWriter | None = None
        pump: asyncio.Task[None] | None = None
        try:
            while True:
                request = await client.read_request()
                if request is None:
                    break
                self.seen.append(request)
                method, target, _ = request.line.split(" ", 2)
                if method == "CONNECT":
                    if self.connect_answer is not None:
                        await client.write(self.connect_answer)
                        break
                    host, _, port = target.rpartition(":")
                    up_reader, up_writer = await asyncio.open_connection(host.strip("[]"), int(port))
                    self._writers.append(up_writer)
                    await client.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    await asyncio.gather(
                        _pipe(reader, up_writer, self.tunnelled), _pipe(up_reader, writer, None)
                    )
                    break
                url = urlsplit(target)
                if url.scheme != "http" or not url.hostname:
                    await client.write(response(b"", status=400, reason="Bad Request"))
                    break
                if upstream is None:
                    up_reader, upstream = await asyncio.open_connection(url.hostname, url.port or 80)
                    self._writers.append(upstream)
                    pump = asyncio.ensure_future(_pipe(up_reader, writer, None))
                path = (url.path or "/") + (f"?{url.query}" if url.query else "")
                hop = ("proxy-authorization", "proxy-connection")
                lines = [f"{method} {path} HTTP/1.1"]
                lines += [f"{name}: {value}" for name, value in request.headers if name.lower() not in hop]
                data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + request.body
                self.forwarded += data
                upstream.write(data)
                await upstream.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # only aclose() cancels a handler
        finally:
            if upstream is not None:
                upstream.close()
            if pump is not None:
                await asyncio.wait([pump], timeout=1.0)
            writer.close()

    async def aclose(self) -> None:
        assert self._server is not None
        await close_server(self._server, self._writers, self._tasks)
