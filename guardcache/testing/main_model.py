"""A fake main model: a LangChain chat model that echoes the last message, for tests and benchmarks.

    rails = LLMRails(config, llm=EchoChatModel())                 # replies with the user's text
    rails = LLMRails(config, llm=EchoChatModel(prefix="Sure: "))  # "Sure: <the user's text>"

The guard checks still run against their (emulated) NIMs; only the main model is replaced, so a test
needs no main-model server (``rails.explain().llm_calls`` shows whether a turn reached it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult


class EchoChatModel(BaseChatModel):
    """Answers ``prefix + <the last message's text>`` after ``delay_s`` seconds.

    ``_agenerate`` is native (LangChain does not hand it to a thread), and ``delay_s == 0`` never
    sleeps (not even ``sleep(0)``), so the model costs only LangChain's own ``ainvoke`` machinery:
    cheap enough for throughput benchmarks.
    """

    prefix: str = ""
    delay_s: float = 0.0

    @property
    def _llm_type(self) -> str:
        return "guardcache-echo"

    def reply_to(self, text: str) -> str:
        """What the model answers to a last message ``text``."""
        return self.prefix + text

    def _result(self, messages: Sequence[BaseMessage]) -> ChatResult:
        text = str(messages[-1].content) if messages else ""
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=self.reply_to(text)))])

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        if self.delay_s:
            time.sleep(self.delay_s)
        return self._result(messages)

    async def _agenerate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return self._result(messages)


__all__ = ["EchoChatModel"]
