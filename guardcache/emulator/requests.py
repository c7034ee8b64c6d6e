"""What the emulator reads from a chat-completions request: :class:`ChatRequest`.

Lenient where a NIM is (every field an OpenAI client sends is accepted, the few it honours are
checked); a request it cannot read is a :class:`~guardcache.openai_wire.RequestError` naming the
field. The answers' shapes are the one wire format both servers write
(:mod:`guardcache.openai_wire`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guardcache.openai_wire import RequestError

from .tools import function_names

_ROLES = frozenset({"system", "user", "assistant", "tool", "developer", "function"})


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """The parts of a chat-completions request the emulator honours (the rest is accepted)."""

    messages: tuple[Mapping[str, Any], ...]
    model: str
    max_tokens: int
    stream: bool
    include_usage: bool
    max_tokens_given: bool = True  # False: max_tokens is the server default, capped by the context
    tools: tuple[str, ...] = ()  # the function names ``tools`` offers (see tools.py)
    tool_choice: Any = None
    parallel_tool_calls: bool = True

    @classmethod
    def from_body(cls, body: Any, *, default_model: str, default_max_tokens: int) -> ChatRequest:
        if not isinstance(body, Mapping):
            raise RequestError("The request body must be a JSON object.")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("'messages' must be a non-empty array.", "messages")
        for i, message in enumerate(messages):
            if not isinstance(message, Mapping) or message.get("role") not in _ROLES:
                raise RequestError(f"messages[{i}] must be an object with a valid 'role'.", f"messages[{i}]")
            content = message.get("content")
            if content is not None and not isinstance(content, str | list):
                raise RequestError(
                    f"messages[{i}].content must be a string or an array of parts.",
                    f"messages[{i}].content",
                )
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        given = max_tokens is not None
        if max_tokens is None:
            max_tokens = default_max_tokens
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise RequestError("'max_tokens' must be a positive integer.", "max_tokens")
        model = body.get("model") or default_model
        if not isinstance(model, str):
            raise RequestError("'model' must be a string.", "model")
        stream = body.get("stream") or False
        options = body.get("stream_options") or {}
        if not isinstance(options, Mapping):
            raise RequestError("'stream_options' must be an object.", "stream_options")
        tools = body.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise RequestError("'tools' must be an array.", "tools")
        return cls(
            messages=tuple(messages),
            model=model,
            max_tokens=max_tokens,
            stream=bool(stream),
            include_usage=bool(options.get("include_usage", False)),
            max_tokens_given=given,
            tools=function_names(tools),
            tool_choice=body.get("tool_choice"),
            parallel_tool_calls=body.get("parallel_tool_calls") is not False,
        )


__all__ = ["ChatRequest"]
