"""The main model slot: any langchain-core chat model, or the built-in OpenAI-compatible client.

The built-in path calls :class:`ChatClient` directly (no LangChain on the hot path); a user-supplied
``BaseChatModel`` is called through ``ainvoke``. Both report usage so ``explain()`` stays complete.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Protocol

from guardcache.llm.client import ChatClient
from guardcache.llm.types import Usage


class MainLLM(Protocol):
    async def generate(self, messages: Sequence[dict[str, str]]) -> tuple[str, Usage]: ...


class ClientLLM:
    """The built-in main model."""

    def __init__(self, client: ChatClient, params: dict[str, Any] | None = None) -> None:
        self.client = client
        self.params = params or {}

    async def generate(self, messages: Sequence[dict[str, str]]) -> tuple[str, Usage]:
        result = await self.client.complete(messages, **self.params)
        return result.content, result.usage


@functools.cache
def _message_classes() -> dict[str, Any]:
    """Role -> langchain-core message class; imported on first use (it is a heavy import), once."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    return {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}


class LangChainLLM:
    """Any ``langchain_core`` chat model as the main model."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        # Read once: on a pydantic model a missing attribute costs a raised AttributeError per turn.
        self.model_name: str | None = getattr(llm, "model_name", None) or getattr(llm, "model", None)

    async def generate(self, messages: Sequence[dict[str, str]]) -> tuple[str, Usage]:
        kinds = _message_classes()
        human = kinds["user"]
        lc_messages = [kinds.get(m.get("role", "user"), human)(content=m["content"]) for m in messages]
        reply = await self.llm.ainvoke(lc_messages)
        meta = getattr(reply, "usage_metadata", None) or {}
        details = meta.get("input_token_details") or {}
        usage = Usage(
            prompt_tokens=int(meta.get("input_tokens", 0)),
            completion_tokens=int(meta.get("output_tokens", 0)),
            total_tokens=int(meta.get("total_tokens", 0)),
            cached_prompt_tokens=int(details.get("cache_read", 0) or 0),
            model=self.model_name,
            provider="langchain",
        )
        return str(reply.content), usage


__all__ = ["ClientLLM", "LangChainLLM", "MainLLM"]
