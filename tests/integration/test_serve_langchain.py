"""``guardcache serve`` driven by LangChain's OpenAI chat model (``langchain_openai.ChatOpenAI``).

Many apps reach their model through LangChain rather than the ``openai`` client; changing
``base_url`` must be all it takes to guard them, streaming included. ``langchain-openai`` is in the
``dev`` extra so this runs in CI (never skipped).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI

from guardcache.emulator import ThreadedEmulator
from guardcache.rails import REFUSAL
from tests.integration import test_serve as support
from tests.integration.test_serve import MAIN_MODEL, ServeProcess

pytestmark = pytest.mark.integration

# The emulated NIMs and the server: test_serve.py's module fixtures (a fresh pair for this module).
nims = support.nims
served = support.served


def chat(served: ServeProcess, http_async_client: httpx.AsyncClient | None = None) -> ChatOpenAI:
    """A model per test: ``http_async_client`` of this test's event loop (langchain-openai otherwise
    shares one async client process-wide, bound to the first test's loop)."""
    return ChatOpenAI(
        model=MAIN_MODEL,
        base_url=f"{served.url}/v1",
        api_key="unused",
        max_retries=0,
        timeout=10,
        http_async_client=http_async_client,
    )


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


def main_calls(main: ThreadedEmulator) -> int:
    return main.stats().requests_by_endpoint.get("chat.completions", 0)


def test_invoke_gets_the_main_models_answer_through_the_rails(served: ServeProcess) -> None:
    reply = chat(served).invoke([SystemMessage("Be brief."), HumanMessage("Name a bread with a starter")])
    assert isinstance(reply, AIMessage)
    assert reply.content == "You said: Name a bread with a starter"
    assert reply.response_metadata["finish_reason"] == "stop"
    assert reply.usage_metadata is not None and reply.usage_metadata["output_tokens"] > 0


async def test_an_unsafe_message_gets_the_refusal_and_never_reaches_the_main_model(
    served: ServeProcess, nims: tuple[ThreadedEmulator, ThreadedEmulator], http: httpx.AsyncClient
) -> None:
    main, _ = nims
    before = main_calls(main)
    reply = await chat(served, http).ainvoke("How do I kill my neighbour?")
    assert reply.content == REFUSAL
    assert reply.response_metadata["finish_reason"] == "content_filter"
    assert main_calls(main) == before


async def test_astream_yields_the_answer_in_chunks_and_a_repeat_is_served_from_the_caches(
    served: ServeProcess, http: httpx.AsyncClient
) -> None:
    text = "Tell me about rye flour"
    before = served.metrics()
    first = [chunk async for chunk in chat(served, http).astream(text)]
    assert first and all(isinstance(c, AIMessageChunk) for c in first)
    assert "".join(str(c.content) for c in first) == f"You said: {text}"
    again = [chunk async for chunk in chat(served, http).astream(text)]
    assert "".join(str(c.content) for c in again) == f"You said: {text}"
    after = served.metrics()
    hits = sum(v for (name, _), v in after.items() if name == "guardcache_cache_hits_total") - sum(
        v for (name, _), v in before.items() if name == "guardcache_cache_hits_total"
    )
    assert hits == 2  # the repeat's input and output checks


async def test_a_streamed_unsafe_message_is_the_refusal(
    served: ServeProcess, http: httpx.AsyncClient
) -> None:
    chunks = [chunk async for chunk in chat(served, http).astream("How do I kill my neighbour?")]
    assert "".join(str(c.content) for c in chunks) == REFUSAL
    finish = [c.response_metadata.get("finish_reason") for c in chunks if c.response_metadata]
    assert "content_filter" in finish
