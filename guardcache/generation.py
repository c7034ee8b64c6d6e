"""The generation fields of an OpenAI chat request and the values each may take: one rule for a
model's ``parameters`` in a config (``config/parameters.py``) and a request to ``guardcache serve``
(``server/protocol.py``). A leaf: it imports nothing of guardcache.

Why one rule: both end up in the same request body to an OpenAI-compatible server; a config that
accepted what serve refused (a temperature of 5, six stop strings) built a model whose every call
failed, the turn blocked as unjudgeable. The bounds are OpenAI's (temperature 0 to 2, top_p 0 to 1,
the penalties -2 to 2, at most 4 stop strings), which NIM's OpenAI-compatible API documents too (its
vLLM engine takes wider values, but a config must hold on any server of its engine). Values keep the
type they were written with: a check says yes or no, it never converts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

MAX_STOP_STRINGS = 4
"""OpenAI's limit on ``stop`` sequences."""


@dataclass(frozen=True, slots=True)
class FieldRule:
    """What one generation field may be: ``accepts`` (value -> ok) and ``expected``, the words an
    error message uses (``a number from 0 to 2``)."""

    expected: str
    accepts: Callable[[object], bool]


def _number(low: float, high: float) -> FieldRule:
    def accepts(value: object) -> bool:
        return (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and low <= value <= high
        )

    return FieldRule(f"a number from {low:g} to {high:g}", accepts)


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _stop(value: object) -> bool:
    if isinstance(value, str):
        return True
    return (
        isinstance(value, list | tuple)
        and 0 < len(value) <= MAX_STOP_STRINGS
        and all(isinstance(v, str) for v in value)
    )


GENERATION_FIELDS: Mapping[str, FieldRule] = MappingProxyType(
    {
        "temperature": _number(0, 2),
        "top_p": _number(0, 1),
        "max_tokens": FieldRule("a whole number > 0", _positive_int),
        "max_completion_tokens": FieldRule("a whole number > 0", _positive_int),
        "stop": FieldRule(f"a string or a list of up to {MAX_STOP_STRINGS} strings", _stop),
        "seed": FieldRule("a whole number", _int),
        "presence_penalty": _number(-2, 2),
        "frequency_penalty": _number(-2, 2),
        "logit_bias": FieldRule("an object", lambda value: isinstance(value, dict)),
        "response_format": FieldRule("an object", lambda value: isinstance(value, dict)),
        "user": FieldRule("a string", lambda value: isinstance(value, str)),
    }
)
"""The generation fields guardcache checks, in the order a request's are checked (an error names
the first wrong one), each with its rule. Other fields are passed on as written."""


def expected_instead(name: str, value: object) -> str | None:
    """What field ``name`` should be when ``value`` is not that (``a number from 0 to 2``); None when
    the value is fine or the field has no rule."""
    rule = GENERATION_FIELDS.get(name)
    return None if rule is None or rule.accepts(value) else rule.expected


__all__ = ["GENERATION_FIELDS", "MAX_STOP_STRINGS", "FieldRule", "expected_instead"]
