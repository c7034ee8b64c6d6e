"""The OpenAI wire format as guardcache's two servers write it: ``guardcache serve`` (``server/``)
and the NIM emulator (``emulator/``). A leaf: it imports nothing of guardcache.

Why one module: both servers answer OpenAI clients, so the shapes those clients parse (a
``chat.completion``, its ``usage``, a ``chat.completion.chunk``, the error object, the refusal of a
request) must be one definition, not two that drift. What each server reads from a request stays
its own: ``serve`` validates strictly and refuses what the rails cannot guard
(``server/protocol.py``), the emulator accepts what a NIM accepts (``emulator/requests.py``).

The shapes: ``chat.completion`` with ``choices[{index, message{role, content[, tool_calls]},
finish_reason, logprobs}]`` and ``usage{prompt_tokens, completion_tokens, total_tokens[,
prompt_tokens_details{cached_tokens}]}``; ``chat.completion.chunk``; ``{"error": {"message", "type",
"param", "code"}}``, and vLLM's flat ``{"object": "error", ...}`` where the NIMs answer with it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any


class RequestError(ValueError):
    """A request that cannot be served: answered with ``status`` and OpenAI's error body, ``param``
    naming the offending field, as OpenAI does."""

    def __init__(
        self,
        message: str,
        param: str | None = None,
        *,
        status: int = 400,
        code: str | None = None,
        type: str = "invalid_request_error",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.code = code
        self.type = type
        self.headers = dict(headers) if headers else {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.code, self.param)


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def vllm_error_body(message: str, type_: str, status: int) -> dict[str, Any]:
    """vLLM's (and so the NIMs') top-level error shape, e.g. for a prompt over the context length:
    ``{"object": "error", "message": ..., "type": "BadRequestError", "param": null, "code": 400}``."""
    return {"object": "error", "message": message, "type": type_, "param": None, "code": status}


def kind_of(value: Any) -> str:
    """What kind of JSON value ``value`` is, for a refusal's message (``"an array"``, ``"null"``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def usage_body(
    prompt_tokens: int,
    completion_tokens: int,
    total_tokens: int | None = None,
    cached_tokens: int | None = None,
) -> dict[str, Any]:
    """``usage``: ``total_tokens`` is the sum unless given (a backend's own count is passed on as
    it said it); ``prompt_tokens_details.cached_tokens`` only when ``cached_tokens`` is given."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens if total_tokens is None else total_tokens,
    }
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return usage


NO_USAGE: Mapping[str, int] = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
"""The ``usage`` of an answer whose model reported none (OpenAI's clients expect the object)."""


def completion_body(
    completion_id: str,
    model: str,
    content: str,
    finish_reason: str,
    usage: Mapping[str, Any],
    *,
    created: int | None = None,
    tool_calls: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """A ``chat.completion``; with ``tool_calls``, its message holds them and its content is null
    when there is no text, as OpenAI's."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message = {
            "role": "assistant",
            "content": content or None,
            "tool_calls": [dict(c) for c in tool_calls],
        }
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": usage,
    }


def chunk_body(
    *,
    completion_id: str,
    model: str,
    created: int,
    delta: dict[str, Any] | None,
    finish_reason: str | None = None,
    usage: Mapping[str, Any] | None = None,
    include_usage: bool = False,
) -> dict[str, Any]:
    """One streaming event; ``delta=None`` is the final usage-only chunk (empty ``choices``).
    (``serve`` writes the same events from fragments encoded once per completion:
    ``server/answers.py``'s ``ChunkWriter``.)"""
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


__all__ = [
    "NO_USAGE",
    "RequestError",
    "chunk_body",
    "completion_body",
    "error_body",
    "kind_of",
    "usage_body",
    "vllm_error_body",
]
