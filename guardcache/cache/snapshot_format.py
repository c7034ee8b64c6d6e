"""The snapshot file's bytes: a :class:`~guardcache.cache.policy.PolicyState` and the identity of the
cache it belongs to, signed with HMAC-SHA256. No I/O here (:mod:`~guardcache.cache.snapshot` reads
and writes files).

Why this format and not pickle, JSON or the Redis codec's envelopes: a snapshot is read at start by
a process that will serve its verdicts, so reading must never run code (pickle does) and a file
anyone but the key's holder made must plant nothing. Everything after the preamble is trusted only
once the tag over the whole file checked (:func:`decode` verifies before it parses a single field);
the preamble's three fields are compared, never used to parse, and only to say *why* a file was
refused (a foreign file, another format version, a truncated write). Columns, not records: each
column is one ``array`` written and read in one C call, which is what makes 50,000 entries a few
hundred milliseconds (``benchmarks/bench_snapshot.py``); values go through the caller's codec
(guardcache's checks give :mod:`guardcache.checks.codec`), each distinct value object once (checks
intern their values, so typical traffic has a few hundred distinct ones).

Layout (integers little-endian)::

    magic "GCSNAP\\r\\n" | format u16 | total length u64          preamble (inside the tag too)
    header length u32 | header (UTF-8 JSON: identity, policy, maxsize, written_at, entries)
    n u32 | key lengths u16[n] | keys | distinct values m u32 | value lengths u32[m] | values
    value index u32[n] | created f64[n] | accessed f64[n] | frequency u64[n] | segment u8[n]
    extras: count u16, each: name length u8 | name | kind "i" (i64) "f" (f64) "b" (u32 + bytes)
    tag: HMAC-SHA256(subkey, everything before it), 32 bytes

The subkey is ``HMAC(key, "guardcache/snapshot/v1")``: the operator's key is never used directly,
so the same secret given to another use (the Redis tier's) yields unrelated tags.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
import sys
from array import array
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from guardcache.cache.policy import PolicyState

MAGIC = b"GCSNAP\r\n"
FORMAT_VERSION = 1
TAG_BYTES = 32
MIN_KEY_BYTES = 16
#: The longest key or encoded value a snapshot holds (guardcache's keys are 32 bytes, a verdict's
#: bytes ~100): anything longer is left out of the file, and bounds what reading may expect.
MAX_KEY_BYTES = 255
MAX_VALUE_BYTES = 4096
#: Bytes a file may take per entry of the reading cache's maxsize (key, value, columns, and the
#: TinyLFU sketch's 16-32 counters an entry), plus a fixed allowance for the header and extras.
BYTES_PER_ENTRY = MAX_KEY_BYTES + MAX_VALUE_BYTES + 64
FIXED_BYTES = 1 << 16

_PREAMBLE = struct.Struct("<8sHQ")
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_LABEL = b"guardcache/snapshot/v1"
_BIG = sys.byteorder == "big"


class SnapshotError(ValueError):
    """A file that is not loaded; ``str()`` says why, in words fit for the one WARNING line."""


def subkey(key: bytes) -> bytes:
    """The signing key derived from the operator's (domain separation, see the module doc)."""
    return hmac.new(key, _LABEL, hashlib.sha256).digest()


def max_file_bytes(maxsize: int) -> int:
    """The largest file a cache of ``maxsize`` entries reads: bounded before a byte is read."""
    return FIXED_BYTES + maxsize * BYTES_PER_ENTRY


def _column(typecode: str, values: Any) -> bytes:
    a = array(typecode, values)
    if _BIG:
        a.byteswap()
    return a.tobytes()


def _read_column(typecode: str, data: memoryview, n: int) -> array[Any]:
    a = array(typecode)
    size = a.itemsize * n
    if len(data) < size:
        raise SnapshotError("malformed: a column runs past the end")
    a.frombytes(data[:size])
    if _BIG:
        a.byteswap()
    return a


