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
import json
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from guardcache.llm.client import ChatClient
from guardcache.llm.stream import StreamTotals
from guardcache.llm.types import ChatResult, Usage
from guardcache.rails.tools import from_langchain, tool_names


class MainLLM(Protocol):
    """What the turn needs of a main model. Both built-in ones also have ``complete(messages,
    **params) -> ChatResult``: the whole answer, finish reason and tool calls (as the model sent
    them) included, which the turn uses when a main model has it."""

    async def generate(self, messages: Sequence[dict[str, str]], **params: Any) -> tuple[str, Usage]: ...

    def stream(
        self, messages: Sequence[dict[str, str]], totals: StreamTotals, **params: Any
    ) -> AsyncIterator[str]: ...


_CHAT_COMPLETE = ChatClient.complete


class ClientLLM:
    """The built-in main model."""

    def __init__(self, client: ChatClient, params: dict[str, Any] | None = None) -> None:
        self.client = client
        self.params = params or {}
        # Tools the config's own parameters offer (a request's ``tools`` add to them per turn).
        self.tool_names = tool_names(self.params.get("tools"))

    async def generate(self, messages: Sequence[dict[str, str]], **params: Any) -> tuple[str, Usage]:
        result = await self.complete(messages, **params)
        return result.content, result.usage

    def complete(self, messages: Sequence[dict[str, str]], **params: Any) -> Awaitable[ChatResult]:
        """The whole result (with ``finish_reason``), for callers that pass it on: the client's
        call (a coroutine) returned as it is, not awaited in a coroutine of this method's own.

        A client whose ``complete`` is :meth:`ChatClient.complete` itself (not overridden, not
        replaced on the instance) is sent its body straight (``send``: what that ``complete``
        does, two coroutines fewer per turn); any other is called as it is."""
        merged = {**self.params, **params} if params else self.params
        client = self.client
        if (
            getattr(client.complete, "__func__", None) is _CHAT_COMPLETE
            and "deadline" not in merged  # (complete's own arguments: not body fields)
            and "messages" not in merged
        ):
            return client.send(client.request_body(messages, merged))
        return client.complete(messages, **merged)

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
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    return {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage, "tool": ToolMessage}


def _binding_kwargs(llm: Any) -> Iterator[Mapping[str, Any]]:
    """The keyword arguments of ``llm`` and of every binding under it: ``llm.bind_tools([...])``
    puts the tools in a ``RunnableBinding``'s ``kwargs``, which ``with_config`` or another ``bind``
    wraps again (``RunnableRails`` wraps the model in ``with_config(callbacks=[])``)."""
    while llm is not None:
        kwargs = getattr(llm, "kwargs", None)
        if isinstance(kwargs, Mapping):
            yield kwargs
        llm = getattr(llm, "bound", None)


def bound_tools(llm: Any) -> frozenset[str]:
    """The function names a LangChain model was given with ``bind_tools`` (OpenAI's shape in the
    binding's ``tools``), through any bindings around it."""
    names: set[str] = set()
    for kwargs in _binding_kwargs(llm):
        names |= tool_names(kwargs.get("tools"))
    return frozenset(names)


def binds_tools(llm: Any) -> bool:
    """Whether a LangChain model was given tools (or legacy functions) in any binding around it: a
    model that may act, which must not start before the input verdict."""
    return any(kwargs.get("tools") or kwargs.get("functions") for kwargs in _binding_kwargs(llm))


class LangChainLLM:
    """Any ``langchain_core`` chat model as the main model."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        # Read once: on a pydantic model a missing attribute costs a raised AttributeError per turn.
        self.model_name: str | None = getattr(llm, "model_name", None) or getattr(llm, "model", None)
        # The tools bound to the model (``llm.bind_tools``): the only ones its tool calls may name.
        self.tool_names = bound_tools(llm)

    def _messages(self, messages: Sequence[dict[str, Any]]) -> list[Any]:
        kinds = _message_classes()
        human = kinds["user"]
        out = []
        for m in messages:
            role = m.get("role", "user")
            if role == "tool":
                out.append(kinds["tool"](content=m["content"], tool_call_id=m.get("tool_call_id") or ""))
            elif role == "assistant" and m.get("tool_calls"):
                out.append(kinds["assistant"](content=m["content"], tool_calls=_lc_calls(m["tool_calls"])))
            else:
                out.append(kinds.get(role, human)(content=m["content"]))
        return out

    async def generate(self, messages: Sequence[dict[str, str]], **params: Any) -> tuple[str, Usage]:
        result = await self.complete(messages, **params)
        return result.content, result.usage

    async def complete(self, messages: Sequence[dict[str, str]], **params: Any) -> ChatResult:
        llm = self.llm.bind(**params) if params else self.llm
        reply = await llm.ainvoke(self._messages(messages))
        return self._result(reply, str(reply.content) if isinstance(reply.content, str) else "")

    def _result(self, reply: Any, content: str) -> ChatResult:
        """A LangChain reply as a ``ChatResult``: its tool calls (valid and invalid) in OpenAI's
        shape, ``finish_reason`` ``"tool_calls"`` when it has any."""
        calls = from_langchain(
            getattr(reply, "tool_calls", None) or (), getattr(reply, "invalid_tool_calls", None) or ()
        )
        return ChatResult(
            content=content,
            usage=self._usage(getattr(reply, "usage_metadata", None)),
            duration=0.0,
            finish_reason="tool_calls" if calls else "stop",
            tool_calls=tuple(calls),
        )

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
            add_tool_call_chunks(totals, chunk)
        totals.usage = self._usage(meta)
        totals.finish_reason = "tool_calls" if totals.tool_calls else "stop"

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


def add_tool_call_chunks(totals: StreamTotals, chunk: Any) -> None:
    """A LangChain stream chunk's ``tool_call_chunks`` (``{"name", "args", "id", "index"}``, strings
    in pieces) into ``totals``, as OpenAI deltas."""
    for piece in getattr(chunk, "tool_call_chunks", None) or ():
        index = piece.get("index")
        function = {"name": piece.get("name"), "arguments": piece.get("args")}
        totals.add_tool_call_delta(
            {"index": index if index is not None else 0, "id": piece.get("id"), "function": function}
        )


def _lc_calls(calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A conversation's assistant tool calls (OpenAI's shape) as LangChain's; arguments that are not
    a JSON object are passed as an empty one (they were the caller's, and ran already)."""
    out = []
    for call in calls:
        function = call.get("function") or {}
        try:
            args = json.loads(function.get("arguments") or "{}")
        except ValueError:
            args = {}
        out.append(
            {
                "name": function.get("name", ""),
                "args": args if isinstance(args, dict) else {},
                "id": call.get("id"),
                "type": "tool_call",
            }
        )
    return out


__all__ = ["ClientLLM", "LangChainLLM", "MainLLM", "StreamTotals", "add_tool_call_chunks"]
