"""Cache keys: whitespace normalization and fixed-size digests.

A key is ``blake2b(namespace digest || kind || normalized prompt)``, 32 bytes (or, for several texts,
``|| "f" || (length || normalized text)...``). The namespace holds
everything that changes the answer besides the prompt (model type and name, the template's
fingerprint, generation parameters, and the operator's ``cache.version`` when set), so changing any
of them can never serve an old verdict. Keys are
digests, never the prompt: entries stay small and no user text is kept in a cache or sent to Redis.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

KEY_SIZE = 32

Prompt = str | Sequence[Mapping[str, Any]]


_HSPACE = re.compile(r"[ \t\f\v]+")
_BLANK_LINES = re.compile(r"\n{3,}")


def normalize_text(text: str) -> str:
    """Fold layout-only differences: ASCII space/tab runs, line endings, blank-line runs, the ends.

    Runs of spaces, tabs, form feeds and vertical tabs become one space; CRLF and CR become LF;
    spaces next to a line break go; three or more line breaks become two; the ends are stripped.
    Nothing else changes: NBSP, U+2028, the C0 separators ``\\x1c``-``\\x1f``, ``\\x85``,
    zero-width characters stay as they are, because a model may read them differently from a space
    (folding them let one user's "cook\\u00a0drugs", judged safe, answer for "cook drugs"). The
    checks send the model the normalized text, so a key always stands for exactly what was judged.
    Idempotent.
    """
    # Anything it would change? Most texts have nothing, and asking is cheaper than the work. Eight
    # substring scans (memchr-fast): 4-6x cheaper than one search of the regex of the same cases,
    # ``[\t\r\f\v]|  |\n\n\n| \n|\n |^[ \n]|[ \n]\Z``, which tests every alternative at every
    # position (tests/unit/test_cache_keys.py holds the two to the same answer).
    if not (
        "  " in text
        or " \n" in text
        or "\n " in text
        or "\n\n\n" in text
        or "\t" in text
        or "\r" in text
        or "\f" in text
        or "\v" in text
        or text[:1] in _ENDS
        or text[-1:] in _ENDS
    ):
        return text
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _HSPACE.sub(" ", text).replace(" \n", "\n").replace("\n ", "\n")
    return _BLANK_LINES.sub("\n\n", text).strip(" \n")


_ENDS = (" ", "\n")


def normalize_messages(messages: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(role, normalized content) pairs; content is normalized exactly like a string prompt."""
    out: list[tuple[str, str]] = []
    for message in messages:
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
        out.append((str(message.get("role", "user")), normalize_text(text)))
    return out


def _canonical(prompt: Prompt) -> bytes:
    if isinstance(prompt, str):
        return b"s\x00" + normalize_text(prompt).encode("utf-8")
    pairs = normalize_messages(prompt)
    return b"m\x00" + json.dumps(pairs, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True, slots=True)
class Namespace:
    """What, besides the prompt, decides a cached answer. Its digest prefixes every key."""

    model_type: str
    model: str
    template: str = ""
    params: tuple[tuple[str, str], ...] = ()
    # The operator's name for the guard's behaviour (cache.version): what changes when the model
    # behind the same name, or its policy, does. Only a set version is digested, so a namespace
    # without one is byte-identical to those before versions existed (existing Redis entries stay
    # reachable after an upgrade of guardcache).
    version: str | None = None
    digest: bytes = field(init=False, repr=False, compare=False)
    # The hash state after the digest and the fields kind: each key copies it (cheaper than a new
    # keyed hash and its first update, ~0.25 us a key), so a key is the same bytes as before.
    _fields_start: hashlib.blake2b = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parts: list[Any] = [self.model_type, self.model, self.template, list(self.params)]
        if self.version is not None:
            parts.append(["version", self.version])
        blob = json.dumps(parts, separators=(",", ":"), ensure_ascii=False)
        digest = hashlib.blake2b(blob.encode(), digest_size=16).digest()
        object.__setattr__(self, "digest", digest)
        object.__setattr__(self, "_fields_start", _fields_hash(digest))

    @classmethod
    def of(
        cls,
        model_type: str,
        model: str,
        template: str = "",
        params: Mapping[str, Any] | None = None,
        *,
        version: str | None = None,
    ) -> Namespace:
        """Build one from a parameter mapping (order-insensitive, values compared as JSON)."""
        items = tuple(sorted((str(k), json.dumps(v, sort_keys=True)) for k, v in (params or {}).items()))
        return cls(model_type, model, template, items, version)

    @property
    def tag(self) -> str:
        """A short printable id, e.g. for Redis key prefixes and log lines."""
        return self.digest.hex()[:16]

    def key(self, prompt: Prompt) -> bytes:
        """The cache key of ``prompt`` in this namespace."""
        return make_key(self.digest, prompt)

    def key_fields(self, fields: Sequence[str]) -> bytes:
        """The cache key of several texts, in order (e.g. a template's variables)."""
        return make_fields_key(self.digest, fields)

    def fields_hash(self) -> hashlib.blake2b:
        """A fresh hash of :func:`digest_fields` under this namespace, before its first field: a
        caller feeding it fields itself (``len(data).to_bytes(8, "little")`` then ``data``, each)
        gets the same key as :meth:`digest_fields`."""
        return self._fields_start.copy()

    def digest_fields(self, fields: Sequence[str]) -> bytes:
        """:func:`digest_fields` under this namespace (texts already normalized): the checks' key."""
        return _fed(self._fields_start.copy(), fields)


def make_key(namespace: bytes, prompt: Prompt) -> bytes:
    """A 32-byte key for ``prompt`` (a string or chat messages) under a namespace digest."""
    h = hashlib.blake2b(namespace, digest_size=KEY_SIZE)
    h.update(b"\x00")
    h.update(_canonical(prompt))
    return h.digest()


def make_fields_key(namespace: bytes, fields: Sequence[str]) -> bytes:
    """A 32-byte key for an ordered sequence of texts, each normalized like a string prompt.

    Each field is length-prefixed, so no choice of texts can shift a boundary (("a b", "c") and
    ("a", "b c") differ), and the kind byte keeps these keys apart from :func:`make_key`'s. This is
    the two-variable checks' key (user input and bot response): ~4x cheaper than JSON-encoding
    them as messages.
    """
    return digest_fields(namespace, [normalize_text(text) for text in fields])


def _fields_hash(namespace: bytes) -> hashlib.blake2b:
    """The keyed hash of :func:`digest_fields` before its first field."""
    h = hashlib.blake2b(namespace, digest_size=KEY_SIZE)
    h.update(b"\x00f\x00")
    return h


def digest_fields(namespace: bytes, fields: Sequence[str]) -> bytes:
    """:func:`make_fields_key` for texts that are already normalized (the checks normalize once,
    render that text and key it). ``UnicodeEncodeError`` for text that is not valid Unicode (a lone
    surrogate): such text cannot be sent to a model either, and the caller must say so.
    ``Namespace.digest_fields`` is the same, from a hash state made once per namespace."""
    return _fed(_fields_hash(namespace), fields)


def _fed(h: hashlib.blake2b, fields: Sequence[str]) -> bytes:
    """The digest of ``h`` fed each field, length-prefixed."""
    for text in fields:
        data = text.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.digest()


__all__ = [
    "KEY_SIZE",
    "Namespace",
    "Prompt",
    "digest_fields",
    "make_fields_key",
    "make_key",
    "normalize_messages",
    "normalize_text",
]
