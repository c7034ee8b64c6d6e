"""Values the LLM client returns: what one chat completion cost and what it said.

They are frozen so a result can be stored in a cache and handed to many callers without any of them
being able to change what the others see.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True, frozen=True)
class Usage:
    """Token accounting of one chat completion, as the server reported it.

    ``cached_prompt_tokens`` is ``usage.prompt_tokens_details.cached_tokens``: the prompt tokens the
    server took from its KV cache (prefix reuse). Servers omit it when it is 0 (vLLM) or never send
    it, so absent or null reads as 0 — it is a measurement, never a promise.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_prompt_tokens: int = 0
    model: str | None = None
    provider: str | None = None


@dataclass(slots=True, frozen=True)
class ChatResult:
    """The answer of one :meth:`ChatClient.complete` call.

    ``duration`` is measured with ``time.monotonic()`` over the whole call, retries and backoff
    included, because that is the latency the guarded request actually paid. ``attempts`` counts
    HTTP requests sent (1 = no retry). ``tool_calls``: the answer's tool calls as the model sent
    them (a main model's client only, ``ChatClient(tool_calls=True)``; unchecked and unvalidated:
    the rails judge them, ``guardcache.rails.tools``).
    """

    content: str
    usage: Usage
    duration: float
    finish_reason: str | None = None
    attempts: int = 1
    tool_calls: tuple[Any, ...] = ()


__all__ = ["ChatResult", "Usage"]
