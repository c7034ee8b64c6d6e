"""Reading JailbreakDetect's ``{"jailbreak": bool, "score": float}``: a boolean is required."""

from __future__ import annotations

import json
from collections.abc import Callable

from guardcache.checks.verdict import Verdict
from guardcache.errors import ParseError


def parse_jailbreak(text: str) -> Verdict:
    try:
        data = json.loads(text)
    except ValueError:
        raise ParseError("the classifier answered with invalid JSON") from None
    flag = data.get("jailbreak") if isinstance(data, dict) else None
    if not isinstance(flag, bool):
        raise ParseError("the classifier's answer has no boolean 'jailbreak'")
    score = data.get("score")
    label = f"jailbreak score {score:.3f}" if isinstance(score, int | float) else "jailbreak"
    return Verdict(not flag, ("jailbreak",) if flag else (), label=label if flag else "not jailbreak")


PARSERS: dict[str, Callable[[str], Verdict]] = {"jailbreak_detection": parse_jailbreak}

__all__ = ["PARSERS", "parse_jailbreak"]
