"""Fuzzing the HTTP/1.1 response reader (guardcache.llm.h1_pool) and the body post-processing
(guardcache.llm.wire): whatever bytes a server sends, in whatever pieces, the reader ends with a
whole answer or a ``WireError``, within its limits, in bounded time, and never raises anything else.

A ``_Connection`` is driven directly, as asyncio would drive it, without a socket: ``connection_made``
with a fake transport, ``start`` (the request), ``data_received`` for each piece (nothing more once
the connection closed its transport: asyncio delivers nothing after ``close()``), then the end of the
connection (``eof_received`` and ``connection_lost(None)`` for a clean close, ``connection_lost(exc)``
for a reset). The limits are small so that hypothesis reaches them.

What each answer is held to:
- the waiter (what the request awaits) is done; the connection is either complete or failed, never
  both; a failure is a ``WireError`` (``DROPPED`` or ``TOO_LARGE``), and reading the answer the way
  ``H1Lane.post`` and ``H1Stream.lines`` do raises it;
- the head, each header field and the body held never pass ``max_head_bytes``,
  ``max_header_bytes`` and ``max_body_bytes``;
- a valid response reads as its bytes say (status, body, keep-alive), however it is split;
- a response followed by stray bytes (a second response) stands, and its connection is not reused.

The hypothesis settings are fixed here (derandomized, no example database, a deadline) so that the
file gives the same verdict on every run and machine.
"""

from __future__ import annotations

import asyncio
import gzip
import string
import zlib
from dataclasses import dataclass
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from guardcache.llm.h1_pool import H1Lane, H1Reply, H1Stream, _Connection
from guardcache.llm.transport_contract import WireError, WireKind, WireLimits
from guardcache.llm.wire import DECODE_RATIO_FLOOR, BodyDecoder, LineSplitter, decode_body

BASE_URL = "http://fuzz.test:80/v1"
REQUEST = b"POST /v1/chat/completions HTTP/1.1\r\nHost: fuzz.test\r\nContent-Length: 2\r\n\r\n{}"
LIMITS = WireLimits(
    max_head_bytes=2048,
    max_header_bytes=512,
    max_body_bytes=4096,
    max_decoded_bytes=8192,
    max_line_bytes=256,
    max_event_bytes=1024,
)
DECODE_LIMITS = WireLimits(max_body_bytes=1 << 20, max_decoded_bytes=100_000, max_decode_ratio=20)
"""For the decoders alone: big enough for the decode-ratio check (from 64 KiB decoded) to bite."""


def fuzz_settings(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=timedelta(milliseconds=500),
        suppress_health_check=[HealthCheck.too_slow],
        # Neither shrinking nor the "explain" phase: on these byte strings they took minutes per
        # failure; a failure is reported as found (derandomized: the same one on every run).
        phases=[Phase.explicit, Phase.generate],
        print_blob=False,
    )


# -- driving a connection without a socket --------------------------------------------------------


class FakeTransport:
    """What ``_Connection`` uses of an asyncio transport."""

    def __init__(self) -> None:
        self.closed = False
        self.paused = False
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        assert not self.closed, "a request written on a closed transport"
        self.written.append(data)

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default

    def is_closing(self) -> bool:
        return self.closed


@dataclass
class Outcome:
    """A connection's state once the server's bytes were delivered and the connection ended."""

    conn: _Connection
    lane: H1Lane
    transport: FakeTransport
    reusable: bool  # what finish() would have decided before the connection ended
    peak_head: int = 0  # the most header bytes held at once (names and values)
    peak_field: int = 0  # the largest header field held
    peak_body: int = 0  # the most body bytes held at once
    waiter_done: bool = False
    body: bytes = b""  # the body bytes held when the connection ended (before any reader took them)

    @property
    def error(self) -> WireError | None:
        return self.conn.error

    def summary(self) -> tuple[object, ...]:
        """What a caller can observe of the answer (for comparing two ways of delivering it)."""
        conn = self.conn
        if conn.error is not None:
            return ("error",)
        return ("ok", conn.status, conn.keep_alive, conn.truncated, conn.coding, tuple(conn.raw_headers))


def held(conn: _Connection) -> tuple[int, int, int]:
    fields = [len(name) + len(value) for name, value in conn.raw_headers]
    return sum(fields), max(fields, default=0), sum(len(chunk) for chunk in conn.chunks)


async def open_connection(
    limits: WireLimits = LIMITS, *, streaming: bool = False
) -> tuple[H1Lane, _Connection, FakeTransport]:
    lane = H1Lane(asyncio.get_running_loop(), BASE_URL, None, max_idle=4, keepalive_expiry=4.0)
    conn = _Connection(lane)
    transport = FakeTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    lane.busy.add(conn)
    conn.start(REQUEST, 30.0, streaming, limits)
    assert transport.written == [REQUEST]
    return lane, conn, transport


