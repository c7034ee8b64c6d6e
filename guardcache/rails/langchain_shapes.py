"""What a LangChain caller hands ``RunnableRails`` and the shape of what it gets back: every input
NeMo's ``RunnableRails`` takes read into the turn's messages (and the reply's shape), the wrapped
model's or chain's output read into the text the output rails judge, and the reply rebuilt from the
checked text only (never a field the rails did not read). Pure: no I/O, no turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ChatMessage
from langchain_core.prompt_values import PromptValue, StringPromptValue

from guardcache.rails.messages import Message, read_messages
from guardcache.rails.tools import to_langchain

TEXT, MESSAGE, DICT = "text", "message", "dict"
"""The kinds of reply: text, an ``AIMessage``, a ``{\"role\", \"content\"}`` dict."""


class Shape(NamedTuple):
    """The shape of the reply a caller gets: its kind, and whether it is wrapped in a dict."""

    kind: str  # the reply as text, as an AIMessage, or as a {"role", "content"} dict
    keyed: bool  # wrapped as {output_key: reply} (the input was a dict)


def _as_message(item: Any) -> Any:
    """A LangChain ``ChatMessage`` (type ``"chat"``) as the dict of its role; anything else as is."""
    if isinstance(item, ChatMessage):
        return {"role": item.role, "content": item.content}
    return item


def _list_kind(items: Sequence[Any]) -> str:
    return MESSAGE if items and all(isinstance(m, BaseMessage) for m in items) else DICT


def _read_value(value: Any, where: str) -> tuple[list[Message], str] | None:
    """Messages and reply kind of a text, prompt value, message or list of messages (else None)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}], TEXT
    if isinstance(value, StringPromptValue):
        return [{"role": "user", "content": value.text}], TEXT
    if isinstance(value, PromptValue):  # ChatPromptValue
        items = value.to_messages()
        return read_messages([_as_message(m) for m in items], where), MESSAGE
    if isinstance(value, BaseMessage):
        return read_messages([_as_message(value)], where), MESSAGE
    if isinstance(value, list):
        return read_messages([_as_message(m) for m in value], where), _list_kind(value)
    return None


def read_input(value: Any, input_key: str) -> tuple[list[Message], Shape]:
    """The turn's messages and the shape of its reply, from any input NeMo's RunnableRails takes."""
    read = _read_value(value, "input")
    if read is not None:
        return read[0], Shape(read[1], keyed=False)
    if isinstance(value, Mapping):
        key = input_key if input_key in value else "input" if "input" in value else None
        if key is None:
            raise ValueError(
                f"RunnableRails: expected the key {input_key!r} (or 'input') in the input dict; "
                f"it has {sorted(map(str, value))}"
            )
        read = _read_value(value[key], f"input[{key!r}]")
        if read is None:
            raise ValueError(
                f"RunnableRails: input[{key!r}] must be a str, a message or a list of messages, "
                f"not {type(value[key]).__name__}"
            )
        return read[0], Shape(read[1], keyed=True)
    raise ValueError(
        f"RunnableRails: unsupported input type {type(value).__name__!r}; supported: str, a dict with "
        "the input key, a message, a list of messages, ChatPromptValue, StringPromptValue"
    )


def _content_text(content: Any) -> str:
    """The text of a message's content: a str, or the text parts of a list (other parts are not
    text the rails can read, and are never handed on)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and part.get("type") == "text":
                parts.append(str(part.get("text") or ""))
        return "".join(parts)
    return "" if content is None else str(content)


def output_text(output: Any, output_key: str) -> str:
    """The text of what the wrapped model or chain returned, for the output rails."""
    inner = output[output_key] if isinstance(output, Mapping) and output_key in output else output
    if isinstance(inner, str):
        return inner
    if isinstance(inner, BaseMessage):
        return _content_text(inner.content)
    if isinstance(inner, Mapping) and "role" in inner and isinstance(inner.get("content"), str):
        return str(inner["content"])  # {"role": "assistant", "content": ...}
    raise ValueError(
        f"RunnableRails: the wrapped runnable returned {type(output).__name__}; the output rails need "
        f"its text: a str, a message, or a dict with {output_key!r} holding one"
    )


def chunk_text(chunk: Any, output_key: str) -> str:
    """The text of one streamed chunk ("" for a dict chunk without the output key)."""
    if isinstance(chunk, Mapping) and output_key not in chunk:
        return ""
    return output_text(chunk, output_key)


def ai_message(text: str, like: Any = None, calls: Sequence[Mapping[str, Any]] = ()) -> AIMessage:
    """An ``AIMessage`` holding ``text`` and the judged tool ``calls``; with the id and metadata of
    ``like`` (the model's own reply), never its own tool calls or extra fields: the rails judged
    ``calls``, not the reply object."""
    tool_calls = to_langchain(calls)
    if not isinstance(like, BaseMessage):
        return AIMessage(content=text, tool_calls=tool_calls)
    usage = getattr(like, "usage_metadata", None)
    return AIMessage(
        content=text,
        id=like.id,
        response_metadata=dict(like.response_metadata),
        usage_metadata=usage,
        tool_calls=tool_calls,
    )


def replaced(output: Any, text: str, output_key: str) -> Any:
    """A wrapped chain's ``output`` with its text replaced by ``text`` (the checked text or the
    refusal), in the type the chain returned."""
    if isinstance(output, Mapping) and output_key in output:
        return {**output, output_key: replaced(output[output_key], text, output_key)}
    if isinstance(output, BaseMessage):
        return ai_message(text, output)
    if isinstance(output, Mapping) and "role" in output:
        return {"role": "assistant", "content": text}
    return text


def call_chunks(calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Judged tool calls as one stream chunk's ``tool_call_chunks`` (each whole, by index)."""
    return [
        {
            "name": call["function"]["name"],
            "args": call["function"]["arguments"],
            "id": call.get("id") or None,
            "index": i,
            "type": "tool_call_chunk",
        }
        for i, call in enumerate(calls)
    ]


def shaped(
    text: str,
    shape: Shape,
    output_key: str,
    *,
    like: Any = None,
    chunk: bool = False,
    calls: Sequence[Mapping[str, Any]] = (),
) -> Any:
    """The reply ``text`` (and the judged tool ``calls``) in the shape the caller's input asks for:
    text, an ``AIMessage`` (an ``AIMessageChunk`` when ``chunk``), a ``{"role", "content"}`` dict;
    under ``output_key`` when the input was a dict."""
    value: Any
    if shape.kind == TEXT:
        value = text
    elif shape.kind == MESSAGE:
        if chunk:
            value = AIMessageChunk(content=text, tool_call_chunks=call_chunks(calls))  # type: ignore[arg-type]
        else:
            value = ai_message(text, like, calls)
    elif calls:
        value = {"role": "assistant", "content": text, "tool_calls": [dict(c) for c in calls]}
    else:
        value = {"role": "assistant", "content": text}
    return {output_key: value} if shape.keyed else value


__all__ = [
    "DICT",
    "MESSAGE",
    "TEXT",
    "Shape",
    "ai_message",
    "call_chunks",
    "chunk_text",
    "output_text",
    "read_input",
    "replaced",
    "shaped",
]
