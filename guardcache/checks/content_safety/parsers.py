"""Reading NemoGuard Content Safety answers (and Nemotron's reasoning and plain-line variants) into
verdicts.

The model answers ``{"User Safety": "unsafe", "Safety Categories": "Violence, Threat"}`` for an input
check and adds ``"Response Safety"`` for an output check. The rules, and why:
- the decisive field must be ``safe`` or ``unsafe`` (any case); anything else is not a verdict;
- an INPUT check answered with a ``Response Safety`` field does not fit the check: the model saw an
  agent turn that the user typed into their own message (template mimicry), so the answer is
  unsafe whatever ``User Safety`` says;
- duplicate keys are unreadable (``read_fields``): a model that states a verdict twice cannot be
  trusted to mean either;
- a truncated answer is read up to the cut: when its decisive field is complete it is a verdict;
  categories cut mid-list keep the complete ones.

A ``ParseError`` from here means "no verdict could be read": the check turns it into an unsafe
result that is NOT cached (the text the user sent made the model answer that way, or the backend
misbehaved; either way it must not pass, and must not stick).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from guardcache.checks.answer import read_fields
from guardcache.checks.verdict import Verdict
from guardcache.errors import ParseError

_INPUT, _OUTPUT = "User Safety", "Response Safety"


def _categories(raw: object, cut: bool) -> tuple[str, ...]:
    if raw is None:
        return ()
    items = [c.strip() for c in str(raw).split(",")]
    if cut:
        items = items[:-1]  # the last one may be a fragment ("Crimi")
    return tuple(c for c in items if c)


def _verdict(text: str, field: str, forbidden: str | None) -> Verdict:
    fields = read_fields(text)
    values = fields.values
    if forbidden is not None and (forbidden in values or (fields.partial or ("",))[0] == forbidden):
        return Verdict(False, (), label=f"unsafe (answer rates a {forbidden!r} the check did not ask for)")
    label = values.get(field)
    if not isinstance(label, str):
        raise ParseError(f"the answer has no complete {field!r} rating")
    rating = label.strip().lower()
    if rating not in ("safe", "unsafe"):
        raise ParseError(f"the {field!r} rating is neither safe nor unsafe")
    if rating == "safe":
        if not fields.complete:
            # A safe answer is a few tokens long: one cut at max_tokens did not answer this check.
            raise ParseError("a 'safe' answer was cut off")
        return Verdict(True, (), label=label.strip())
    partial = fields.partial
    if partial is not None and partial[0] == "Safety Categories":
        categories = _categories(partial[1], cut=True)
    else:
        categories = _categories(values.get("Safety Categories"), cut=False)
    return Verdict(False, categories, label=label.strip())


def parse_prompt_safety(text: str) -> Verdict:
    """Input check: the user message's rating; a ``Response Safety`` field makes it unsafe."""
    return _verdict(text, _INPUT, forbidden=_OUTPUT)


def parse_response_safety(text: str) -> Verdict:
    """Output check: the agent response's rating (``User Safety`` is present too and not read)."""
    return _verdict(text, _OUTPUT, forbidden=None)


_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


def _harm(text: str, field: str) -> Verdict:
    """Nemotron Content Safety Reasoning: ``Prompt harm: harmful|unharmful`` lines after an
    optional ``<think>...</think>`` trace. Unlike NeMo, an unreadable or repeated line is no verdict
    (NeMo assumes "harmful" and caches it)."""
    cleaned = _THINK.sub("", text)
    if "<think>" in cleaned:
        raise ParseError("the reasoning trace was cut off before the verdict")
    found = re.findall(rf"^\s*{re.escape(field)}\s*:\s*(\w+)", cleaned, re.IGNORECASE | re.MULTILINE)
    if len(found) != 1:
        raise ParseError(f"the answer states {field!r} {len(found)} times")
    value = found[0].lower()
    if value == "unharmful":
        return Verdict(True, (), label=value)
    if value == "harmful":
        return Verdict(False, (), label=value)
    raise ParseError(f"the {field!r} value is neither harmful nor unharmful")


