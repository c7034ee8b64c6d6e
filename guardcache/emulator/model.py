"""What the emulated model answers: recognizes the guard prompt formats and applies the policy.

Recognized, in this order:

1. NemoGuard content safety (input and output forms): the rendered prompt, sent as one message,
   holds ``<BEGIN CONVERSATION>`` ... ``"User Safety"``. The user message follows ``user: `` and the
   bot response follows ``response: agent: ``. The answer is the model's exact JSON, e.g.
   ``{"User Safety": "unsafe", "Safety Categories": "Violence, Threat"}``.
2. Llama Guard: ``<BEGIN CONVERSATION>`` with ``User:``/``Agent:`` turns and a "'safe' or 'unsafe'"
   instruction; the answer is ``safe`` or ``unsafe\\nS1,S2`` for the last turn of the assessed role.
3. Topic control: a system message that mentions both ``on-topic`` and ``off-topic``; the answer is
   ``off-topic`` when the last user message matches the policy's ``topic_control.off_topic`` or
   shares no content word with the rules (greetings are on-topic), else ``on-topic``.
4. Anything else: ``You said: <last user message>``, so the emulator can stand in for a main LLM.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .policy import Policy, matched_categories
from .tokens import message_text

DecisionKind = Literal[
    "content_safety_input", "content_safety_output", "llama_guard", "topic_control", "echo"
]

_BEGIN = "<BEGIN CONVERSATION>"
_END = "<END CONVERSATION>"
_AGENT_MARK = "\n\nresponse: agent: "
_LG_TURN = re.compile(r"(?:^|\n\n)(User|Agent): ", re.IGNORECASE)
_LG_TARGET = re.compile(r"assessment for (?:only the last )?(user|agent)", re.IGNORECASE)
_LG_TAXONOMY = re.compile(r"^(S\d+):\s*(.+?)\.?\s*$", re.MULTILINE)
_WORD = re.compile(r"[a-z]+")
# Words too common to say what a message is about (topic control ignores them).
_STOPWORD_TEXT = """
about above after again also because been before being below between both could does doing down
during each from further have having here hers herself himself into itself just more most myself
once only other ours ourselves over same should some such than that their theirs them themselves
then there these they this those through under until very were what when where which while whom
will with would your yours yourself yourselves please thanks thank hello hola morning evening
afternoon okay sure tell know want need like help
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


@dataclass(frozen=True, slots=True)
class Decision:
    """The completion text and why: ``kind`` says which prompt format was recognized."""

    kind: DecisionKind
    content: str
    categories: tuple[str, ...] = ()

    @property
    def is_json(self) -> bool:
        return self.kind in ("content_safety_input", "content_safety_output")