def feed(outcome: Outcome, chunks: list[bytes]) -> None:
    conn, transport = outcome.conn, outcome.transport
    for chunk in chunks:
        if transport.closed:  # asyncio delivers nothing once the transport is closed
            break
        assert chunk
        conn.data_received(chunk)
        head, largest, body = held(conn)
        outcome.peak_head = max(outcome.peak_head, head)
        outcome.peak_field = max(outcome.peak_field, largest)
        outcome.peak_body = max(outcome.peak_body, body)


def end(outcome: Outcome, how: str) -> None:
    """The end of the connection: "eof" (the server closed it), "reset", or the client's own close
    (asyncio then reports a clean loss)."""
    conn = outcome.conn
    if outcome.transport.closed or how == "eof":
        if not outcome.transport.closed:
            assert not conn.eof_received()  # False: asyncio closes the transport
        conn.connection_lost(None)
    else:
        conn.connection_lost(ConnectionResetError(104, "Connection reset by peer"))


async def drive(
    chunks: list[bytes], *, how: str = "eof", streaming: bool = False, limits: WireLimits = LIMITS
) -> Outcome:
    lane, conn, transport = await open_connection(limits, streaming=streaming)
    waiter = conn.waiter
    assert waiter is not None
    outcome = Outcome(conn, lane, transport, reusable=False)
    feed(outcome, chunks)
    outcome.reusable = conn.complete and conn.keep_alive and conn.error is None and not transport.closed
    end(outcome, how)
    outcome.waiter_done = waiter.done()
    outcome.body = b"".join(conn.chunks)
    return outcome


def assert_sane(outcome: Outcome, limits: WireLimits = LIMITS) -> None:
    """What holds for any bytes whatsoever."""
    conn = outcome.conn
    assert outcome.waiter_done, "the request would wait forever"
    assert conn.complete != (conn.error is not None), (
        f"complete={conn.complete} with error={conn.error!r}: an answer is whole or failed, not both"
    )
    if conn.error is not None:
        assert isinstance(conn.error, WireError)
        assert conn.error.kind in (WireKind.DROPPED, WireKind.TOO_LARGE), conn.error
    else:
        assert 0 <= conn.status <= 999 and not 100 <= conn.status < 200  # an interim head is no answer
    assert outcome.peak_head <= limits.max_head_bytes, f"{outcome.peak_head} header bytes held"
    assert outcome.peak_field <= limits.max_header_bytes, f"a {outcome.peak_field}-byte header held"
    assert outcome.peak_body <= limits.max_body_bytes, f"{outcome.peak_body} body bytes held"
    assert conn.closed and conn.timer is None  # the read timer does not outlive the connection
    assert conn not in outcome.lane.idle and conn not in outcome.lane.busy


async def read_as_post(outcome: Outcome, limits: WireLimits = LIMITS) -> bytes | WireError:
    """The answer read the way ``H1Lane.post`` reads it: the body, or the request's failure."""
    conn = outcome.conn
    try:
        await conn.wait()
    except WireError as exc:
        assert exc is conn.error
        return exc
    assert conn.error is None and conn.complete
    data = outcome.body
    if conn.coding is not None:
        try:
            data = decode_body(data, conn.coding, limits)
        except WireError as exc:
            assert exc.kind in (WireKind.DECODE, WireKind.TOO_LARGE)
            return exc
        assert len(data) <= limits.max_decoded_bytes
    reply = H1Reply(conn.status, conn.raw_headers, data)
    headers = reply.headers
    assert headers.get("Retry-After") == headers.get("retry-after")
    assert ("content-type" in headers) == ("Content-Type" in headers)
    return data


async def read_as_stream(outcome: Outcome, limits: WireLimits = LIMITS) -> list[str] | WireError:
    """The answer read the way ``H1Stream.lines`` reads a stream: its lines, or its failure. A
    failed connection must never read as a stream that ended."""
    lines: list[str] = []
    try:
        async for line in H1Stream(outcome.conn).lines():
            assert len(line) <= limits.max_line_bytes
            lines.append(line)
    except WireError as exc:
        return exc
    assert outcome.conn.error is None, f"a stream that failed ({outcome.conn.error!r}) read as whole"
    return lines


def kind_of(outcome: Outcome) -> str:
    """How an answer ended, for hypothesis' statistics (``--hypothesis-show-statistics``)."""
    error = outcome.conn.error
    if error is not None:
        return f"failed: {error.kind.name} {error.name}"
    return "truncated answer" if outcome.conn.truncated else f"answer {outcome.conn.status // 100}xx"


def same(a: object, b: object) -> bool:
    """Equal results; two WireErrors are equal when their kind and message are."""
    if isinstance(a, WireError) and isinstance(b, WireError):
        return (a.kind, str(a)) == (b.kind, str(b))
    return a == b


