"""The main model slot: any langchain-core chat model, or the built-in OpenAI-compatible client.

The built-in path calls :class:`ChatClient` directly (no LangChain on the hot path); a user-supplied
``BaseChatModel`` is called through ``ainvoke`` / ``astream``. Both report usage so ``explain()``
stays complete, and both take per-request generation parameters (``temperature``, ``max_tokens``...)
that override the config's.

Streaming (:meth:`ClientLLM.stream`) is :meth:`ChatClient.stream`: one POST with ``stream: true``
on the same pooled connection and admission gate as every other call, read as server-sent events
within the model's whole-call budget (see :mod:`guardcache.llm.stream`).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol

from guardcache.llm.client import ChatClient
from guardcache.llm.stream import StreamTotals
from guardcache.llm.types import ChatResult, Usage


class MainLLM(Protocol):
    async def generate(self, messages: Sequence[dict[str, str]], **params: Any) -> tuple[str, Usage]: ...

    def stream(
        self, messages: Sequence[dict[str, str]], totals: StreamTotals, **params: Any
    ) -> AsyncIterator[str]: ...


class ClientLLM:
    """The built-in main model."""

    def __init__(self, client: ChatClient, params: dict[str, Any] | None = None) -> None:
        self.client = client
        self.params = params or {}

    async def generate(self, messages: Sequence[dict[str, str]], **params: Any) -> tuple[str, Usage]:
        result = await self.complete(messages, **params)
        return result.content, result.usage

    async def complete(self, messages: Sequence[dict[str, str]], **params: Any) -> ChatResult:
        """The whole result (with ``finish_reason``), for callers that pass it on."""
        merged = {**self.params, **params} if params else self.params
        return await self.client.complete(messages, **merged)

    def stream(
        self, messages: Sequence[dict[str, str]], totals: StreamTotals, **params: Any
    ) -> AsyncIterator[str]:
        """Yield the answer's text deltas as the server sends them; ``totals`` gets the usage and
        finish reason. Raises typed ``BackendError``s (see ``ChatClient.stream``)."""
        merged = {**self.params, **params} if params else self.params
        return self.client.stream(messages, totals, **merged)


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

    def _messages(self, messages: Sequence[dict[str, str]]) -> list[Any]:
        kinds = _message_classes()
        human = kinds["user"]
        return [kinds.get(m.get("role", "user"), human)(content=m["content"]) for m in messages]

    async def generate(self, messages: Sequence[dict[str, str]], **params: Any) -> tuple[str, Usage]:
        llm = self.llm.bind(**params) if params else self.llm
        reply = await llm.ainvoke(self._messages(messages))
        return str(reply.content), self._usage(getattr(reply, "usage_metadata", None))

    async def stream(
        self, messages: Sequence[dict[str, str]], totals: StreamTotals, **params: Any
    ) -> AsyncIterator[str]:
        llm = self.llm.bind(**params) if params else self.llm
        meta: dict[str, Any] = {}
        async for chunk in llm.astream(self._messages(messages)):
            usage = getattr(chunk, "usage_metadata", None)
            if usage:
                for key in ("input_tokens", "output_tokens", "total_tokens"):
                    meta[key] = meta.get(key, 0) + int(usage.get(key, 0) or 0)
            text = chunk.content if isinstance(chunk.content, str) else ""
            if text:
                yield text
        totals.usage = self._usage(meta)
        totals.finish_reason = "stop"

    def _usage(self, meta: Mapping[str, Any] | None) -> Usage:
        meta = meta or {}
        details = meta.get("input_token_details") or {}
        return Usage(
            prompt_tokens=int(meta.get("input_tokens", 0)),
            completion_tokens=int(meta.get("output_tokens", 0)),
            total_tokens=int(meta.get("total_tokens", 0)),
            cached_prompt_tokens=int(details.get("cache_read", 0) or 0),
            model=self.model_name,
            provider="langchain",
        )


__all__ = ["ClientLLM", "LangChainLLM", "MainLLM", "StreamTotals"]