class GuardModel:
    """Deterministic stand-in for the NemoGuard models, driven by a ``Policy``."""

    def __init__(self, policy: Policy, *, trailing_space: bool = True) -> None:
        self.policy = policy
        self.trailing_space = trailing_space

    def decide(self, messages: Sequence[Mapping[str, Any]]) -> Decision:
        texts = [message_text(m.get("content")) for m in messages]
        for text in texts:
            if _BEGIN in text and _END in text:
                if '"User Safety"' in text or "Output JSON" in text:
                    return self._content_safety(text)
                if "'safe' or 'unsafe'" in text:
                    return self._llama_guard(text)
        system = next((t for m, t in zip(messages, texts, strict=True) if m.get("role") == "system"), None)
        last_user = next(
            (t for m, t in zip(reversed(messages), reversed(texts), strict=True) if m.get("role") == "user"),
            texts[-1] if texts else "",
        )
        if system is not None and "on-topic" in system and "off-topic" in system:
            return self._topic(system, last_user)
        return Decision("echo", f"You said: {last_user}" if last_user else "You said nothing.")

    def classify_jailbreak(self, text: str) -> tuple[bool, float]:
        """(jailbreak, score): score in (0.75, 1) when flagged, in [0, 0.25) otherwise."""
        hits = self.policy.jailbreak_hits(text)
        if hits:
            return True, round(1.0 - 0.25 * 0.5 ** (hits - 1) * 0.99, 6)
        digest = hashlib.sha256(text.encode("utf-8")).digest()
        return False, round(int.from_bytes(digest[:4], "big") / 2**32 * 0.25, 6)

    def _content_safety(self, text: str) -> Decision:
        conversation = _between(text, _BEGIN, _END).strip("\n")
        if conversation.startswith("user: "):
            conversation = conversation[len("user: ") :]
        user, mark, bot = conversation.partition(_AGENT_MARK)
        user_cats = self.policy.violations(user)
        answer: dict[str, str] = {"User Safety": "unsafe" if user_cats else "safe"}
        kind: DecisionKind = "content_safety_input"
        bot_cats: tuple[str, ...] = ()
        if mark:
            kind = "content_safety_output"
            bot_cats = self.policy.violations(bot)
            answer["Response Safety"] = "unsafe" if bot_cats else "safe"
        categories = matched_categories(self.policy, [user, bot] if mark else [user])
        if categories:
            answer["Safety Categories"] = ", ".join(categories)
        content = json.dumps(answer, ensure_ascii=False)
        if self.trailing_space:
            content += " "
        return Decision(kind, content, categories)

    def _llama_guard(self, text: str) -> Decision:
        conversation = _between(text, _BEGIN, _END)
        target = _LG_TARGET.search(text[text.rfind(_END) :])
        role = (target.group(1) if target else "user").lower()
        parts = _LG_TURN.split(conversation)
        turns = [(parts[i].lower(), parts[i + 1].strip()) for i in range(1, len(parts) - 1, 2)]
        assessed = next((t for r, t in reversed(turns) if r == role), "")
        categories = self.policy.violations(assessed)
        if not categories:
            return Decision("llama_guard", "safe")
        taxonomy = {name.strip().lower(): code for code, name in _LG_TAXONOMY.findall(_taxonomy(text))}
        codes: list[str] = []
        for name in categories:
            code = taxonomy.get(name.lower()) or self.policy.llama_guard_codes.get(name)
            if code and code not in codes:
                codes.append(code)
        codes.sort(key=lambda c: int(c[1:]))
        content = "unsafe\n" + ",".join(codes) if codes else "unsafe"
        return Decision("llama_guard", content, categories)

    def _topic(self, rules: str, user: str) -> Decision:
        if self.policy.is_off_topic(user):
            return Decision("topic_control", "off-topic")
        words = _content_words(user)
        on_topic = not words or bool(words & _content_words(rules))
        return Decision("topic_control", "on-topic" if on_topic else "off-topic")


def malformed(content: str, rng: random.Random) -> str:
    """A broken version of ``content``: JSON cut mid-token, or prose where JSON was expected."""
    stripped = content.strip()
    if stripped.startswith("{") and len(stripped) > 4 and rng.random() < 0.5:
        return stripped[: max(2, len(stripped) // 2)]
    return "I'm sorry, I cannot assess the safety of this conversation."


def _between(text: str, begin: str, end: str) -> str:
    start = text.find(begin) + len(begin)
    stop = text.rfind(end)
    return text[start:stop] if stop >= start else text[start:]


def _taxonomy(text: str) -> str:
    start = text.find("<BEGIN UNSAFE CONTENT CATEGORIES>")
    stop = text.find("<END UNSAFE CONTENT CATEGORIES>")
    return text[start:stop] if 0 <= start < stop else ""


def _content_words(text: str) -> set[str]:
    words = set()
    for word in _WORD.findall(text.lower()):
        if len(word) < 4 or word in _STOPWORDS:
            continue
        words.add(word[:-1] if word.endswith("s") and len(word) > 4 else word)
    return words
