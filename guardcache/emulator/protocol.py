"""The OpenAI wire format: request validation, completion and chunk bodies, error bodies.

Kept apart from the HTTP layer so the exact shapes (what clients parse) are in one place:
``chat.completion`` with ``choices[{index, message{role, content}, finish_reason, logprobs}]`` and
``usage{prompt_tokens, completion_tokens, total_tokens[, prompt_tokens_details{cached_tokens}]}``;
streaming ``chat.completion.chunk`` events; ``{"error": {"message", "type", "param", "code"}}``, and
vLLM's flat ``{"object": "error", "message", "type", "param", "code"}`` where the NIMs answer with it
(context length exceeded, body too large).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .config import CachedTokensField
from .tools import function_names

_ROLES = frozenset({"system", "user", "assistant", "tool", "developer", "function"})


class RequestError(ValueError):
    """The request body is invalid; ``param`` names the offending field, as OpenAI does."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


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


def error_body(message: str, type_: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def vllm_error_body(message: str, type_: str, status: int) -> dict[str, Any]:
    """vLLM's (and so the NIMs') top-level error shape, e.g. for a prompt over the context length:
    ``{"object": "error", "message": ..., "type": "BadRequestError", "param": null, "code": 400}``."""
    return {"object": "error", "message": message, "type": type_, "param": None, "code": status}


def new_completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def usage_body(
    prompt_tokens: int, completion_tokens: int, cached_tokens: int, field: CachedTokensField
) -> dict[str, Any]:
    """``usage``; ``prompt_tokens_details`` per ``field`` (always / only when cached > 0 / never)."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if field == "always" or (field == "nonzero" and cached_tokens > 0):
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return usage


def completion_body(
    *,
    completion_id: str,
    model: str,
    content: str,
    finish_reason: str,
    usage: dict[str, Any],
    created: int | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A ``chat.completion``; with ``tool_calls``, the message's content is null and holds them."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message = {"role": "assistant", "content": content or None, "tool_calls": tool_calls}
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason,
                "logprobs": None,
            }
        ],
        "usage": usage,
    }


def chunk_body(
    *,
    completion_id: str,
    model: str,
    created: int,
    delta: dict[str, Any] | None,
    finish_reason: str | None = None,
    usage: dict[str, Any] | None = None,
    include_usage: bool = False,
) -> dict[str, Any]:
    """One streaming event; ``delta=None`` is the final usage-only chunk (empty ``choices``)."""
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }
    if include_usage:
        body["usage"] = usage  # null on every chunk but the last, as OpenAI does
    return body


def sse(data: Mapping[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {payload}\n\n".encode()
