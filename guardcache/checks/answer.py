"""Reading a guard model's JSON answer the way a guard must: strictly, and through truncation.

A guard model's answer is user-influenced text (the user's message is in its prompt), so the reader
takes nothing on trust:
- duplicate keys make the answer unreadable (``{"User Safety": "unsafe", "User Safety": "safe"}``
  means nothing; ``json.loads`` would silently keep the last, which fails open);
- an answer cut off at ``max_tokens`` (``{"User Safety": "unsafe", "Safety Categories": "Violence,
  ...`` with no closing brace: the more categories a message hits, the longer the answer) still
  holds every field that was completed before the cut, so its decisive field can be read.

:func:`read_fields` returns the string-valued fields that are complete, in order, and whether the
object was complete. It understands exactly the flat ``{"key": "value", ...}`` shape the NemoGuard
models emit (values may also be numbers, booleans or null); anything else is a ``ParseError``.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from guardcache.errors import ParseError

_WS = " \t\n\r"


class Fields(NamedTuple):
    """The fields read from an answer and whether the object was closed (not truncated)."""

    values: dict[str, object]
    complete: bool
    #: the value of a string field that was cut mid-way (the last field of a truncated answer)
    partial: tuple[str, str] | None = None


_DECODER = json.JSONDecoder()


def read_fields(text: str) -> Fields:
    """The fields of a flat JSON object answer, tolerating a cut-off end; ``ParseError`` otherwise."""
    s = text.strip()
    if not s.startswith("{"):
        raise ParseError("the answer is not a JSON object")
    values: dict[str, object] = {}
    pos = 1
    n = len(s)
    while True:
        pos = _skip(s, pos)
        if pos >= n:
            return Fields(values, False)
        if s[pos] == "}":
            if _skip(s, pos + 1) != n:
                raise ParseError("the answer has text after its JSON object")
            return Fields(values, True)
        try:
            key, pos = _DECODER.raw_decode(s, pos)
        except json.JSONDecodeError:
            return Fields(values, False) if _is_cut_string(s, pos) else _bad("a key")
        if not isinstance(key, str):
            raise ParseError("the answer's keys are not strings")
        if key in values:
            raise ParseError(f"the answer states {key!r} twice")
        pos = _skip(s, pos)
        if pos >= n:
            return Fields(values, False)
        if s[pos] != ":":
            raise ParseError("the answer is not a JSON object of fields")
        pos = _skip(s, pos + 1)
        if pos >= n:
            return Fields(values, False)
        try:
            value, pos = _DECODER.raw_decode(s, pos)
        except json.JSONDecodeError:
            if _is_cut_string(s, pos):
                return Fields(values, False, (key, _cut_string(s, pos)))
            if _is_cut_literal(s, pos):
                return Fields(values, False)
            return _bad("a value")
        if isinstance(value, dict | list):
            raise ParseError("the answer's values must be plain strings")
        values[key] = value
        pos = _skip(s, pos)
        if pos >= n:
            return Fields(values, False)
        if s[pos] == ",":
            pos += 1
        elif s[pos] != "}":
            raise ParseError("the answer is not a JSON object of fields")


def _skip(s: str, pos: int) -> int:
    while pos < len(s) and s[pos] in _WS:
        pos += 1
    return pos


def _is_cut_string(s: str, pos: int) -> bool:
    """Whether ``s[pos:]`` is the start of a JSON string that the end of the text cut off."""
    if s[pos] != '"':
        return False
    try:
        json.loads(s[pos:] + '"')
    except json.JSONDecodeError:
        # A dangling backslash escape, e.g. '"abc\\': still a cut string.
        try:
            json.loads(s[pos:] + '\\"' + '"')
        except json.JSONDecodeError:
            return False
    return True


def _cut_string(s: str, pos: int) -> str:
    try:
        return str(json.loads(s[pos:] + '"'))
    except json.JSONDecodeError:
        return str(json.loads(s[pos:-1] + '"')) if len(s) - pos > 1 else ""


def _is_cut_literal(s: str, pos: int) -> bool:
    rest = s[pos:]
    return any(word.startswith(rest) for word in ("true", "false", "null")) or all(
        c in "-+.eE0123456789" for c in rest
    )


def _bad(what: str) -> Fields:
    raise ParseError(f"the answer has an unreadable JSON {what}")


__all__ = ["Fields", "read_fields"]
