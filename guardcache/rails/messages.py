"""The messages a user passes, read into one shape: ``{"role": user|assistant|system|tool, "content": str}``.

Users pass what their stack gives them: OpenAI dicts (``user``/``assistant``/``system``/``developer``/
``tool``), LangChain role names (``human``/``ai``) or LangChain message objects, NeMo's ``bot``. All
mean the same turn, so all are read the same way: a check must never be skipped because the
caller spelled a role differently (an unknown role could otherwise hide the user's message from the
input rails). Wrong types are a ``TypeError`` naming the argument; content the text checks cannot
judge (an image part) is a ``ValueError``: never an unchecked pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

ROLES: Mapping[str, str] = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "bot": "assistant",
    "system": "system",
    "developer": "system",
    "tool": "tool",
    "function": "tool",
}
"""Every role name accepted, OpenAI's, LangChain's and NeMo's, and what it means here."""

Message = dict[str, str]


def read_messages(messages: Any, argument: str = "messages") -> list[Message]:
    """``messages`` as a list of ``{"role", "content"}`` dicts with canonical roles and str content.

    Every cached check pays this, so the common shape (a list of dicts with str content and a
    canonical role) takes a path of exact type tests: ABC ``isinstance`` checks and the error
    location strings cost ~2 us a message, a fifth of a cached check.
    """
    if type(messages) is not list:
        if isinstance(messages, str | bytes | bytearray | Mapping):
            hint = " (to pass one user text, use prompt=...)" if isinstance(messages, str) else ""
            raise TypeError(f"{argument} must be a list of messages, not {type(messages).__name__}{hint}")
        if not isinstance(messages, Sequence):
            raise TypeError(f"{argument} must be a list of messages, not {type(messages).__name__}")
    out: list[Message] = []
    for i, message in enumerate(messages):
        if type(message) is dict:
            role, content = message.get("role"), message.get("content")
            if type(content) is str and type(role) is str and role in _CANONICAL:
                out.append({"role": role, "content": content})
                continue
        out.append(_read(message, f"{argument}[{i}]"))
    return out


_CANONICAL = frozenset(name for name, canonical in ROLES.items() if name == canonical)
"""Role names that read as themselves (the fast path of :func:`read_messages`)."""


def _read(message: Any, where: str) -> Message:
    if isinstance(message, Mapping):
        role, content = message.get("role"), message.get("content")
    elif hasattr(message, "type") and hasattr(message, "content"):  # a LangChain BaseMessage
        role, content = message.type, message.content
    else:
        raise TypeError(
            f"{where} must be a dict with 'role' and 'content' or a LangChain message, "
            f"not {type(message).__name__}"
        )
    if not isinstance(role, str):
        raise TypeError(f"{where}.role must be a str, not {type(role).__name__}")
    canonical = ROLES.get(role.strip().lower())
    if canonical is None:
        known = ", ".join(sorted(ROLES))
        raise ValueError(f"{where}.role: unknown role {role!r} (known: {known})")
    return {"role": canonical, "content": _text(content, where)}


def _text(content: Any, where: str) -> str:
    if content is None:  # an assistant turn that only called tools
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        texts = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, str):
                texts.append(part)
            else:
                got = kind or type(part).__name__
                raise ValueError(f"{where}.content[{j}]: only text parts can be checked (got {got})")
        return "\n".join(texts)
    raise TypeError(f"{where}.content must be a str or a list of text parts, not {type(content).__name__}")


def last_index(messages: Sequence[Message], role: str) -> int | None:
    """The index of the last message with this (canonical) role."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == role:
            return i
    return None


def history(messages: Sequence[Message], end: int) -> tuple[Message, ...]:
    """The user and assistant turns before ``end``: the conversation a topic check reads."""
    return tuple(m for m in messages[:end] if m["role"] in ("user", "assistant"))


__all__ = ["ROLES", "Message", "history", "last_index", "read_messages"]