def encode(
    state: PolicyState,
    identity: Mapping[str, Any],
    key: bytes,
    encode_value: Callable[[Any], bytes],
    written_at: float,
) -> tuple[bytes, int]:
    """The signed file of ``state`` and how many entries it holds (entries whose key is not bytes,
    or whose key or value is too long, or that the codec cannot encode, are left out)."""
    codes: dict[int, int] = {}  # id(value) -> its index among the distinct values
    blobs: list[bytes] = []
    keys: list[bytes] = []
    picks: list[int] = []
    value_index: list[int] = []
    for k, (entry_key, value) in enumerate(zip(state.keys, state.values, strict=True)):
        if not isinstance(entry_key, bytes) or len(entry_key) > MAX_KEY_BYTES:
            continue
        code = codes.get(id(value))
        if code is None:
            try:
                blob = encode_value(value)
            except Exception:  # a value the codec cannot write stays out of the file
                continue
            if not isinstance(blob, bytes) or len(blob) > MAX_VALUE_BYTES:
                continue
            code = codes[id(value)] = len(blobs)
            blobs.append(blob)
        keys.append(entry_key)
        picks.append(k)
        value_index.append(code)
    n = len(picks)
    header = json.dumps(
        {
            **identity,
            "policy": state.policy,
            "maxsize": state.maxsize,
            "written_at": written_at,
            "entries": n,
        },
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode("utf-8")
    every = n == len(state.keys)
    parts = [
        b"",  # the preamble, once the length is known
        _U32.pack(len(header)),
        header,
        _U32.pack(n),
        _column("H", [len(k) for k in keys]),
        b"".join(keys),
        _U32.pack(len(blobs)),
        _column("I", [len(b) for b in blobs]),
        b"".join(blobs),
        _column("I", value_index),
        _column("d", state.created if every else [state.created[k] for k in picks]),
        _column("d", state.accessed if every else [state.accessed[k] for k in picks]),
        _column(
            "Q",
            [
                min(f, (1 << 64) - 1)
                for f in (state.frequency if every else (state.frequency[k] for k in picks))
            ],
        ),
        state.segment if every else bytes(state.segment[k] for k in picks),
        _extras(state.extra),
    ]
    total = _PREAMBLE.size + sum(len(p) for p in parts) + TAG_BYTES
    parts[0] = _PREAMBLE.pack(MAGIC, FORMAT_VERSION, total)
    body = b"".join(parts)
    return body + hmac.new(subkey(key), body, hashlib.sha256).digest(), n


def _extras(extra: Mapping[str, int | float | bytes]) -> bytes:
    out = [_U16.pack(len(extra))]
    for name, value in extra.items():
        raw = name.encode("utf-8")
        out.append(bytes([len(raw)]) + raw)
        if isinstance(value, bytes):
            out.append(b"b" + _U32.pack(len(value)) + value)
        elif isinstance(value, float):
            out.append(b"f" + _F64.pack(value))
        else:
            out.append(b"i" + _I64.pack(int(value)))
    return b"".join(out)


def check_preamble(data: bytes, size: int) -> None:
    """Why ``data`` (the first bytes of a file of ``size`` bytes) is no snapshot this code reads, as
    a :class:`SnapshotError`; nothing when it may be one (the tag decides)."""
    if len(data) < _PREAMBLE.size or not data.startswith(MAGIC):
        raise SnapshotError("not a guardcache snapshot (a foreign file)")
    _, version, total = _PREAMBLE.unpack_from(data)
    if version != FORMAT_VERSION:
        raise SnapshotError(
            f"written in snapshot format {version}; this guardcache reads format {FORMAT_VERSION}"
        )
    if size < total:
        raise SnapshotError(f"truncated: {size} of its {total} bytes")
    if size != total:
        raise SnapshotError(f"{size - total} bytes after its end (not written by guardcache)")


def verify(data: bytes, key: bytes) -> memoryview:
    """The signed part of ``data`` once its tag checks, else a :class:`SnapshotError`."""
    check_preamble(data, len(data))
    body = memoryview(data)[: len(data) - TAG_BYTES]
    tag = hmac.new(subkey(key), body, hashlib.sha256).digest()
    if not hmac.compare_digest(tag, data[len(data) - TAG_BYTES :]):
        raise SnapshotError("its signature does not match: the file was modified, or signed with another key")
    return body


def decode(
    data: bytes, key: bytes, decode_value: Callable[[bytes], Any]
) -> tuple[dict[str, Any], PolicyState, int]:
    """The header, the state and how many entries the codec could not read (left out), of a file
    whose tag checks; :class:`SnapshotError` otherwise. Nothing is parsed before the tag checked."""
    body = verify(data, key)
    try:
        return _parse(body[_PREAMBLE.size :], decode_value)
    except SnapshotError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, struct.error, UnicodeDecodeError) as exc:
        # Signed by the key's holder, yet unreadable: a writer of another build sharing the key.
        raise SnapshotError(f"malformed ({exc})") from None


