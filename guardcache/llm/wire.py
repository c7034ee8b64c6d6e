"""The bytes on the wire, the same for every transport: JSON bodies out and in, a body's
content-coding undone within its limits, an event stream's lines.

Why shared: a hostile or broken server (or a proxy in between) must cost the same bounded memory and
time whichever transport reads it, and fail with the same
:class:`~guardcache.llm.transport_contract.WireError` kind, so each transport hands its raw bytes to
these instead of decoding them its own way. The JSON
writer is also ``guardcache serve``'s: every JSON value the server sends goes through
:func:`dumps_body`.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from typing import Any

from guardcache.llm.transport_contract import WireError, WireKind, WireLimits

try:  # faster than json for request and response bodies; installed with the ``server`` extra
    import orjson

    def dumps_body(body: Any) -> bytes:
        """A body (a request's, or ``guardcache serve``'s answer) as compact UTF-8 JSON."""
        return orjson.dumps(body)

    def loads_body(data: bytes | str) -> Any:
        """A response body's JSON; ``ValueError`` when it is not JSON."""
        return orjson.loads(data)

except ImportError:  # pragma: no cover - depends on the environment

    def dumps_body(body: Any) -> bytes:
        """A body (a request's, or ``guardcache serve``'s answer) as compact UTF-8 JSON."""
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()

    def loads_body(data: bytes | str) -> Any:
        """A response body's JSON; ``ValueError`` when it is not JSON."""
        return json.loads(data)


DECODE_RATIO_FLOOR = 64 * 1024
"""Decoded bytes below which the decode ratio is not checked (small bodies compress well)."""


def decode_body(body: bytes, coding: str, limits: WireLimits) -> bytes:
    """Undo a ``Content-Encoding`` (gzip, x-gzip, deflate: zlib or raw), within the limits.

    Inflates at most ``max_decoded_bytes + 1`` bytes, so a bomb costs bounded memory and time.

    Raises:
        WireError: ``DECODE`` for an unknown or broken coding, ``TOO_LARGE`` past a limit.
    """
    coding = coding.strip().lower()
    if coding in ("", "identity"):
        return body
    if coding not in ("gzip", "x-gzip", "deflate"):
        raise WireError(WireKind.DECODE, "ContentDecodingError", f"unsupported content-encoding {coding!r}")
    for wbits in (47, -15) if coding == "deflate" else (47,):  # gzip or zlib by header; raw deflate
        inflater = zlib.decompressobj(wbits)
        try:
            data = inflater.decompress(body, limits.max_decoded_bytes + 1)
        except zlib.error:
            continue
        check_decoded(len(data), len(body), limits)
        if not inflater.eof:  # a cut body must not decode to a shorter answer
            raise WireError(WireKind.DECODE, "ContentDecodingError", "the compressed body ends early")
        return data
    raise WireError(WireKind.DECODE, "ContentDecodingError")


def check_decoded(decoded: int, received: int, limits: WireLimits) -> None:
    """Raise ``TOO_LARGE`` when ``decoded`` bytes from ``received`` pass a decoding limit."""
    if decoded > limits.max_decoded_bytes:
        raise WireError(
            WireKind.TOO_LARGE, "BodyTooLarge", f"decoded body over {limits.max_decoded_bytes} bytes"
        )
    if decoded > DECODE_RATIO_FLOOR and decoded > limits.max_decode_ratio * max(received, 1):
        raise WireError(WireKind.TOO_LARGE, "DecodeRatio", f"body inflates over {limits.max_decode_ratio}x")


class BodyDecoder:
    """A body's bytes as received in, decoded bytes out, within ``limits`` (size, decoded size and
    ratio): for transports that hand over raw chunks. Inflates at most what the limit leaves, so a
    bomb stops after ``max_decoded_bytes``.

    Raises:
        WireError: ``DECODE`` for an unknown or broken coding, ``TOO_LARGE`` past a limit.
    """

    __slots__ = ("decoded", "inflater", "limits", "received")

    def __init__(self, coding: str | None, limits: WireLimits) -> None:
        self.limits = limits
        self.received = self.decoded = 0
        name = (coding or "identity").strip().lower()
        if name in ("", "identity"):
            self.inflater = None
        elif name in ("gzip", "x-gzip", "deflate"):
            self.inflater = zlib.decompressobj(47)
        else:
            raise WireError(WireKind.DECODE, "ContentDecodingError", f"unsupported content-encoding {name!r}")

    def feed(self, data: bytes) -> bytes:
        limits = self.limits
        self.received += len(data)
        if self.received > limits.max_body_bytes:
            raise WireError(WireKind.TOO_LARGE, "BodyTooLarge", f"over {limits.max_body_bytes} bytes")
        if self.inflater is None:
            self.decoded += len(data)
            return data
        try:
            out = self.inflater.decompress(data, limits.max_decoded_bytes - self.decoded + 1)
        except zlib.error:
            raise WireError(WireKind.DECODE, "ContentDecodingError") from None
        self.decoded += len(out)
        check_decoded(self.decoded, self.received, limits)
        return out

    def end(self) -> None:
        """At the body's end: a compressed body that ends early must not read as a shorter one."""
        if self.inflater is not None and not self.inflater.eof:
            raise WireError(WireKind.DECODE, "ContentDecodingError", "the compressed body ends early")


class LineSplitter:
    """Bytes in, lines out (without their line ends), each line at most ``max_line`` bytes.

    One per stream; shared by every transport so an endless line fails the same way on each.

    The unfinished line is kept in the pieces it came in, joined once when its end arrives: joining
    (and searching) all of it again at every read was quadratic, so a 1 MiB line dripped in 10-byte
    reads cost ~3 s of a blocked event loop.
    """

    __slots__ = ("max_line", "rest", "size")

    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self.rest: list[bytes] = []  # the unfinished line's pieces
        self.size = 0  # their length

    def feed(self, data: bytes) -> list[str]:
        """The lines completed by ``data``; raises ``TOO_LARGE`` when a line passes the limit."""
        if b"\n" not in data:
            self.size += len(data)
            if self.size > self.max_line:
                raise WireError(WireKind.TOO_LARGE, "LineTooLong", f"a line over {self.max_line} bytes")
            if data:
                self.rest.append(data)
            return []
        if self.rest:
            self.rest.append(data)
            data = b"".join(self.rest)
        *complete, rest = data.split(b"\n")
        self.rest = [rest] if rest else []
        self.size = len(rest)
        # No line is longer than all of them together: the common case checks nothing per line.
        if len(data) > self.max_line and max(self.size, *map(len, complete)) > self.max_line:
            raise WireError(WireKind.TOO_LARGE, "LineTooLong", f"a line over {self.max_line} bytes")
        return [line.decode("utf-8", "replace").rstrip("\r") for line in complete]

    def end(self) -> list[str]:
        """The last line, when the body did not end with a line end."""
        rest = b"".join(self.rest)
        self.rest, self.size = [], 0
        return [rest.decode("utf-8", "replace").rstrip("\r")] if rest else []


class BodyReply:
    """A whole response read by a transport: status, headers and body bytes (a
    :class:`~guardcache.llm.transport_contract.Reply`)."""

    __slots__ = ("body", "headers", "status_code")

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status_code = status
        self.headers = headers
        self.body = body

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON; ``ValueError`` when it is not (orjson's error is one)."""
        return loads_body(self.body)


__all__ = [
    "DECODE_RATIO_FLOOR",
    "BodyDecoder",
    "BodyReply",
    "LineSplitter",
    "check_decoded",
    "decode_body",
    "dumps_body",
    "loads_body",
]
