"""Reading NemoGuard Content Safety completions into verdicts.

The model answers JSON, sometimes with a trailing space: ``{"User Safety": "unsafe", "Safety
Categories": "Violence, Threat"}``. The input check reads "User Safety", the output check "Response
Safety"; "safe" (any case) allows, any other value blocks. Invalid JSON or a missing key is a
:class:`ParseError`, never a verdict: the peer library blocks AND caches such a failure, so one bad
completion would block that prompt until eviction. Here it is not cached and the rail's ``on_error``
decides.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from guardcache.errors import ParseError
from guardcache.library.verdict import Verdict


def _load(text: str) -> dict[str, object]:
    stripped = text.strip()
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError as exc:
        raise ParseError(f"content safety model returned invalid JSON ({exc.msg} at {exc.pos})") from None
    if not isinstance(data, dict):
        raise ParseError(f"content safety model returned JSON {type(data).__name__}, expected an object")
    return data


def _categories(data: dict[str, object]) -> tuple[str, ...]:
    raw = data.get("Safety Categories")
    if raw is None:
        return ()
    if isinstance(raw, list):
        return tuple(str(c).strip() for c in raw if str(c).strip())
    return tuple(c.strip() for c in str(raw).split(",") if c.strip())


def _verdict(text: str, field: str) -> Verdict:
    data = _load(text)
    label = data.get(field)
    if not isinstance(label, str):
        raise ParseError(f"content safety model output has no {field!r} rating")
    allowed = label.strip().lower() == "safe"
    return Verdict(allowed=allowed, categories=() if allowed else _categories(data), label=label.strip())


def parse_prompt_safety(text: str) -> Verdict:
    """Input check: the user message's rating."""
    return _verdict(text, "User Safety")


def parse_response_safety(text: str) -> Verdict:
    """Output check: the agent response's rating."""
    return _verdict(text, "Response Safety")


PARSERS: dict[str, Callable[[str], Verdict]] = {
    "nemoguard_parse_prompt_safety": parse_prompt_safety,
    "nemoguard_parse_response_safety": parse_response_safety,
}

__all__ = ["PARSERS", "parse_prompt_safety", "parse_response_safety"]
