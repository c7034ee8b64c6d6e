"""GuardcacheChatModel: LangChain messages in, OpenAI requests out, AIMessage with usage back."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest
from langchain_core.messages import (
    AIMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from guardcache.errors import BackendStatusError
from guardcache.llm import records
from guardcache.llm.chat_model import GuardcacheChatModel, to_openai_messages

BASE = "http://main-llm.test/v1"


class Backend:
    """A MockTransport handler answering every request with one completion; records bodies."""

    def __init__(self, status: int = 200, *, cached: int | None = 96) -> None:
        self.status = status
        self.cached = cached
        self.requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        if self.status != 200:
            return httpx2.Response(self.status, json={"error": {"message": "nope"}})
        usage: dict[str, Any] = {"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127}
        if self.cached is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached}
        return httpx2.Response(
            200,
            json={
                "model": "meta/llama-3.1-8b-instruct",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "Hello there."},
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
            },
        )

    def body(self, index: int = -1) -> dict[str, Any]:
        return dict(json.loads(self.requests[index].content))


def make_model(backend: Backend, **kwargs: Any) -> GuardcacheChatModel:
    return GuardcacheChatModel(
        base_url=BASE,
        model="meta/llama-3.1-8b-instruct",
        transport=httpx2.MockTransport(backend),
        max_retries=0,
        **kwargs,
    )


def assert_answer(message: Any, *, cached: int = 96) -> None:
    assert isinstance(message, AIMessage)
    assert message.content == "Hello there."
    assert message.usage_metadata == {
        "input_tokens": 120,
        "output_tokens": 7,
        "total_tokens": 127,
        "input_token_details": {"cache_read": cached},
    }
    assert message.response_metadata["model_name"] == "meta/llama-3.1-8b-instruct"
    assert message.response_metadata["finish_reason"] == "stop"
    assert message.response_metadata["token_usage"]["cached_prompt_tokens"] == cached


async def test_ainvoke_returns_an_ai_message_with_content_and_usage_metadata() -> None:
    backend = Backend()
    message = await make_model(backend).ainvoke("hi")
    assert_answer(message)
    assert str(backend.requests[0].url) == f"{BASE}/chat/completions"


async def test_absent_cached_tokens_read_as_zero_cache_reads() -> None:
    message = await make_model(Backend(cached=None)).ainvoke("hi")
    assert_answer(message, cached=0)


async def test_request_carries_converted_messages_settings_stop_and_bound_kwargs() -> None:
    backend = Backend()
    model = make_model(
        backend, api_key="sk-main", temperature=0.2, max_tokens=64, model_kwargs={"top_p": 0.9}
    )
    await model.bind(seed=3).ainvoke(
        [SystemMessage("Be brief."), HumanMessage("hi"), AIMessage("hello"), HumanMessage("?")],
        stop=["\n\n"],
    )
    body = backend.body()
    assert body == {
        "model": "meta/llama-3.1-8b-instruct",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "?"},
        ],
        "temperature": 0.2,
        "max_tokens": 64,
        "top_p": 0.9,
        "stop": ["\n\n"],
        "seed": 3,
    }
    assert backend.requests[0].headers["authorization"] == "Bearer sk-main"


async def test_unset_settings_are_omitted_not_sent_as_null() -> None:
    backend = Backend()
    await make_model(backend).ainvoke("hi")
    assert set(backend.body()) == {"model", "messages"}


def test_invoke_from_sync_code_works_repeatedly_across_fresh_loops() -> None:
    backend = Backend()
    model = make_model(backend)
    assert_answer(model.invoke("one"))
    assert_answer(model.invoke("two"))
    assert len(backend.requests) == 2


async def test_invoke_inside_a_running_loop_runs_on_a_worker_thread() -> None:
    backend = Backend()
    model = make_model(backend)
    assert_answer(model.invoke("sync call from async code"))
    assert_answer(await model.ainvoke("and async on this loop"))


async def test_backend_errors_propagate_typed() -> None:
    with pytest.raises(BackendStatusError) as info:
        await make_model(Backend(status=401)).ainvoke("hi")
    assert info.value.status == 401


def test_sync_invoke_propagates_typed_errors() -> None:
    with pytest.raises(BackendStatusError):
        make_model(Backend(status=404)).invoke("hi")


async def test_the_chat_model_records_nothing_in_request_stats() -> None:
    with records.request_scope() as info:
        await make_model(Backend()).ainvoke("hi")
    assert info.llm_calls == []


def test_api_key_is_not_exposed_in_repr_or_identifying_params() -> None:
    model = make_model(Backend(), api_key="sk-very-secret")
    assert "sk-very-secret" not in repr(model)
    # what LangChain serializes a model as: asdict() from langchain-core 1.0, dict() before it
    as_dict = model.asdict() if hasattr(type(model), "asdict") else model.dict()
    assert "sk-very-secret" not in str(as_dict)
    assert as_dict["_type"] == "guardcache-openai-compatible"
    assert model._get_ls_params()["ls_provider"] == "nim"


def test_message_conversion_handles_tool_chat_and_content_blocks() -> None:
    converted = to_openai_messages(
        [
            HumanMessage(content=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),
            ToolMessage("42", tool_call_id="call-1"),
            ChatMessage(role="developer", content="rules"),
        ]
    )
    assert converted == [
        {"role": "user", "content": "ab"},
        {"role": "tool", "content": "42", "tool_call_id": "call-1"},
        {"role": "developer", "content": "rules"},
    ]
    with pytest.raises(ValueError, match="FunctionMessage"):
        to_openai_messages([FunctionMessage(name="f", content="x")])


async def test_generate_over_several_prompts_sums_token_usage() -> None:
    result = await make_model(Backend()).agenerate([[HumanMessage("a")], [HumanMessage("b")]])
    assert result.llm_output is not None
    assert result.llm_output["token_usage"]["total_tokens"] == 254


async def test_a_copy_with_another_base_url_does_not_reuse_the_old_client() -> None:
    first, second = Backend(), Backend()
    model = make_model(first)
    await model.ainvoke("hi")
    copy = model.model_copy(
        update={"base_url": "http://other.test/v1", "transport": httpx2.MockTransport(second)}
    )
    await copy.ainvoke("hi")
    assert len(first.requests) == 1
    assert str(second.requests[0].url) == "http://other.test/v1/chat/completions"


async def test_concurrent_ainvoke_calls_share_the_model() -> None:
    backend = Backend()
    model = make_model(backend)
    messages = await asyncio.gather(*(model.ainvoke(f"q{i}") for i in range(20)))
    assert len(backend.requests) == 20
    for message in messages:
        assert_answer(message)