def parse_reasoning_prompt_safety(text: str) -> Verdict:
    return _harm(text, "Prompt harm")


def parse_reasoning_response_safety(text: str) -> Verdict:
    return _harm(text, "Response Harm")


_LINE = re.compile(r"^([A-Za-z][A-Za-z ]*?)\s*:\s*(.*?)\s*$")
_CATEGORIES = "Safety Categories"
_LINE_FIELDS = {name.lower(): name for name in (_INPUT, _OUTPUT, _CATEGORIES)}


def _lines(text: str, field: str, forbidden: str | None) -> Verdict:
    """Nemotron Content Safety (Nemotron Safety Guard 3.5, the vision model of NeMo's
    ``content_safety_vision`` example): plain lines, not JSON::

        User Safety: unsafe
        Response Safety: safe
        Safety Categories: Violence, Criminal Planning/Confessions

    ``Response Safety`` only when the request held an assistant turn, ``Safety Categories`` only
    with an unsafe rating, an optional complete ``<think>...</think>`` trace before them. Read
    strictly, where NeMo's parser searches the text for the first verdict line: every other line is
    one of these three fields (any case), each field once, a rating ``safe`` or ``unsafe`` exactly.
    Anything else (prose, a field twice, a cut trace, ``safe`` with categories) is no verdict. As
    for the JSON answers, an input check rated for a ``Response Safety`` saw an agent turn the user
    typed: unsafe."""
    cleaned = _THINK.sub("", text)
    if "<think>" in cleaned or "</think>" in cleaned:
        raise ParseError("the reasoning trace was cut off before the verdict")
    values: dict[str, str] = {}
    for line in cleaned.splitlines():
        if not line.strip():
            continue
        match = _LINE.match(line.strip())
        name = _LINE_FIELDS.get(match.group(1).lower()) if match is not None else None
        if match is None or name is None:
            raise ParseError("the answer has a line that is not a safety field")
        if name in values:
            raise ParseError(f"the answer states {name!r} twice")
        values[name] = match.group(2)
    if forbidden is not None and forbidden in values:
        return Verdict(False, (), label=f"unsafe (answer rates a {forbidden!r} the check did not ask for)")
    label = values.get(field)
    if label is None:
        raise ParseError(f"the answer has no {field!r} rating")
    rating = label.lower()
    if rating not in ("safe", "unsafe"):
        raise ParseError(f"the {field!r} rating is neither safe nor unsafe")
    categories = _categories(values.get(_CATEGORIES), cut=False)
    if rating == "safe":
        if categories and all(values.get(f, "").lower() != "unsafe" for f in (_INPUT, _OUTPUT)):
            raise ParseError("the answer rates everything safe and lists violated categories")
        return Verdict(True, (), label=label)
    return Verdict(False, categories, label=label)


def parse_lines_prompt_safety(text: str) -> Verdict:
    """Input check of a Nemotron Content Safety model: the ``User Safety`` line."""
    return _lines(text, _INPUT, forbidden=_OUTPUT)


def parse_lines_response_safety(text: str) -> Verdict:
    """Output check: the ``Response Safety`` line (never ``User Safety``: the model rates the turns
    apart, so an unsafe user turn must not block a safe answer, as NeMo)."""
    return _lines(text, _OUTPUT, forbidden=None)


PARSERS: dict[str, Callable[[str], Verdict]] = {
    "nemoguard_parse_prompt_safety": parse_prompt_safety,
    "nemoguard_parse_response_safety": parse_response_safety,
    "nemotron_reasoning_parse_prompt_safety": parse_reasoning_prompt_safety,
    "nemotron_reasoning_parse_response_safety": parse_reasoning_response_safety,
    "nemotron_content_safety_parse_prompt_safety": parse_lines_prompt_safety,
    "nemotron_content_safety_parse_response_safety": parse_lines_response_safety,
}

__all__ = [
    "PARSERS",
    "parse_lines_prompt_safety",
    "parse_lines_response_safety",
    "parse_prompt_safety",
    "parse_reasoning_prompt_safety",
    "parse_reasoning_response_safety",
    "parse_response_safety",
]
