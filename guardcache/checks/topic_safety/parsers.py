"""Reading the topic-control answer: exactly ``on-topic`` allows, ``off-topic`` blocks.

NeMo treats every answer other than "off-topic" as on-topic, which fails open when the model says
anything else (a user can ask it to). Here any other answer is no verdict: the turn is blocked and
nothing is cached.
"""

from __future__ import annotations

from collections.abc import Callable

from guardcache.checks.verdict import Verdict
from guardcache.errors import ParseError


def parse_topic(text: str) -> Verdict:
    answer = text.strip().strip(".\"'").strip().lower()
    if answer == "on-topic":
        return Verdict(True, (), label="on-topic")
    if answer == "off-topic":
        return Verdict(False, ("off-topic",), label="off-topic")
    raise ParseError("the topic answer is neither on-topic nor off-topic")


PARSERS: dict[str, Callable[[str], Verdict]] = {"topic_safety": parse_topic}

__all__ = ["PARSERS", "parse_topic"]
