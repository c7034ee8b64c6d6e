"""The messages a user passes, read into one shape: ``{"role": user|assistant|system|tool, "content": str}``.

Users pass what their stack gives them: OpenAI dicts (``user``/``assistant``/``system``/``developer``/
``tool``), LangChain role names (``human``/``ai``) or LangChain message objects, NeMo's ``bot``. All
mean the same turn, so all are read the same way: a check must never be skipped because the
caller spelled a role differently (an unknown role could otherwise hide the user's message from the
input rails). Wrong types are a ``TypeError`` naming the argument; content the rails cannot judge is
a ``ValueError`` naming the part: never an unchecked pass.

Images (``image_url`` parts) are read only when the caller says the config's rails can judge them
(``images``: a vision rail reads the user's message, and no text-only rail does; see
``RailsConfig.image_limits``), and only in the last user message, the one the input rails check:
its content is then :class:`~guardcache.prompts.parts.ContentParts` (a list of OpenAI part dicts,
what the main model and the vision rail are sent). An image anywhere else would reach the main
model unchecked, so it is refused like any image a config cannot judge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from guardcache.prompts.parts import ContentParts, ImageLimits, ImagePart, read_parts
from guardcache.rails.tools import from_langchain, read_tool_calls

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

Message = dict[str, Any]
"""``{"role": ..., "content": str}``; the last user message's content may be ``ContentParts``; an
assistant message may hold ``tool_calls`` (OpenAI's shape) and a tool result ``tool_call_id`` and
``name``, passed to the main model as they are."""


def read_messages(
    messages: Any, argument: str = "messages", *, images: ImageLimits | None = None
) -> list[Message]:
    """``messages`` as a list of ``{"role", "content"}`` dicts with canonical roles and str content
    (``ContentParts`` for a last user message with images, when ``images`` allows them).

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
    with_images: list[int] = []
    for i, message in enumerate(messages):
        if type(message) is dict:
            role, content = message.get("role"), message.get("content")
            if (
                type(content) is str
                and type(role) is str
                and role in _PLAIN
                and not message.get("tool_calls")
            ):
                out.append({"role": role, "content": content})
                continue
        read = _read(message, f"{argument}[{i}]", images)
        if read["content"].__class__ is ContentParts:
            with_images.append(i)
        out.append(read)
    if with_images:
        checked = last_index(out, "user")
        for i in with_images:
            if i != checked:
                content = out[i]["content"]
                j = next(j for j, part in enumerate(content.parts) if isinstance(part, ImagePart))
                raise ValueError(
                    f"{argument}[{i}].content[{j}]: images are only checked in the last user message "
                    "(the one the input rails judge); an image elsewhere would reach the main model unchecked"
                )
    return out


_CANONICAL = frozenset(name for name, canonical in ROLES.items() if name == canonical)
"""Role names that read as themselves."""
_PLAIN = _CANONICAL - {"tool"}
"""Roles whose message is its role and text alone (the fast path of :func:`read_messages`): a tool
result also has its call's id."""


def _read(message: Any, where: str, images: ImageLimits | None) -> Message:
    extra: dict[str, Any] = {}
    if isinstance(message, Mapping):
        role, content = message.get("role"), message.get("content")
        calls = message.get("tool_calls")
        if calls:
            extra["tool_calls"] = read_tool_calls(calls, f"{where}.tool_calls")
        for key in ("tool_call_id", "name"):
            value = message.get(key)
            if value is not None:
                if not isinstance(value, str):
                    raise TypeError(f"{where}.{key} must be a str, not {type(value).__name__}")
                extra[key] = value
    elif hasattr(message, "type") and hasattr(message, "content"):  # a LangChain BaseMessage
        role, content = message.type, message.content
        calls = getattr(message, "tool_calls", None)
        invalid = getattr(message, "invalid_tool_calls", None)
        if calls or invalid:
            extra["tool_calls"] = from_langchain(calls or (), invalid or ())
        call_id = getattr(message, "tool_call_id", None)
        if isinstance(call_id, str):
            extra["tool_call_id"] = call_id
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
    if "tool_calls" in extra and canonical != "assistant":
        raise ValueError(f"{where}.tool_calls: only the assistant's messages call tools")
    return {"role": canonical, "content": _content(content, where, images), **extra}


def _content(content: Any, where: str, images: ImageLimits | None) -> str | ContentParts:
    if content is None:  # an assistant turn that only called tools
        return ""
    if isinstance(content, str):
        return content
    if content.__class__ is ContentParts and images is not None and _within(content, images):
        return content  # read already (a RunnableRails input read again by generate_async)
    if isinstance(content, list):  # OpenAI content parts: text, and images when a rail judges them
        return read_parts(content, f"{where}.content", images)
    raise TypeError(f"{where}.content must be a str or a list of content parts, not {type(content).__name__}")


def _within(content: ContentParts, limits: ImageLimits) -> bool:
    found = content.images
    return len(found) <= limits.max_images and all(image.size <= limits.max_bytes for image in found)


def message_text(content: str | ContentParts) -> str:
    """A message's text: the content, or the text parts of content with images (what the refusal's
    language is detected from)."""
    return content.text if isinstance(content, ContentParts) else content


def last_index(messages: Sequence[Message], role: str) -> int | None:
    """The index of the last message with this (canonical) role."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == role:
            return i
    return None


def history(messages: Sequence[Message], end: int) -> tuple[Message, ...]:
    """The user and assistant turns before ``end``: the conversation a topic check reads."""
    return tuple(m for m in messages[:end] if m["role"] in ("user", "assistant"))


__all__ = ["ROLES", "Message", "history", "last_index", "message_text", "read_messages"]