async def check_reads(outcome: Outcome, streaming: bool) -> None:
    result = await (read_as_stream(outcome) if streaming else read_as_post(outcome))
    if outcome.conn.error is not None:
        assert isinstance(result, WireError)


# -- strategies -----------------------------------------------------------------------------------

TOKEN_CHARS = string.ascii_letters + string.digits + "-_"
NAMES = st.text(st.sampled_from(TOKEN_CHARS), min_size=1, max_size=24).map(lambda s: "X-" + s)
VALUE_CHARS = st.characters(min_codepoint=0x20, max_codepoint=0x7E)
SMALL_VALUES = st.text(VALUE_CHARS, max_size=40).map(str.strip)
BIG_VALUES = st.text(VALUE_CHARS, min_size=300, max_size=480).map(str.strip)  # each within 512
OVER_VALUES = st.text(VALUE_CHARS, min_size=520, max_size=600).map(str.strip)  # a field over 512
PAYLOADS = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda unit, n: unit * n, st.binary(min_size=1, max_size=16), st.integers(0, 400)),
    st.builds(lambda unit, n: unit * n, st.binary(min_size=8, max_size=16), st.integers(250, 700)),
)
STATUSES = st.sampled_from([200, 200, 201, 204, 206, 299, 301, 304, 400, 401, 404, 413, 429, 500, 503, 599])
INTERIM = st.sampled_from(
    [
        b"",
        b"",
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n",
    ]
)
BODILESS = (204, 304)
TRAILER = b"X-Trailer: done\r\n"
HEAD_SLACK = 8


