"""The LLM client layer: OpenAI-compatible calls, their cost records, and a LangChain adapter.

The LangChain adapter and httpx2's pool are re-exported lazily: importing langchain-core takes about
a second and httpx2 ~90 ms, and the guard path (checks -> llm.client, on guardcache's own HTTP/1.1
client) needs neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from guardcache.llm.budget import DEFAULT_TIMEOUT
from guardcache.llm.client import ChatClient
from guardcache.llm.default_pools import aclose_all, get_http_client
from guardcache.llm.failures import INPUT_REJECTED_STATUSES
from guardcache.llm.lanes import DEFAULT_LIMITS, PoolLimits
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
from guardcache.llm.settings import TransportSettings, check_base_url
from guardcache.llm.transport_contract import Timeouts
from guardcache.llm.types import ChatResult, Usage

if TYPE_CHECKING:
    from guardcache.llm.chat_model import GuardcacheChatModel, to_openai_messages
    from guardcache.llm.httpx_pool import ClientPool

_LAZY = {"GuardcacheChatModel", "to_openai_messages"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from guardcache.llm import chat_model

        return getattr(chat_model, name)
    if name == "ClientPool":
        from guardcache.llm.httpx_pool import ClientPool

        return ClientPool
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_TIMEOUT",
    "INPUT_REJECTED_STATUSES",
    "ChatClient",
    "ChatResult",
    "ClientPool",
    "ExplainInfo",
    "GuardcacheChatModel",
    "LLMCallInfo",
    "PoolLimits",
    "RetryPolicy",
    "Timeouts",
    "TransportSettings",
    "Usage",
    "aclose_all",
    "check_base_url",
    "current",
    "get_http_client",
    "new_request",
    "parse_retry_after",
    "parse_usage",
    "record_call",
    "request_scope",
    "to_openai_messages",
]
