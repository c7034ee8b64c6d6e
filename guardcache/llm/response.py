"""Reading an OpenAI-compatible chat completion body: the answer strictly, the usage leniently.

The answer (``choices[0].message.content``) is what a rail decides on, so anything but a string
there is a protocol failure. The usage is accounting, so a missing or odd count reads as 0 rather
than failing a call whose answer is fine.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any

from guardcache.llm.types import Usage, quick_init

_IDENTIFIER = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class MalformedResponse(ValueError):
    """A 2xx body is not the OpenAI chat completion shape; the message says what is missing."""


class DeclinedAnswer(ValueError):
    """A well-formed completion in which the model declined to answer: a ``refusal`` instead of
    content, ``finish_reason: "content_filter"``, or null content with nothing else. The message
    says which, never what the refusal said (it can quote the user)."""


@quick_init
@dataclass(slots=True, frozen=True)
class Completion:
    """The parts of a chat completion body the client uses."""

    content: str
    finish_reason: str | None
    model: str | None
    usage: object  # the raw ``usage`` value, for :func:`parse_usage`
    tool_calls: tuple[Any, ...] = ()  # as sent (``read_completion(tools=True)`` only)


def read_completion(data: object, *, tools: bool = False) -> Completion:
    """Pick ``choices[0].message.content`` and friends out of a decoded JSON body.

    ``tools`` (a main model's answers): a message with ``tool_calls`` may have null content (read
    as ""), and its tool calls are returned as they are, whatever their shape (a ``tool_calls``
    that is not an array is one item): the rails judge them, and a malformed one blocks the turn.
    A guard's answer (``tools`` False) is text or nothing: a tool call is no verdict.

    Raises:
        DeclinedAnswer: the model declined (see the class); checked before the content's type,
            because a declining answer has no content to read.
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
    finish_reason = choice.get("finish_reason")
    calls: tuple[Any, ...] = ()
    if tools and isinstance(message, dict):
        raw = message.get("tool_calls")
        if raw is not None and raw != []:
            calls = tuple(raw) if isinstance(raw, list) else (raw,)
            if content is None:
                content = ""
    if finish_reason == "content_filter":
        raise DeclinedAnswer("finish_reason content_filter (the provider's filter withheld the answer)")
    if not isinstance(content, str):
        if isinstance(message, dict) and content is None:
            if isinstance(message.get("refusal"), str):
                raise DeclinedAnswer("a refusal instead of content")
            if not message.get("tool_calls") and not message.get("function_call"):
                raise DeclinedAnswer("null content")
        raise MalformedResponse(
            "no choices[0].message.content string (null content: a tool call or a refusal?)"
        )
    model = data.get("model")
    # Positional: a frozen dataclass built from keywords costs about twice as much (every main call).
    return Completion(
        content,
        finish_reason if isinstance(finish_reason, str) else None,
        model if isinstance(model, str) and model else None,
        data.get("usage"),
        calls,
    )


def parse_usage(raw: object, *, model: str | None = None, provider: str | None = None) -> Usage:
    """Read an OpenAI ``usage`` object leniently.

    Missing, null or non-integer counts read as 0; a missing (or 0) ``total_tokens`` is the sum of
    the two others; ``prompt_tokens_details`` and its ``cached_tokens`` may be absent or null (0):
    vLLM omits the object when nothing was cached, other servers never send it.
    """
    # Interned: a cached verdict keeps its usage, and a model name decoded from each response body
    # would be one more ~90 B string per cache entry.
    model = sys.intern(model) if model else model
    if not isinstance(raw, dict):
        return Usage(model=model, provider=provider)
    # Counts that are non-negative ints (every server's) are taken as they are, without a call each.
    prompt = raw.get("prompt_tokens")
    if type(prompt) is not int or prompt < 0:
        prompt = _count(prompt)
    completion = raw.get("completion_tokens")
    if type(completion) is not int or completion < 0:
        completion = _count(completion)
    total = raw.get("total_tokens")
    if type(total) is not int or total < 0:
        total = _count(total)
    total = total or prompt + completion
    details = raw.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return Usage(prompt, completion, total, cached, model, provider)  # positional: see read_completion


def error_summary(data: object) -> str | None:
    """A short, non-echoing summary of a decoded error body: its identifier-like fields only.

    Why not the server's message: error bodies quote the request. A 400 from vLLM or a NIM says
    "This model's maximum context length is 8192 tokens. However, you requested ..." and FastAPI's
    422 lists each invalid field with its ``input``, i.e. the user's text, which must never reach
    logs or error messages (prompts can hold personal data). So only ``type`` and ``code`` are kept
    (OpenAI's ``{"error": {"type", "code"}}``, vLLM's top-level ones), and only when each looks like
    an identifier (``[A-Za-z0-9_.-]{1,64}``, e.g. ``invalid_request_error``,
    ``context_length_exceeded``, ``400``): free text is dropped, never cut.
    """
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    source: dict[str, Any] = error if isinstance(error, dict) else data
    parts = []
    for name in ("type", "code"):
        value = source.get(name)
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            value = str(value)
        if isinstance(value, str) and _IDENTIFIER.fullmatch(value):
            parts.append(f"{name}={value}")
    return ", ".join(parts) or None


def _count(value: object) -> int:
    if type(value) is int:  # the usual case, first: bool is not int by type
        return value if value > 0 else 0
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, float) and value.is_integer():
        return max(int(value), 0)
    return 0


__all__ = [
    "Completion",
    "DeclinedAnswer",
    "MalformedResponse",
    "error_summary",
    "parse_usage",
    "read_completion",
]
