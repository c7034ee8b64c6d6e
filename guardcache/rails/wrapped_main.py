"""The main model of ``guardrails | llm`` (or ``| chain``): the wrapped LangChain model or chain in the
turn's main-model slot, and the call of the running turn (the caller's original input, what the
runnable returned) that ``RunnableRails`` reads back after the turn.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableBinding

from guardcache.llm.stream import StreamTotals
from guardcache.llm.types import ChatResult
from guardcache.rails.langchain_shapes import chunk_text, output_text
from guardcache.rails.main_llm import LangChainLLM, add_tool_call_chunks


class Call:
    """One turn's call of the wrapped runnable: the caller's input, and what the runnable returned."""

    __slots__ = ("input", "output")

    def __init__(self, value: Any) -> None:
        self.input = value
        self.output: Any = None


CALL: contextvars.ContextVar[Call | None] = contextvars.ContextVar("guardcache_runnable_call", default=None)
"""The running turn's call (the turn's tasks copy it: an early main call sees it too)."""


class WrappedMain(LangChainLLM):
    """The main model slot of ``guardrails | llm`` (or ``| chain``).

    A model gets the turn's messages (as ``LLMRails(config, llm=...)``); a chain gets the caller's
    original input. Either runs with ``callbacks=[]``: its raw answer is unchecked, and the run's
    callbacks (stream events an app may show its user) must only see the rails' checked output.
    """

    def __init__(self, runnable: Runnable[Any, Any], *, chain: bool, output_key: str) -> None:
        super().__init__(runnable.with_config(callbacks=[]))
        self.chain = chain
        self.output_key = output_key

    def _input(self, messages: Sequence[dict[str, str]]) -> Any:
        if not self.chain:
            return self._messages(messages)
        call = CALL.get()
        if call is None:
            raise RuntimeError("a chain wrapped by RunnableRails runs only in a RunnableRails turn")
        return call.input

    def _bound(self, params: Mapping[str, Any]) -> Any:
        return self.llm.bind(**params) if params and not self.chain else self.llm

    async def complete(self, messages: Sequence[dict[str, str]], **params: Any) -> ChatResult:
        output = await self._bound(params).ainvoke(self._input(messages))
        call = CALL.get()
        if call is not None:
            call.output = output
        text = output_text(output, self.output_key)
        if not self.chain and isinstance(output, BaseMessage):  # a model's reply: its tool calls too
            return self._result(output, text)
        usage = self._usage(getattr(output, "usage_metadata", None))
        return ChatResult(content=text, usage=usage, duration=0.0, finish_reason="stop")

    async def stream(
        self, messages: Sequence[dict[str, str]], totals: StreamTotals, **params: Any
    ) -> AsyncIterator[str]:
        meta: dict[str, Any] = {}
        async for chunk in self._bound(params).astream(self._input(messages)):
            usage = getattr(chunk, "usage_metadata", None)
            if usage:
                for key in ("input_tokens", "output_tokens", "total_tokens"):
                    meta[key] = meta.get(key, 0) + int(usage.get(key, 0) or 0)
            text = chunk_text(chunk, self.output_key)
            if text:
                yield text
            if not self.chain:
                add_tool_call_chunks(totals, chunk)
        totals.usage = self._usage(meta)
        totals.finish_reason = "tool_calls" if totals.tool_calls else "stop"


def is_model(value: Any) -> bool:
    """A LangChain language model, or a binding of one (``llm.bind(...)``, ``llm.with_config()``)."""
    while isinstance(value, RunnableBinding):
        value = value.bound
    return isinstance(value, BaseLanguageModel)


__all__ = ["CALL", "Call", "WrappedMain", "is_model"]
