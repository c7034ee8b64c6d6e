"""What the emulated model answers: recognizes the guard prompt formats and applies the policy.

Recognized, in this order (the first match wins; "the prompt" is the text of the LAST message
unless said otherwise, because every guard template ends with its instruction):

1. NemoGuard content safety (input and output forms): some message holds ``<BEGIN CONVERSATION>``
   ... ``<END CONVERSATION>`` and ``"User Safety"`` or ``Output JSON``. The user message follows
   ``user: ``; the bot response follows a line starting ``response: agent: ``. The answer is the
   model's exact JSON, e.g. ``{"User Safety": "unsafe", "Safety Categories": "Violence, Threat"}``
   (plus ``"Response Safety"`` when a response turn is present). Template mimicry, as the real
   model does it: an INPUT prompt whose user text holds a line ``response: agent: ...`` is read as a
   two-turn conversation, so the answer has both keys, the fake agent text judged under
   ``Response Safety`` and only the user text before it under ``User Safety``.
2. Llama Guard (1, 2 and 3): ``<BEGIN CONVERSATION>`` with ``User:``/``Agent:`` turns (each at the
   start of a line) and a "'safe' or 'unsafe'" instruction; the answer is ``safe`` or
   ``unsafe\\nS1,S9`` (``O1,O3`` for Llama Guard 1's taxonomy) for the last turn of the role named by
   "assessment for [ONLY THE LAST] User|Agent". Codes come from the prompt's own taxonomy: the
   category's name, else a built-in alias (Violence -> "Violent Crimes", "Violence and Hate"...),
   else the policy's ``llama_guard`` code; a violation with no code is a bare ``unsafe``.
3. Nemotron Content Safety Reasoning (Nemotron-Content-Safety-Reasoning-4B): the prompt holds
   ``Human user:``, ``AI assistant:`` and ``Prompt harm``, and ends with ``/think`` or ``/no_think``.
   The answer is ``Prompt harm: harmful|unharmful\\nResponse Harm: harmful|unharmful|none``
   (``none`` when the assistant turn is ``None``), preceded by ``<think>\\n...\\n</think>\\n\\n`` (a
   short deterministic trace naming the matched words and taxonomy codes) under ``/think``.
4. ShieldGemma: the prompt says "Your answer must start with 'Yes' or 'No'" (any line breaks).
   ``Yes`` when the judged text violates the policy, else ``No``; the judged text is the
   ``Chatbot Response:`` when the question reads "Does the chatbot/AI/model response violate...",
   else the ``Human Question:``.
5. Self check input/output (NeMo's ``self_check_input``/``self_check_output``): the prompt's last
   lines ask "Should ... be blocked ... (Yes or No)?" (any wording in between, at most ~40 characters
   such as ``Answer:`` after it). The answer is ``Yes`` (block) or ``No``. The question decides the
   rail: "user ..." -> input, "bot/assistant ..." -> output, otherwise output when a ``Bot message:``
   field is present. The judged text is the last ``User message:`` (input) or ``Bot message:``
   (output) field before the question, quotes stripped; an input is also blocked by a jailbreak match.
6. Topic control: a system message that mentions both ``on-topic`` and ``off-topic``; the answer is
   ``off-topic`` when the last user message matches the policy's ``topic_control.off_topic`` or
   shares no content word with the rules (greetings are on-topic), else ``on-topic``.
7. Anything else: ``You said: <last user message>``, so the emulator can stand in for a main LLM.
   Before this rule, a request with tools or ending with a tool result gets the main model's tool
   behaviour (``tools.py``: ``call_tool <name> {...}`` in the user's message is a tool call).

A safety guard (``safety_guard=True``: Nemotron 3.5 Content Safety, the vision model of NeMo's
``content_safety_vision`` example) answers every request in its own format instead, as its chat
template holds the safety prompt and the request is only the conversation: it judges the last user
message (its text and what its images show, see ``images``) and, when the conversation ends with an
assistant turn, that answer too, in plain lines::

    User Safety: unsafe
    Response Safety: safe
    Safety Categories: Guns and Illegal Weapons

(``Response Safety`` only with an assistant turn, ``Safety Categories`` only when something is
unsafe, the categories of both turns in policy order.)
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .images import read_images
from .policy import Policy, matched_categories
from .tokens import message_text
from .tools import ToolCall

DecisionKind = Literal[
    "content_safety_input",
    "content_safety_output",
    "llama_guard",
    "nemotron_reasoning_input",
    "nemotron_reasoning_output",
    "shieldgemma_input",
    "shieldgemma_output",
    "self_check_input",
    "self_check_output",
    "topic_control",
    "safety_guard_input",
    "safety_guard_output",
    "echo",
    "tool_call",
    "tool_answer",
]

_BEGIN = "<BEGIN CONVERSATION>"
_END = "<END CONVERSATION>"
_USER_TURN = re.compile(r"^[ \t]*user:[ \t]?", re.IGNORECASE)
_AGENT_TURN = re.compile(r"(?:^|\n)[ \t]*response:[ \t]*agent:[ \t]?", re.IGNORECASE)
_LG_TURN = re.compile(r"(?:^|\n)[ \t]*(User|Agent):[ \t]?", re.IGNORECASE)
_LG_TARGET = re.compile(r"assessment for (?:only the last )?'?(user|agent)", re.IGNORECASE)
_TAXONOMY_LINE = re.compile(r"^[ \t]*([SO]\d+):[ \t]*(.+?)\.?[ \t]*$", re.MULTILINE)
_NEMOTRON_MODE = re.compile(r"/(no_think|think)\s*$")
_SG_ASK = re.compile(r"your answer must start with\s+'yes'\s+or\s+'no'", re.IGNORECASE)
_SG_SUBJECT = re.compile(
    r"does the (human|user|chatbot|ai|model|assistant|bot)\b[^?]{0,60}?violate", re.IGNORECASE
)
_SG_HUMAN = re.compile(r"Human Question:[ \t]*(.*?)\s*(?=Chatbot Response:|<end_of_turn>|\Z)", re.DOTALL)
_SG_BOT = re.compile(r"Chatbot Response:[ \t]*(.*?)\s*(?=<end_of_turn>|\Z)", re.DOTALL)
_SELF_CHECK_QUESTION = re.compile(
    r"\bshould\b[^.?!\n]{0,80}?\bblocked\b[^.?!\n]{0,60}?\byes\s*(?:or|/)\s*no\b\s*[)\]]?\s*\??",
    re.IGNORECASE,
)
_SELF_CHECK_TAIL = 40  # characters allowed after the question ("Answer:", a closing parenthesis)
_SELF_CHECK_LABEL = re.compile(
    r"^[ \t]*(?:(user)[ \t]+(?:message|input|request)|(bot|assistant|ai)[ \t]+(?:message|response|output))"
    r"[ \t]*:[ \t]*",
    re.IGNORECASE | re.MULTILINE,
)
_QUOTED = re.compile(r'"(.*)"[\s.\'"]*', re.DOTALL)
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
# Llama Guard taxonomies (v1 "O", v2/v3 "S" codes) name categories differently from the NemoGuard
# taxonomy the default policy uses: substrings of the taxonomy names each policy category maps to,
# best first ("violen" finds "Violent Crimes" and "Violence and Hate").
_TAXONOMY_ALIASES: dict[str, tuple[str, ...]] = {
    "Violence": ("violen",),
    "Threat": ("violen", "threat"),
    "Sexual": ("sexual content", "sexual"),
    "Criminal Planning/Confessions": ("criminal", "non-violent crime"),
    "Guns and Illegal Weapons": ("weapon",),
    "Controlled/Regulated Substances": ("substance", "non-violent crime"),
    "Suicide and Self Harm": ("self-harm", "self harm", "suicide"),
    "Hate/Identity Hate": ("hate",),
    "PII/Privacy": ("privacy",),
    "Harassment": ("harassment", "hate", "insult"),
    "Profanity": ("profanity", "offensive language", "insult"),
    "Fraud/Deception": ("fraud", "non-violent crime"),
    "Malware": ("malware", "code interpreter", "cyber", "non-violent crime"),
}
_VERDICT_KEYS = ("User Safety", "Response Safety")
_FLIP = {"safe": "unsafe", "unsafe": "safe", "harmful": "unharmful", "unharmful": "harmful"}
_HARM_LINE = re.compile(
    r"^((?:Prompt harm|Response Harm|User Safety|Response Safety): )(harmful|unharmful|safe|unsafe)$",
    re.MULTILINE,
)


@dataclass(frozen=True, slots=True)
class Decision:
    """The completion text and why: ``kind`` says which prompt format was recognized."""

    kind: DecisionKind
    content: str
    categories: tuple[str, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()  # kind "tool_call": the calls (see tools.py)

    @property
    def is_json(self) -> bool:
        return self.kind in ("content_safety_input", "content_safety_output")


class GuardModel:
    """Deterministic stand-in for the NemoGuard models, driven by a ``Policy``."""

    def __init__(self, policy: Policy, *, trailing_space: bool = True, safety_guard: bool = False) -> None:
        self.policy = policy
        self.trailing_space = trailing_space
        self.safety_guard = safety_guard

    def decide(self, messages: Sequence[Mapping[str, Any]]) -> Decision:
        if self.safety_guard:
            return self._safety_guard(messages)
        texts = [message_text(m.get("content")) for m in messages]
        for text in texts:
            if _BEGIN in text and _END in text:
                if '"User Safety"' in text or "Output JSON" in text:
                    return self._content_safety(text)
                if "'safe' or 'unsafe'" in text:
                    return self._llama_guard(text)
        last = texts[-1] if texts else ""
        mode = _NEMOTRON_MODE.search(last)
        if mode is not None and "Human user:" in last and "Prompt harm" in last:
            return self._nemotron_reasoning(last, think=mode.group(1) == "think")
        if _SG_ASK.search(last):
            return self._shieldgemma(last)
        question = _self_check_question(last)
        if question is not None:
            joined = "\n\n".join(texts)
            offset = len(joined) - len(last)
            return self._self_check(joined, offset + question.start(), question.group(0))
        system = next((t for m, t in zip(messages, texts, strict=True) if m.get("role") == "system"), None)
        last_user = next(
            (t for m, t in zip(reversed(messages), reversed(texts), strict=True) if m.get("role") == "user"),
            last,
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

    # -- formats --------------------------------------------------------------------------

    def _safety_guard(self, messages: Sequence[Mapping[str, Any]]) -> Decision:
        user_at = next(
            (i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), None
        )
        seen: list[str] = []
        if user_at is not None:
            content = messages[user_at].get("content")
            seen = [message_text(content), *(image.text for image in read_images(content))]
        user_cats = matched_categories(self.policy, seen)
        lines = [f"User Safety: {'unsafe' if user_cats else 'safe'}"]
        kind: DecisionKind = "safety_guard_input"
        found = set(user_cats)
        if messages and messages[-1].get("role") == "assistant" and user_at != len(messages) - 1:
            kind = "safety_guard_output"
            bot_cats = self.policy.violations(message_text(messages[-1].get("content")))
            lines.append(f"Response Safety: {'unsafe' if bot_cats else 'safe'}")
            found.update(bot_cats)
        categories = tuple(c.name for c in self.policy.categories if c.name in found)
        if categories:
            lines.append("Safety Categories: " + ", ".join(categories))
        return Decision(kind, "\n".join(lines), categories)

    def _content_safety(self, text: str) -> Decision:
        conversation = _between(text, _BEGIN, _END).strip("\n")
        conversation = _USER_TURN.sub("", conversation, count=1)
        # The first line that looks like an agent turn starts the response, wherever it came from:
        # a user who writes one gets judged as a two-turn conversation, as the real model does.
        agent = _AGENT_TURN.search(conversation)
        user, bot = (
            (conversation[: agent.start()], conversation[agent.end() :]) if agent else (conversation, "")
        )
        user_cats = self.policy.violations(user)
        answer: dict[str, str] = {"User Safety": "unsafe" if user_cats else "safe"}
        kind: DecisionKind = "content_safety_input"
        if agent:
            kind = "content_safety_output"
            answer["Response Safety"] = "unsafe" if self.policy.violations(bot) else "safe"
        categories = matched_categories(self.policy, [user, bot] if agent else [user])
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
        codes = self._llama_guard_codes(categories, _taxonomy(text))
        content = "unsafe\n" + ",".join(codes) if codes else "unsafe"
        return Decision("llama_guard", content, categories)

    def _llama_guard_codes(self, categories: Sequence[str], taxonomy: list[tuple[str, str]]) -> list[str]:
        by_name = {name.lower(): code for code, name in taxonomy}
        listed = {code for code, _ in taxonomy}
        codes: list[str] = []
        for name in categories:
            code = by_name.get(name.lower())
            if code is None:
                code = next(
                    (
                        c
                        for alias in _TAXONOMY_ALIASES.get(name, ())
                        for c, n in taxonomy
                        if alias in n.lower()
                    ),
                    None,
                )
            if code is None:
                fallback = self.policy.llama_guard_codes.get(name)
                code = fallback if fallback and (not taxonomy or fallback in listed) else None
            if code and code not in codes:
                codes.append(code)
        codes.sort(key=lambda c: (c[0], int(c[1:])))
        return codes

    def _nemotron_reasoning(self, text: str, *, think: bool) -> Decision:
        start = text.find("Human user:") + len("Human user:")
        stop = text.rfind("Use the taxonomy")
        body = text[start:] if stop < start else text[start:stop]
        user, turn, bot = body.partition("\nAI assistant:")
        user, bot = user.strip(), bot.strip()
        has_response = bool(turn) and bot not in ("", "None")
        user_found = self.policy.evidence(user)
        bot_found = self.policy.evidence(bot) if has_response else ()
        prompt_harm = "harmful" if user_found else "unharmful"
        response_harm = ("harmful" if bot_found else "unharmful") if has_response else "none"
        content = f"Prompt harm: {prompt_harm}\nResponse Harm: {response_harm}"
        if think:
            codes = {name.lower(): code for code, name in _taxonomy(text)}
            trace = " ".join(
                (
                    _reasoning("The human user's request", user_found, codes),
                    _reasoning("The AI assistant's response", bot_found, codes)
                    if has_response
                    else "There is no AI assistant response, so the response harm is None.",
                )
            )
            content = f"<think>\n{trace}\n</think>\n\n{content}"
        kind: DecisionKind = "nemotron_reasoning_output" if has_response else "nemotron_reasoning_input"
        names = {name for name, _ in (*user_found, *bot_found)}
        categories = tuple(c.name for c in self.policy.categories if c.name in names)
        return Decision(kind, content, categories)

    def _shieldgemma(self, text: str) -> Decision:
        subjects = _SG_SUBJECT.findall(text)
        judges_response = bool(subjects) and subjects[-1].lower() not in ("human", "user")
        human = _SG_HUMAN.search(text)
        bot = _SG_BOT.search(text, human.end() if human else 0)
        judged = (bot.group(1) if bot else "") if judges_response else (human.group(1) if human else "")
        categories = self.policy.violations(judged)
        kind: DecisionKind = "shieldgemma_output" if judges_response else "shieldgemma_input"
        return Decision(kind, "Yes" if categories else "No", categories)

    def _self_check(self, text: str, question_at: int, question: str) -> Decision:
        labels = [m for m in _SELF_CHECK_LABEL.finditer(text) if m.start() < question_at]
        subject = question.lower()
        if re.search(r"\buser\b", subject):
            output = False
        elif re.search(r"\b(bot|assistant|response|output)\b", subject):
            output = True
        else:
            output = any(m.group(2) for m in labels)
        wanted = [m for m in labels if bool(m.group(2)) == output]
        line_start = text.rfind("\n", 0, question_at) + 1
        if wanted:
            label = wanted[-1]
            following = [m.start() for m in labels if m.start() > label.start()]
            stop = min([*following, line_start if line_start > label.end() else question_at])
            judged = _unquote(text[label.end() : stop])
        else:  # no field: the last quoted text before the question, else everything before it
            quoted = re.findall(r'"([^"]*)"', text[:question_at])
            judged = quoted[-1] if quoted else text[:line_start]
        categories = self.policy.violations(judged)
        block = bool(categories) or (not output and self.policy.jailbreak_hits(judged) > 0)
        kind: DecisionKind = "self_check_output" if output else "self_check_input"
        return Decision(kind, "Yes" if block else "No", categories)

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


def duplicated(content: str) -> str:
    """``content`` with each verdict stated twice, the second time contradicting the first.

    A JSON object gets every ``"User Safety"``/``"Response Safety"`` key repeated right after itself
    with the opposite value (``{"User Safety": "unsafe", "User Safety": "safe", ...}``: a parser
    that keeps the last key reads the flipped verdict); Nemotron ``Prompt harm:``/``Response Harm:``
    and ``User Safety:``/``Response Safety:`` lines are repeated the same way. Other answers are
    returned unchanged.
    """
    stripped = content.rstrip()
    trailing = content[len(stripped) :]
    try:
        data = json.loads(stripped) if stripped.startswith("{") else None
    except ValueError:
        data = None
    if isinstance(data, dict):
        parts = []
        for key, value in data.items():
            parts.append(f"{json.dumps(key, ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}")
            if key in _VERDICT_KEYS and value in _FLIP:
                parts.append(f"{json.dumps(key)}: {json.dumps(_FLIP[value])}")
        return "{" + ", ".join(parts) + "}" + trailing
    return _HARM_LINE.sub(lambda m: f"{m.group(0)}\n{m.group(1)}{_FLIP[m.group(2)]}", content)


def _self_check_question(text: str) -> re.Match[str] | None:
    """The self-check question when it ends ``text`` (only a short tail such as ``Answer:`` after)."""
    last = None
    for match in _SELF_CHECK_QUESTION.finditer(text):
        last = match
    if last is None or len(text[last.end() :].strip()) > _SELF_CHECK_TAIL:
        return None
    return last


def _unquote(value: str) -> str:
    value = value.strip()
    quoted = _QUOTED.fullmatch(value)
    return quoted.group(1) if quoted else value.lstrip('"')


def _reasoning(subject: str, found: Sequence[tuple[str, str]], codes: Mapping[str, str]) -> str:
    if not found:
        return f"{subject} does not fall into any harmful category of the taxonomy, so it is unharmful."
    words = _and([f'"{match}"' for _, match in found])
    named = _and([f"{codes[n.lower()]}: {n}" if n.lower() in codes else n for n, _ in found])
    return f"{subject} mentions {words}, which falls under {named}, so it is harmful."


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _between(text: str, begin: str, end: str) -> str:
    start = text.find(begin) + len(begin)
    stop = text.rfind(end)
    return text[start:stop] if stop >= start else text[start:]


def _taxonomy(text: str) -> list[tuple[str, str]]:
    """``(code, name)`` pairs listed in the prompt: between the Llama Guard category markers when
    present, else every ``S1: Name.`` line before the conversation."""
    start = text.find("<BEGIN UNSAFE CONTENT CATEGORIES>")
    stop = text.find("<END UNSAFE CONTENT CATEGORIES>")
    if 0 <= start < stop:
        section = text[start:stop]
    else:
        cut = min((i for i in (text.find(_BEGIN), text.find("Human user:")) if i >= 0), default=len(text))
        section = text[:cut]
    return [(code, name.strip()) for code, name in _TAXONOMY_LINE.findall(section)]


def _content_words(text: str) -> set[str]:
    words = set()
    for word in _WORD.findall(text.lower()):
        if len(word) < 4 or word in _STOPWORDS:
            continue
        words.add(word[:-1] if word.endswith("s") and len(word) > 4 else word)
    return words
