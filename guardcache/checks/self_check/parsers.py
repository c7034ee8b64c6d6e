"""``is_content_safe``: the yes/no and safe/unsafe answers of Llama Guard, ShieldGemma and self checks.

NeMo's semantics: the first words of the answer decide — ``safe`` and ``no`` allow, ``unsafe`` and
``yes`` block (the prompts ask "should this be blocked?"); ``unsafe`` may be followed by the violated
category codes (``unsafe\\nS1,S10``). NeMo blocks on an answer it cannot read, without saying so;
here that is a ``ParseError``: the check blocks the turn and caches nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from guardcache.checks.verdict import Verdict
from guardcache.errors import ParseError

_NON_WORD = re.compile(r"\W+")


def parse_is_content_safe(text: str) -> Verdict:
    words = _NON_WORD.sub(" ", text).strip().split(" ")
    head = [w.lower() for w in words[:2]]
    if "unsafe" in head:
        at = next(i for i, w in enumerate(words) if w.lower() == "unsafe")
        return Verdict(False, tuple(w for w in words[at + 1 :] if w), label="unsafe")
    if "yes" in head:
        return Verdict(False, (), label="yes")
    if "safe" in head:
        return Verdict(True, (), label="safe")
    if "no" in head:
        return Verdict(True, (), label="no")
    raise ParseError("the answer starts with none of safe, unsafe, yes, no")


PARSERS: dict[str, Callable[[str], Verdict]] = {"is_content_safe": parse_is_content_safe}

__all__ = ["PARSERS", "parse_is_content_safe"]