def _parse(view: memoryview, decode_value: Callable[[bytes], Any]) -> tuple[dict[str, Any], PolicyState, int]:
    pos = 0

    def take(size: int) -> memoryview:
        nonlocal pos
        if size < 0 or pos + size > len(view):
            raise SnapshotError("malformed: a field runs past the end")
        part = view[pos : pos + size]
        pos += size
        return part

    (header_len,) = _U32.unpack(take(4))
    header = json.loads(bytes(take(header_len)).decode("utf-8"))
    if not isinstance(header, dict):
        raise SnapshotError("malformed: the header is not an object")
    (n,) = _U32.unpack(take(4))
    key_lengths = _read_column("H", view[pos:], n)
    pos += 2 * n
    keys: list[Hashable] = []
    blob = take(sum(key_lengths))
    at = 0
    for length in key_lengths:
        keys.append(bytes(blob[at : at + length]))
        at += length
    (m,) = _U32.unpack(take(4))
    value_lengths = _read_column("I", view[pos:], m)
    pos += 4 * m
    blob = take(sum(value_lengths))
    distinct: list[Any] = []
    at = 0
    for length in value_lengths:
        try:
            distinct.append(decode_value(bytes(blob[at : at + length])))
        except Exception:  # a codec that raises reads nothing: the entry is left out
            distinct.append(None)
        at += length
    value_index = _read_column("I", view[pos:], n)
    pos += 4 * n
    created = _read_column("d", view[pos:], n)
    pos += 8 * n
    accessed = _read_column("d", view[pos:], n)
    pos += 8 * n
    frequency = _read_column("Q", view[pos:], n).tolist()
    pos += 8 * n
    segment = bytes(take(n))
    (count,) = _U16.unpack(take(2))
    extra: dict[str, int | float | bytes] = {}
    for _ in range(count):
        name = bytes(take(take(1)[0])).decode("utf-8")
        kind = bytes(take(1))
        if kind == b"b":
            (length,) = _U32.unpack(take(4))
            extra[name] = bytes(take(length))
        elif kind == b"f":
            extra[name] = _F64.unpack(take(8))[0]
        elif kind == b"i":
            extra[name] = _I64.unpack(take(8))[0]
        else:
            raise SnapshotError(f"malformed: an extra of unknown kind {kind!r}")
    if pos != len(view):
        raise SnapshotError("malformed: bytes left after the last field")
    if any(i >= m for i in value_index):
        raise SnapshotError("malformed: a value index out of range")
    values = [distinct[i] for i in value_index]
    # An entry whose value the codec no longer reads (its version changed) is left out.
    unreadable = [k for k, v in enumerate(values) if v is None]
    state = PolicyState(
        policy=str(header.get("policy", "")),
        maxsize=int(header.get("maxsize", 0)),
        keys=keys,
        values=values,
        created=created,
        accessed=accessed,
        frequency=frequency,
        segment=segment,
        extra=extra,
    )
    if unreadable:
        state = _without(state, set(unreadable))
    return header, state, len(unreadable)


def _without(state: PolicyState, drop: set[int]) -> PolicyState:
    keep = [k for k in range(len(state.keys)) if k not in drop]
    return state._replace(
        keys=[state.keys[k] for k in keep],
        values=[state.values[k] for k in keep],
        created=array("d", [state.created[k] for k in keep]),
        accessed=array("d", [state.accessed[k] for k in keep]),
        frequency=[state.frequency[k] for k in keep],
        segment=bytes(state.segment[k] for k in keep),
    )


__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "MIN_KEY_BYTES",
    "SnapshotError",
    "check_preamble",
    "decode",
    "encode",
    "max_file_bytes",
    "subkey",
    "verify",
]