@dataclass(frozen=True)
class Spec:
    """A valid HTTP/1.1 (or 1.0) response, and what reading it must give."""

    version: str
    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]
    interim: bytes
    connection: str | None
    framing: str  # "length", "chunked" or "close" (delimited by the end of the connection)
    chunk_sizes: tuple[int, ...]
    extensions: bool
    trailer: bool
    gzipped: bool
    payload: bytes

    @property
    def body(self) -> bytes:
        """The body as received (before its content-coding is undone)."""
        if self.status in BODILESS:
            return b""
        return gzip.compress(self.payload, mtime=0) if self.gzipped else self.payload

    @property
    def framed(self) -> bool:
        return self.framing != "close" or self.status in BODILESS

    def head(self) -> bytes:
        lines = [f"HTTP/{self.version} {self.status} {self.reason}".rstrip(" ")]
        lines += [f"{name}: {value}" for name, value in self.all_fields()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def all_fields(self) -> list[tuple[str, str]]:
        fields = list(self.headers)
        if self.connection is not None:
            fields.append(("Connection", self.connection))
        if self.gzipped and self.status not in BODILESS:
            fields.append(("Content-Encoding", "gzip"))
        if self.framing == "length":
            fields.append(("Content-Length", str(len(self.body))))
        elif self.framing == "chunked":
            fields.append(("Transfer-Encoding", "chunked"))
        return fields

    def wire(self) -> bytes:
        body = self.body
        if self.framing == "chunked":
            parts, at, i = [], 0, 0
            while at < len(body):
                size = self.chunk_sizes[i % len(self.chunk_sizes)]
                piece = body[at : at + size]
                ext = b";x=1" if self.extensions else b""
                parts.append(b"%x%s\r\n%s\r\n" % (len(piece), ext, piece))
                at += size
                i += 1
            trailer = TRAILER if self.trailer else b""
            body = b"".join(parts) + b"0\r\n" + trailer + b"\r\n"
        return self.interim + self.head() + body

    def too_large_head(self, limits: WireLimits) -> bool | None:
        """Whether the head must be refused (True), must pass (False), or may go either way (None):
        the reader counts the head as parsed, not as sent, so a few bytes either way of the limit
        and the trailer's fields (held with the headers) may count or not."""
        if any(len(n) + len(v) > limits.max_header_bytes for n, v in self.all_fields()):
            return True
        head = len(self.interim) + len(self.head())
        trailer = len(TRAILER) if self.framing == "chunked" and self.trailer else 0
        if head > limits.max_head_bytes + HEAD_SLACK:
            return True
        if head + trailer <= limits.max_head_bytes - HEAD_SLACK:
            return False
        return None

    @property
    def keep_alive(self) -> bool:
        if not self.framed:
            return False
        if self.version == "1.0":
            return self.connection == "keep-alive"
        return self.connection != "close"


@st.composite
def specs(draw: st.DrawFn, *, small: bool = False, framed: bool = False) -> Spec:
    """Valid responses; ``small``: within every limit; ``framed``: their end is in their bytes (a
    stray after them is not read as their body)."""
    status = draw(STATUSES)
    version = draw(st.sampled_from(["1.1", "1.1", "1.1", "1.0"]))
    framings = ["length", "chunked", "close"] if version == "1.1" else ["length", "close"]
    if status in BODILESS:
        framings = ["length", "close"]
    if framed and status not in BODILESS:
        framings.remove("close")
    headers = draw(st.lists(st.tuples(NAMES, SMALL_VALUES), max_size=6))
    if not small:
        # Sometimes enough big fields to pass max_head_bytes (2048), now and then one over 512.
        headers += draw(
            st.lists(st.tuples(NAMES, BIG_VALUES), max_size=draw(st.sampled_from([0, 0, 2, 4, 7])))
        )
        if draw(st.integers(0, 9)) == 0:
            headers.insert(draw(st.integers(0, len(headers))), (draw(NAMES), draw(OVER_VALUES)))
    return Spec(
        version=version,
        status=status,
        reason=draw(st.sampled_from(["OK", "", "Whatever", "Not Found", "Gateway Time-out"])),
        headers=tuple(headers),
        interim=draw(INTERIM),
        connection=draw(st.sampled_from([None, None, "keep-alive", "close"])),
        framing=draw(st.sampled_from(framings)),
        chunk_sizes=tuple(draw(st.lists(st.integers(1, 700), min_size=1, max_size=4))),
        extensions=draw(st.booleans()),
        trailer=draw(st.booleans()),
        gzipped=draw(st.booleans()),
        payload=draw(st.binary(max_size=1500) if small else PAYLOADS),
    )


@st.composite
def pieces(draw: st.DrawFn, data: bytes, max_pieces: int = 40) -> list[bytes]:
    """``data`` in reads of random sizes, tiny to large (never an empty one: asyncio delivers none)."""
    sizes = draw(st.lists(st.one_of(st.integers(1, 8), st.integers(1, 1000)), max_size=max_pieces - 1))
    out, at = [], 0
    for size in sizes:
        if at >= len(data):
            break
        out.append(data[at : at + size])
        at += size
    if at < len(data):
        out.append(data[at:])
    return out


TOKENS = [
    b"\r\n",
    b"\r\n\r\n",
    b":",
    b" ",
    b"\t",
    b"\x00",
    b"\xff\xfe",
    b"0\r\n\r\n",
    b"-1",
    b"HTTP/1.1 200 OK\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: upgrade\r\n\r\n",
    b"Content-Length: 5\r\n",
    b"Content-Length: 99999999999999999999\r\n",
    b"Transfer-Encoding: chunked\r\n",
    b"ffffffffffffffff\r\n",
    b"Connection: close\r\n",
    b"Content-Encoding: gzip\r\n",
    b"X-Long: " + b"v" * 600 + b"\r\n",
]


@st.composite
def mutations(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with 1 to 6 random edits (mostly one): flips, insertions of random bytes or of HTTP
    tokens, deletions, duplications, a cut."""
    out = bytearray(data)
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3, 6]))):
        op = draw(st.sampled_from(["flip", "insert", "token", "delete", "duplicate", "cut"]))
        n = len(out)
        at = draw(st.integers(0, n))
        if op == "flip" and n:
            out[min(at, n - 1)] ^= draw(st.integers(1, 255))
        elif op == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "token":
            out[at:at] = draw(st.sampled_from(TOKENS))
        elif op == "delete":
            del out[at : draw(st.integers(at, min(n, at + 32)))]
        elif op == "duplicate":
            stop = draw(st.integers(at, min(n, at + 64)))
            out[stop:stop] = out[at:stop]
        elif op == "cut":
            del out[at:]
    return bytes(out)


ENDS = st.sampled_from(["eof", "reset"])


# -- (a) random bytes -----------------------------------------------------------------------------


@fuzz_settings(250)
@given(
    data=st.one_of(
        st.binary(min_size=1, max_size=3000),
        st.binary(max_size=3000).map(lambda b: b"HTTP/1.1 200 OK\r\n" + b),
        st.binary(max_size=3000).map(lambda b: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b),
    ),
    how=ENDS,
    streaming=st.booleans(),
    draw=st.data(),
)
async def test_random_bytes_end_in_an_answer_or_a_wire_error_within_the_limits(
    data: bytes, how: str, streaming: bool, draw: st.DataObject
) -> None:
    outcome = await drive(draw.draw(pieces(data)), how=how, streaming=streaming)
    assert_sane(outcome)
    event(kind_of(outcome))
    await check_reads(outcome, streaming)


# -- valid responses: the oracle ------------------------------------------------------------------


@fuzz_settings(250)
@given(spec=specs(), how=ENDS, streaming=st.booleans(), draw=st.data())
async def test_a_valid_response_reads_as_its_bytes_say_however_it_is_split(
    spec: Spec, how: str, streaming: bool, draw: st.DataObject
) -> None:
    outcome = await drive(draw.draw(pieces(spec.wire())), how=how, streaming=streaming)
    assert_sane(outcome)
    event(kind_of(outcome))
    conn, body = outcome.conn, spec.body
    head_refused = spec.too_large_head(LIMITS)
    if head_refused:
        assert conn.error is not None and conn.error.kind is WireKind.TOO_LARGE, conn.error
    elif head_refused is None:
        pass  # within a few bytes of the head limit: either way, as long as it is sane
    elif len(body) > LIMITS.max_body_bytes and 200 <= spec.status < 300:
        assert conn.error is not None and conn.error.kind is WireKind.TOO_LARGE, conn.error
    elif len(body) > LIMITS.max_body_bytes:
        # An error status's body is cut, the status stands, the connection is not reused.
        assert conn.error is None and conn.status == spec.status and conn.truncated
        assert not conn.keep_alive and body.startswith(outcome.body)
    elif not spec.framed and how == "reset":
        assert conn.error is not None and conn.error.kind is WireKind.DROPPED  # not known to be whole
    else:
        assert conn.error is None and conn.complete, conn.error
        assert conn.status == spec.status and outcome.body == body
        assert conn.keep_alive is spec.keep_alive
        assert outcome.reusable is spec.keep_alive
        read = await (read_as_stream(outcome) if streaming else read_as_post(outcome))
        if spec.gzipped and spec.status not in BODILESS and not streaming:
            expected = spec.payload if len(spec.payload) <= LIMITS.max_decoded_bytes else None
            if expected is None:
                assert isinstance(read, WireError) and read.kind is WireKind.TOO_LARGE
            else:
                assert read == expected
        return
    await check_reads(outcome, streaming)


# -- (b) mutated responses ------------------------------------------------------------------------


@fuzz_settings(250)
@given(spec=specs(), how=ENDS, streaming=st.booleans(), draw=st.data())
async def test_a_mutated_response_fails_cleanly_and_reads_as_it_does_in_one_piece(
    spec: Spec, how: str, streaming: bool, draw: st.DataObject
) -> None:
    data = draw.draw(mutations(spec.wire()))
    split = await drive(draw.draw(pieces(data)), how=how, streaming=streaming)
    assert_sane(split)
    event(kind_of(split))
    await check_reads(split, streaming)
    # Delivered whole, the same bytes give the same answer (or fail too): how a network cuts a
    # response must not decide whether it is read, nor what it says.
    whole = await drive([data] if data else [], how=how, streaming=streaming)
    assert_sane(whole)
    assert split.summary() == whole.summary()
    if split.error is None:
        if split.conn.truncated:
            assert whole.body.startswith(split.body) or split.body.startswith(whole.body)
        else:
            assert split.body == whole.body


# -- (c) a valid response followed by stray bytes -------------------------------------------------


@fuzz_settings(150)
@given(
    first=specs(small=True, framed=True),
    second=specs(small=True),
    how=ENDS,
    streaming=st.booleans(),
    draw=st.data(),
)
async def test_stray_bytes_after_an_answer_leave_it_standing_and_the_connection_unused(
    first: Spec, second: Spec, how: str, streaming: bool, draw: st.DataObject
) -> None:
    answer = first.wire()
    stray = second.wire()[: draw.draw(st.integers(1, len(second.wire())))]
    # Part of the stray may arrive before the request takes the answer, the rest after.
    taken_at = draw.draw(st.integers(0, len(stray)))
    lane, conn, transport = await open_connection(streaming=streaming)
    outcome = Outcome(conn, lane, transport, reusable=False)
    feed(outcome, draw.draw(pieces(answer + stray[:taken_at])))
    assert conn.error is None, f"the answer failed: {conn.error!r}"
    assert conn.complete and conn.status == first.status and b"".join(conn.chunks) == first.body
    await conn.wait()  # what H1Lane.post awaits: the answer stands
    conn.finish()  # the request is done: back to the pool, if it may be reused
    feed(outcome, draw.draw(pieces(stray[taken_at:])))
    assert transport.closed and conn.closed, "a connection that received stray bytes was kept"
    assert conn not in lane.idle
    end(outcome, how)
    assert conn not in lane.idle and conn not in lane.busy


# -- the body's post-processing -------------------------------------------------------------------


def deflate_raw(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-15)
    return compressor.compress(data) + compressor.flush()


BOMB = st.builds(lambda n, byte: bytes([byte]) * n, st.integers(0, 300_000), st.integers(0, 255))
CODED = st.one_of(
    st.tuples(st.just("gzip"), st.one_of(PAYLOADS, BOMB).map(lambda p: gzip.compress(p, mtime=0))),
    st.tuples(st.just("deflate"), st.one_of(PAYLOADS, BOMB).map(zlib.compress)),
    st.tuples(st.just("deflate"), st.one_of(PAYLOADS, BOMB).map(deflate_raw)),
    st.tuples(st.sampled_from(["gzip", "x-gzip", "deflate", "identity", ""]), st.binary(max_size=2000)),
)
CODINGS = st.sampled_from(
    ["gzip", "x-gzip", " GZIP ", "deflate", "Deflate", "identity", "", "br", "gzip, gzip"]
)


@st.composite
def coded_bodies(draw: st.DrawFn) -> tuple[str, bytes]:
    """(content-coding, body): valid gzip/zlib/raw deflate (bombs too), random bytes, mutations."""
    coding, data = draw(CODED)
    if draw(st.booleans()):
        data = draw(mutations(data))
    if draw(st.integers(0, 3)) == 0:
        coding = draw(CODINGS)
    return coding, data


def decoded_within(data: bytes, received: int, limits: WireLimits) -> None:
    assert len(data) <= limits.max_decoded_bytes
    if len(data) > DECODE_RATIO_FLOOR:
        assert len(data) <= limits.max_decode_ratio * max(received, 1)


@fuzz_settings(300)
@given(coded=coded_bodies())
def test_decode_body_ends_within_the_limits_or_fails_cleanly(coded: tuple[str, bytes]) -> None:
    coding, data = coded
    try:
        out = decode_body(data, coding, DECODE_LIMITS)
    except WireError as exc:
        assert exc.kind in (WireKind.DECODE, WireKind.TOO_LARGE)
        return
    if coding.strip().lower() in ("", "identity"):
        assert out == data
    else:
        decoded_within(out, len(data), DECODE_LIMITS)


@fuzz_settings(200)
@given(payload=st.one_of(PAYLOADS, BOMB), coding=st.sampled_from(["gzip", "x-gzip", "deflate"]))
def test_decode_body_gives_back_what_was_encoded_or_too_large(payload: bytes, coding: str) -> None:
    data = gzip.compress(payload, mtime=0) if coding != "deflate" else zlib.compress(payload)
    try:
        out = decode_body(data, coding, DECODE_LIMITS)
    except WireError as exc:
        assert exc.kind is WireKind.TOO_LARGE
        assert len(payload) > DECODE_LIMITS.max_decoded_bytes or (
            len(payload) > DECODE_RATIO_FLOOR and len(payload) > DECODE_LIMITS.max_decode_ratio * len(data)
        )
        return
    assert out == payload


@fuzz_settings(200)
@given(coded=coded_bodies(), draw=st.data())
def test_body_decoder_ends_within_the_limits_and_agrees_with_decode_body(
    coded: tuple[str, bytes], draw: st.DataObject
) -> None:
    coding, data = coded
    limits = DECODE_LIMITS
    try:
        decoder = BodyDecoder(coding, limits)
    except WireError as exc:
        assert exc.kind is WireKind.DECODE
        with pytest.raises(WireError):
            decode_body(data, coding, limits)
        return
    out: list[bytes] = []
    failed: WireError | None = None
    for piece in draw.draw(pieces(data, max_pieces=20)):
        try:
            out.append(decoder.feed(piece))
        except WireError as exc:
            assert exc.kind in (WireKind.DECODE, WireKind.TOO_LARGE)
            failed = exc
            break
        decoded_within(b"".join(out), decoder.received, limits)
    if failed is not None or coding.strip().lower() == "deflate":
        # decode_body also takes raw deflate (no zlib header) for "deflate", BodyDecoder (and
        # H1Stream.lines) only zlib or gzip: the two differ there, so only the bounds hold.
        return
    try:
        decoder.end()
    except WireError as exc:  # a compressed body that ends early: neither reads it as a shorter one
        assert exc.kind is WireKind.DECODE
        with pytest.raises(WireError):
            decode_body(data, coding, limits)
        return
    # Fed in pieces or whole, the same bytes decode the same: the decoder checks the ratio on what
    # it has received so far (stricter), so whatever it accepted, decode_body accepts too.
    assert b"".join(out) == decode_body(data, coding, limits)


def reference_lines(data: bytes, max_line: int) -> list[str] | None:
    """What LineSplitter gives for ``data`` fed whole: lines, or None for LineTooLong."""
    parts = data.split(b"\n")
    if any(len(part) > max_line for part in parts):
        return None
    complete, rest = parts[:-1], parts[-1]
    lines = [part.decode("utf-8", "replace").rstrip("\r") for part in complete]
    return lines + ([rest.decode("utf-8", "replace").rstrip("\r")] if rest else [])


LINE_DATA = st.one_of(
    st.binary(max_size=2000),
    st.lists(
        st.one_of(
            st.text(max_size=80).map(str.encode),
            st.binary(max_size=300),
            st.sampled_from([b"\n", b"\r\n", b"\r", b"data: [DONE]\n\n", "é😀".encode()]),
        ),
        max_size=30,
    ).map(b"".join),
)


@fuzz_settings(250)
@given(data=LINE_DATA, max_line=st.sampled_from([1, 16, 64, 256]), draw=st.data())
def test_line_splitter_gives_the_same_bounded_lines_however_the_bytes_are_split(
    data: bytes, max_line: int, draw: st.DataObject
) -> None:
    expected = reference_lines(data, max_line)
    splitter = LineSplitter(max_line)
    lines: list[str] = []
    try:
        for piece in draw.draw(pieces(data)):
            lines += splitter.feed(piece)
        lines += splitter.end()
    except WireError as exc:
        assert exc.kind is WireKind.TOO_LARGE
        assert expected is None
        return
    finally:
        assert all(len(line) <= max_line for line in lines)
    assert lines == expected


# -- examples -------------------------------------------------------------------------------------

JSON_BODY = b'{"choices":[{"message":{"content":"{\\"User Safety\\": \\"safe\\"}"}}]}'
OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
    len(JSON_BODY),
    JSON_BODY,
)
GZ = gzip.compress(JSON_BODY, mtime=0)
EXAMPLES = {
    "content-length": OK,
    "chunked, extensions, trailer": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"".join(
            b"%x;ext=1\r\n%s\r\n" % (len(JSON_BODY[i : i + 7]), JSON_BODY[i : i + 7])
            for i in range(0, len(JSON_BODY), 7)
        )
        + b"0\r\nX-Trailer: done\r\n\r\n"
    ),
    "gzip": b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (len(GZ), GZ),
    "100 continue first": b"HTTP/1.1 100 Continue\r\n\r\n" + OK,
    "204": b"HTTP/1.1 204 No Content\r\nX-Request-Id: 7\r\n\r\n",
    "close-delimited": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + JSON_BODY,
    "HTTP/1.0": b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(JSON_BODY), JSON_BODY),
    "error status, body over the limit": b"HTTP/1.1 503 Unavailable\r\nContent-Length: 5000\r\n\r\n"
    + b"e" * 5000,
    "header over the limit": b"HTTP/1.1 200 OK\r\nX-Big: " + b"v" * 600 + b"\r\nContent-Length: 0\r\n\r\n",
    "broken status line": b"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n",
}


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("name", list(EXAMPLES))
async def test_a_response_split_byte_by_byte_reads_as_in_one_piece(name: str, streaming: bool) -> None:
    data = EXAMPLES[name]
    whole = await drive([data], streaming=streaming)
    bytewise = await drive([data[i : i + 1] for i in range(len(data))], streaming=streaming)
    for outcome in (whole, bytewise):
        assert_sane(outcome)
    assert bytewise.summary() == whole.summary()
    if name in ("header over the limit", "broken status line"):
        assert whole.error is not None
    elif name != "error status, body over the limit":
        assert whole.error is None
    if whole.error is not None:
        return  # failed both ways (summary): what was held of the body is dropped
    if whole.conn.truncated:
        # An error status's body is cut at a read's end: what is kept depends on the reads (but is
        # a start of the body, within max_body_bytes), the status does not.
        assert whole.body.startswith(bytewise.body) or bytewise.body.startswith(whole.body)
        return
    assert bytewise.body == whole.body
    assert same(await read_as_post(bytewise), await read_as_post(whole))


async def test_a_stray_response_behind_a_keep_alive_answer_leaves_it_standing_and_unused() -> None:
    outcome = await drive([OK + OK], how="eof")
    assert_sane(outcome)
    assert outcome.conn.status == 200 and outcome.body == JSON_BODY and not outcome.reusable
    assert await read_as_post(outcome) == JSON_BODY


async def test_bytes_after_a_taken_answer_close_the_idle_connection() -> None:
    lane, conn, transport = await open_connection()
    conn.data_received(OK)
    await conn.wait()
    conn.finish()
    assert conn in lane.idle  # a keep-alive answer read whole: reusable
    conn.data_received(b"HTTP/1.1 408 Request Timeout\r\n")
    assert transport.closed and conn not in lane.idle


async def test_a_close_delimited_body_is_whole_on_a_clean_close_only() -> None:
    data = EXAMPLES["close-delimited"]
    clean = await drive([data], how="eof")
    reset = await drive([data], how="reset")
    assert clean.error is None and clean.body == JSON_BODY and not clean.reusable
    assert reset.error is not None and reset.error.kind is WireKind.DROPPED


async def test_a_protocol_switch_is_a_dropped_connection() -> None:
    data = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: upgrade\r\n\r\n\x00\x00\x12"
    outcome = await drive([data])
    assert_sane(outcome)
    assert outcome.error is not None and outcome.error.name == "UnexpectedUpgrade"


async def test_a_gzip_bomb_is_cut_at_max_decoded_bytes() -> None:
    bomb = gzip.compress(b"\0" * (16 << 20), mtime=0)  # 16 MiB from ~16 KB
    with pytest.raises(WireError) as info:
        decode_body(bomb, "gzip", LIMITS)
    assert info.value.kind is WireKind.TOO_LARGE
    decoder = BodyDecoder("gzip", DECODE_LIMITS)
    with pytest.raises(WireError) as info:
        for i in range(0, len(bomb), 4096):
            decoder.feed(bomb[i : i + 4096])
    assert info.value.kind is WireKind.TOO_LARGE and decoder.decoded <= DECODE_LIMITS.max_decoded_bytes + 1


# -- regressions: what the fuzzing found at 18152c2 (guardcache/llm/h1_pool.py) ----------------------

CLOSE_ANSWER = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (
    len(JSON_BODY),
    JSON_BODY,
)


@pytest.mark.parametrize(
    "data",
    [
        CLOSE_ANSWER + OK,  # a stray second response
        CLOSE_ANSWER + b"junk",
        EXAMPLES["HTTP/1.0"] + OK,  # HTTP/1.0: not kept alive either
    ],
    ids=["close+response", "close+junk", "http/1.0+response"],
)
async def test_bytes_after_an_answer_that_closes_the_connection_do_not_fail_it(data: bytes) -> None:
    """llhttp reports bytes after a ``Connection: close`` (or HTTP/1.0) answer as a parse error of
    its own, without beginning a message (no ``on_message_begin``, so no ``_Stop``). At 18152c2
    ``data_received`` turned any such error into a ``DROPPED`` failure although the answer was
    complete: over a socket the answer was lost and the call retried as a dropped connection, three
    times, then failed as an outage, so an "unsafe" verdict became an outage that ``on_error: allow``
    lets through."""
    outcome = await drive([data])
    assert outcome.conn.complete
    assert outcome.error is None, f"a complete answer failed: {outcome.error!r}"
    assert not outcome.reusable
    assert await read_as_post(outcome) == JSON_BODY


async def test_a_stray_response_arriving_in_two_reads_does_not_fail_the_answer() -> None:
    """The first read holds the answer and the stray's start (``_Stop``: the answer stands); the
    parser then stays in its error state, and at 18152c2 a second read delivered before the request
    took the answer failed the complete answer (``HttpParserCallbackError``)."""
    outcome = await drive([OK + OK[:5], OK[5:]])
    assert outcome.conn.complete and not outcome.reusable
    assert outcome.error is None, f"a complete answer failed: {outcome.error!r}"


FIELDS = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"v" * 400) for i in range(20))  # ~8.3 KB
BIG_HEAD = b"HTTP/1.1 200 OK\r\n" + FIELDS + b"Content-Length: 2\r\n\r\n{}"
INTERIMS = b"HTTP/1.1 100 Continue\r\n\r\n" * 200 + OK  # 5 KB of small interim heads
HEAD_READS = {
    "one read": [BIG_HEAD],
    "two reads": [BIG_HEAD[:1000], BIG_HEAD[1000:]],  # under the limit, then the rest at once
    "100-byte reads": [BIG_HEAD[i : i + 100] for i in range(0, len(BIG_HEAD), 100)],
    "interim heads in one read": [INTERIMS],
}


@pytest.mark.parametrize("name", list(HEAD_READS))
async def test_a_head_over_max_head_bytes_fails_however_it_arrives(name: str) -> None:
    """At 18152c2 ``data_received`` counted the head only while it was still incomplete after a
    read: the read that completes a head was never counted, so a head of any size (up to a read:
    256 KiB from asyncio; over real sockets an 80 KB head passed the default 64 KiB) that ended in
    the read crossing the limit was accepted and held whole."""
    outcome = await drive(HEAD_READS[name])
    assert outcome.error is not None and outcome.error.kind is WireKind.TOO_LARGE, (
        f"a {sum(map(len, HEAD_READS[name]))}-byte head read with max_head_bytes="
        f"{LIMITS.max_head_bytes}: {outcome.peak_head} header bytes held"
    )
    assert outcome.peak_head <= LIMITS.max_head_bytes


async def test_a_stream_failed_at_max_body_bytes_is_not_read_as_ended() -> None:
    """A close-delimited stream over ``max_body_bytes``: ``on_body`` fails the connection and closes
    it. At 18152c2 the clean ``connection_lost(None)`` that follows completed the "body delimited by
    the end of the connection" (``complete`` set beside ``error``), and ``H1Stream.lines`` (and
    ``read``), which look at ``complete`` before waiting, ended as if the stream were whole whenever
    the reader was not parked in ``wait()`` at that moment (e.g. busy handing on earlier lines)."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
    events = b"data: {}\n\n" * 300  # 3000 bytes: the second read passes max_body_bytes (4096)
    outcome = await drive([head, events, events], streaming=True)
    assert outcome.error is not None and outcome.error.kind is WireKind.TOO_LARGE
    lines: list[str] = []
    with pytest.raises(WireError):
        async for line in H1Stream(outcome.conn).lines():
            lines.append(line)
    assert len(lines) <= 600  # the events held before the limit may be read first
    assert not outcome.conn.complete, "a failed stream is marked complete"
