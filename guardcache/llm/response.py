"""Reading an OpenAI-compatible chat completion body: the answer strictly, the usage leniently.

The answer (``choices[0].message.content``) is what a rail decides on, so anything but a string
there is a protocol failure. The usage is accounting, so a missing or odd count reads as 0 rather
than failing a call whose answer is fine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from guardcache.llm.types import Usage

_MAX_DETAIL = 160  # characters of a server's error message kept in our error messages


class MalformedResponse(ValueError):
    """A 2xx body is not the OpenAI chat completion shape; the message says what is missing."""


@dataclass(slots=True, frozen=True)
class Completion:
    """The parts of a chat completion body the client uses."""

    content: str
    finish_reason: str | None
    model: str | None
    usage: object  # the raw ``usage`` value, for :func:`parse_usage`


def read_completion(data: object) -> Completion:
    """Pick ``choices[0].message.content`` and friends out of a decoded JSON body.

    Raises:
        MalformedResponse: not an object, no ``choices[0]``, or no string ``content``.
    """
    if not isinstance(data, dict):
        raise MalformedResponse(f"a JSON {type(data).__name__}, not an object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedResponse("no choices[0]")
    choice: dict[str, Any] = choices[0]
    message = choice.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str):
        raise MalformedResponse(
            "no choices[0].message.content string (null content: a tool call or a refusal?)"
        )
    finish_reason = choice.get("finish_reason")
    model = data.get("model")
    return Completion(
        content=content,
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        model=model if isinstance(model, str) and model else None,
        usage=data.get("usage"),
    )


def parse_usage(raw: object, *, model: str | None = None, provider: str | None = None) -> Usage:
    """Read an OpenAI ``usage`` object leniently.

    Missing, null or non-integer counts read as 0; a missing (or 0) ``total_tokens`` is the sum of
    the two others; ``prompt_tokens_details`` and its ``cached_tokens`` may be absent or null (0):
    vLLM omits the object when nothing was cached, other servers never send it.
    """
    if not isinstance(raw, dict):
        return Usage(model=model, provider=provider)
    prompt = _count(raw.get("prompt_tokens"))
    completion = _count(raw.get("completion_tokens"))
    total = _count(raw.get("total_tokens")) or prompt + completion
    details = raw.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=total,
        cached_prompt_tokens=cached,
        model=model,
        provider=provider,
    )


def error_detail(data: object) -> str | None:
    """The server's own error message from a decoded error body, when it is a string.

    Understands the OpenAI (``{"error": {"message"}}``), vLLM/llama.cpp and FastAPI
    (``{"detail": "..."}``) shapes. Only a string message is kept, whitespace-collapsed and cut
    short: structured validation errors can echo the request (user text), which must not reach
    logs.
    """
    if not isinstance(data, dict):
        return None
    candidate: object = None
    error = data.get("error")
    if isinstance(error, dict):
        candidate = error.get("message")
    elif isinstance(error, str):
        candidate = error
    if candidate is None:
        candidate = data.get("message", data.get("detail"))
    if not isinstance(candidate, str) or not candidate.strip():
        return None
    text = " ".join(candidate.split())
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 3] + "..."


def _count(value: object) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, float) and value.is_integer():
        return max(int(value), 0)
    return 0


__all__ = ["Completion", "MalformedResponse", "error_detail", "parse_usage", "read_completion"]
