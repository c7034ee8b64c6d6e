"""The Jinja filters of guard prompts: NeMo Guardrails' own filters that make sense without a dialog.

NeMo Guardrails renders prompts with extra filters. The ones that format a conversation or a piece of
text are provided here with NeMo's behaviour, so a NeMo prompt renders the same bytes:

- ``indent(n)``: every non-blank line, the first included, gets ``n`` spaces (NeMo replaces Jinja's
  ``indent``, which leaves the first line alone; ``first=False`` and ``blank=True`` are accepted too);
- ``user_assistant_sequence``: a conversation as ``User: ...`` / ``Assistant: ...`` lines;
- ``to_chat_messages``: a conversation as ``{"role", "content"}`` dicts;
- ``first_turns(n)`` / ``last_turns(n)``: the first / last ``n`` turns of a Colang-style history text.

A conversation is a sequence of NeMo events (``UserMessage`` with ``text``, ``StartUtteranceBotAction``
with ``script``, ``SystemMessage`` with ``content``) or of OpenAI-style ``{"role", "content"}``
messages. NeMo's dialog filters, which turn Colang event histories into intents (``colang``,
``verbose_v1``, ...), are refused with a message saying so: guard checks have no dialog state.
``random`` is removed from Jinja's built-ins: a guard prompt must render the same bytes for the same
input, or the verdict cache and the server's KV-cache prefix reuse would be wrong or useless.

Every filter is a pure function of plain data (strings, numbers, lists, mappings).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: NeMo Guardrails' filters over a dialog's Colang history: guardcache's checks have none.
NEMO_DIALOG_FILTERS: frozenset[str] = frozenset(
    {
        "co_v2",
        "colang",
        "colang_without_identifiers",
        "remove_text_messages",
        "to_intent_messages",
        "to_intent_messages_2",
        "to_messages",
        "to_messages_v2",
        "verbose_v1",
    }
)

#: Jinja built-ins taken out: each makes a render depend on something other than its input.
REMOVED_FILTERS: frozenset[str] = frozenset({"random"})

_ROLE_LABELS = {"user": "User", "assistant": "Assistant", "bot": "Assistant"}


def indent(text: Any, width: int | str = 4, first: bool = True, blank: bool = False) -> str:
    """Prefix lines of ``text`` with ``width`` spaces (or the string ``width``), NeMo-style.

    By default every line with non-whitespace content is indented, the first included (NeMo's
    ``textwrap.indent`` behaviour); ``first=False`` leaves the first line as it is and
    ``blank=True`` indents whitespace-only lines too.
    """
    prefix = width if isinstance(width, str) else " " * int(width)
    lines = str(text).splitlines(keepends=True)
    out = []
    for i, line in enumerate(lines):
        if (i == 0 and not first) or (not blank and not line.strip()):
            out.append(line)
        else:
            out.append(prefix + line)
    return "".join(out)


def _turns(events: Any) -> Iterable[tuple[str, Any]]:
    """``(role, content)`` for each message of a NeMo event list or an OpenAI message list."""
    if isinstance(events, str | bytes) or not isinstance(events, Iterable):
        raise TypeError(f"expected a list of events or messages, not {type(events).__name__}")
    for event in events:
        if not isinstance(event, Mapping):
            raise TypeError(f"expected an event or message mapping, not {type(event).__name__}")
        kind = event.get("type")
        if kind == "UserMessage":
            yield "user", event.get("text", "")
        elif kind == "StartUtteranceBotAction":
            yield "assistant", event.get("script", "")
        elif kind == "SystemMessage" and "content" in event:
            yield "system", event["content"]
        elif kind is None and isinstance(event.get("role"), str):
            yield event["role"], event.get("content", "")


def _text_of(content: Any) -> str:
    """The text of a message content; a multimodal list keeps its text parts and marks images."""
    if not isinstance(content, list | tuple):
        return str(content)
    texts = [str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text"]
    text = " ".join(texts)
    if any(isinstance(p, Mapping) and p.get("type") == "image_url" for p in content):
        text += " [+ image]"
    return text


def user_assistant_sequence(events: Any) -> str:
    """``User: ...`` and ``Assistant: ...`` lines, one per user or assistant message (system ones
    are left out, as in NeMo)."""
    return "\n".join(
        f"{_ROLE_LABELS[role]}: {_text_of(content)}"
        for role, content in _turns(events)
        if role in _ROLE_LABELS
    )


def to_chat_messages(events: Any) -> list[dict[str, Any]]:
    """The conversation as ``{"role": ..., "content": ...}`` dicts (content kept as it is)."""
    return [
        {"role": "assistant" if role == "bot" else role, "content": content}
        for role, content in _turns(events)
    ]


def _is_turn_start(line: str) -> bool:
    return line.startswith(('user "', "user action: "))


def first_turns(history: Any, n: int) -> str:
    """The lines of a Colang-style history text before its ``n + 1``-th user turn."""
    lines = str(history).split("\n")
    seen = 0
    for i, line in enumerate(lines):
        if _is_turn_start(line):
            seen += 1
            if seen == n + 1:
                return "\n".join(lines[:i])
    return "\n".join(lines)


def last_turns(history: Any, n: int) -> str:
    """The lines of a Colang-style history text from its ``n``-th user turn counted from the end."""
    lines = str(history).split("\n")
    seen = 0
    i = len(lines) - 1
    while i > 0:
        if _is_turn_start(lines[i]):
            seen += 1
        if seen == n:
            break
        i -= 1
    return "\n".join(lines[i:])


#: The filters added to (or replacing) Jinja's built-ins.
FILTERS: Mapping[str, Callable[..., Any]] = {
    "first_turns": first_turns,
    "indent": indent,
    "last_turns": last_turns,
    "to_chat_messages": to_chat_messages,
    "user_assistant_sequence": user_assistant_sequence,
}

__all__ = [
    "FILTERS",
    "NEMO_DIALOG_FILTERS",
    "REMOVED_FILTERS",
    "first_turns",
    "indent",
    "last_turns",
    "to_chat_messages",
    "user_assistant_sequence",
]
