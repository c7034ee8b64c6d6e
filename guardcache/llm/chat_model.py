"""The OpenAI-compatible client as a langchain-core chat model, for the main LLM slot.

``GuardcacheChatModel`` is a thin adapter: LangChain messages in, :meth:`ChatClient.complete` on the
wire, an ``AIMessage`` with ``usage_metadata`` out. It is deliberately pure: it records nothing in
:mod:`guardcache.llm.records`, because only the runtime knows what a call was for (its task name).

No loop-bound resource is held on the model: its ChatClient gets connections from the pool of the
running loop, so one model instance serves ``ainvoke`` on any loop and ``invoke`` from plain code.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx2
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LangSmithParams
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.ai import InputTokenDetails, UsageMetadata
from langchain_core.outputs import ChatGeneration
from langchain_core.outputs import ChatResult as LCChatResult
from pydantic import Field, PrivateAttr, SecretStr

from guardcache.llm.client import ChatClient
from guardcache.llm.default_pools import aclose_all
from guardcache.llm.retry import RetryPolicy
from guardcache.llm.transport_contract import MAIN_LIMITS
from guardcache.llm.types import ChatResult


def message_text(message: BaseMessage) -> str:
    """A message's text content blocks joined: ``message.text``, a string from langchain-core 1.0 on
    and a method before it (0.3, which NeMo Guardrails installs too)."""
    text = message.text
    return text if isinstance(text, str) else str(text())


def to_openai_messages(messages: Sequence[BaseMessage]) -> list[dict[str, str]]:
    """Convert LangChain messages to OpenAI chat messages with string content.

    Content blocks are reduced to their text (``message.text``): the guard and main-LLM backends
    here are text models. Tool messages keep their ``tool_call_id``.

    Raises:
        ValueError: a message type with no OpenAI role (e.g. a deprecated FunctionMessage).
    """
    converted: list[dict[str, str]] = []
    for message in messages:
        text = message_text(message)
        if isinstance(message, SystemMessage):
            converted.append({"role": "system", "content": text})
        elif isinstance(message, HumanMessage):
            converted.append({"role": "user", "content": text})
        elif isinstance(message, AIMessage):
            converted.append({"role": "assistant", "content": text})
        elif isinstance(message, ToolMessage):
            converted.append({"role": "tool", "content": text, "tool_call_id": message.tool_call_id})
        elif isinstance(message, ChatMessage):
            converted.append({"role": message.role, "content": text})
        else:
            raise ValueError(
                f"GuardcacheChatModel cannot send a {type(message).__name__}; use System, Human, "
                "AI, Tool or ChatMessage"
            )
    return converted


class GuardcacheChatModel(BaseChatModel):
    """A chat model for any OpenAI-compatible server (NIM, vLLM, llama.cpp, OpenAI).

    Example:
        ``GuardcacheChatModel(base_url="http://localhost:8000/v1", model="meta/llama-3.1-8b-instruct")``

    ``timeout`` is the read timeout, longer by default (60 s) than a guard call's, because a main-LLM
    answer can be long; connect stays short so a dead server fails fast. ``transport`` is for tests
    (``httpx2.MockTransport``) and custom network stacks.
    """

    base_url: str
    model: str
    api_key: SecretStr | None = Field(default=None, repr=False)
    provider: str = "nim"
    temperature: float | None = None
    max_tokens: int | None = None
    timeout: float | None = 60.0
    connect_timeout: float = 2.0
    max_retries: int = 2
    model_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Extra request body fields (``top_p``, ``seed``, ``extra_body``-style server options)."""
    transport: httpx2.AsyncBaseTransport | None = Field(default=None, exclude=True, repr=False)

    _client: ChatClient | None = PrivateAttr(default=None)
    _client_built_for: tuple[Any, ...] = PrivateAttr(default=())

    @property
    def _llm_type(self) -> str:
        return "guardcache-openai-compatible"

    @property
    def _identifying_params(self) -> Mapping[str, Any]:
        """What makes two instances answer differently (LangChain's cache key); no secrets."""
        return {
            "base_url": self.base_url,
            "model": self.model,
            "provider": self.provider,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            **self.model_kwargs,
        }

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = self.provider
        return params

    @property
    def client(self) -> ChatClient:
        """The ChatClient, built on first use (cheap: it opens nothing until a call).

        Rebuilt when a connection setting changed since (e.g. on a ``model_copy(update=...)``
        copy, which shares private attributes with its original).
        """
        key = self._client_key()
        if self._client is None or self._client_built_for != key:
            self._client_built_for = key
            self._client = ChatClient(
                self.base_url,
                model=self.model,
                api_key=self.api_key.get_secret_value() if self.api_key else None,
                provider=self.provider,
                timeout=httpx2.Timeout(self.timeout, connect=self.connect_timeout),
                retry=RetryPolicy(max_retries=self.max_retries),
                transport=self.transport,
                limits=MAIN_LIMITS,  # a chat model's answers, not verdicts
            )
        return self._client

    def _client_key(self) -> tuple[Any, ...]:
        secret = self.api_key.get_secret_value() if self.api_key else None
        return (
            self.base_url,
            self.model,
            secret,
            self.provider,
            self.timeout,
            self.connect_timeout,
            self.max_retries,
            id(self.transport),
        )

    def _call_params(self, stop: list[str] | None, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Body fields for one call: model settings, then ``model_kwargs``, then per-call ones."""
        params: dict[str, Any] = {
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            **self.model_kwargs,
            "stop": stop,
            **kwargs,
        }
        # None means "server default": omit rather than send null, which some servers reject.
        return {key: value for key, value in params.items() if value is not None}

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> LCChatResult:
        result = await self.client.complete(to_openai_messages(messages), **self._call_params(stop, kwargs))
        return _to_langchain(result)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> LCChatResult:
        """Run the async call to completion from sync code.

        Without a running loop in this thread: ``asyncio.run`` on a fresh loop. With one (sync
        ``invoke`` called from async code): the same on a worker thread, because this thread's loop
        cannot be waited on from inside itself; the caller's loop is blocked meanwhile, as with any
        sync call. Either way the fresh loop's connections are closed before it ends, so nothing
        bound to a dead loop is left behind.
        """
        openai_messages = to_openai_messages(messages)
        params = self._call_params(stop, kwargs)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self._complete_on_fresh_loop(openai_messages, params))
        context = contextvars.copy_context()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="guardcache-llm") as executor:
            future = executor.submit(
                context.run, asyncio.run, self._complete_on_fresh_loop(openai_messages, params)
            )
            return future.result()

    async def _complete_on_fresh_loop(
        self, messages: list[dict[str, str]], params: dict[str, Any]
    ) -> LCChatResult:
        try:
            return _to_langchain(await self.client.complete(messages, **params))
        finally:
            await self.client.aclose()  # the transport-backed client of this loop, if any
            await aclose_all()  # the pooled clients of this loop, which is about to end

    def _combine_llm_outputs(self, llm_outputs: list[dict[str, Any] | None], /) -> dict[str, Any]:
        """Sum token usage over a batch (``generate`` with several prompts)."""
        totals: dict[str, int] = {}
        for output in llm_outputs:
            usage = (output or {}).get("token_usage") or {}
            for key, value in usage.items():
                totals[key] = totals.get(key, 0) + int(value)
        return {"token_usage": totals, "model_name": self.model}


def _to_langchain(result: ChatResult) -> LCChatResult:
    usage = result.usage
    usage_metadata = UsageMetadata(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        input_token_details=InputTokenDetails(cache_read=usage.cached_prompt_tokens),
    )
    model_name = usage.model
    message = AIMessage(
        content=result.content,
        usage_metadata=usage_metadata,
        response_metadata={
            "model_name": model_name,
            "finish_reason": result.finish_reason,
            "provider": usage.provider,
        },
    )
    llm_output = {
        "token_usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
            "cached_prompt_tokens": usage.cached_prompt_tokens,
        },
        "model_name": model_name,
        "provider": usage.provider,
        "duration": result.duration,
        "attempts": result.attempts,
    }
    return LCChatResult(generations=[ChatGeneration(message=message)], llm_output=llm_output)


__all__ = ["GuardcacheChatModel", "to_openai_messages"]
