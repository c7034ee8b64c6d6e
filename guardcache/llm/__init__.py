"""The LLM client layer: OpenAI-compatible calls, their cost records, and a LangChain adapter.

The LangChain adapter is re-exported lazily: importing langchain-core takes about a second, and the
guard path (checks -> llm.client) must not pay it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from guardcache.llm.client import DEFAULT_TIMEOUT, INPUT_REJECTED_STATUSES, ChatClient
from guardcache.llm.pool import DEFAULT_LIMITS, ClientPool, aclose_all, get_http_client
from guardcache.llm.records import (
    ExplainInfo,
    LLMCallInfo,
    current,
    new_request,
    record_call,
    request_scope,
)
from guardcache.llm.response import parse_usage
from guardcache.llm.retry import RetryPolicy, parse_retry_after
from guardcache.llm.transport import TRANSPORT_KEYS, TransportSettings, split_parameters, validate_base_url
from guardcache.llm.types import ChatResult, Usage

if TYPE_CHECKING:
    from guardcache.llm.chat_model import GuardcacheChatModel, to_openai_messages

_LAZY = {"GuardcacheChatModel", "to_openai_messages"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from guardcache.llm import chat_model

        return getattr(chat_model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_TIMEOUT",
    "INPUT_REJECTED_STATUSES",
    "TRANSPORT_KEYS",
    "ChatClient",
    "ChatResult",
    "ClientPool",
    "ExplainInfo",
    "GuardcacheChatModel",
    "LLMCallInfo",
    "RetryPolicy",
    "TransportSettings",
    "Usage",
    "aclose_all",
    "current",
    "get_http_client",
    "new_request",
    "parse_retry_after",
    "parse_usage",
    "record_call",
    "request_scope",
    "split_parameters",
    "to_openai_messages",
    "validate_base_url",
]
