"""The main model slot: any langchain-core chat model, or the built-in OpenAI-compatible client.

The built-in path calls :class:`ChatClient` directly (no LangChain on the hot path); a user-supplied
``BaseChatModel`` is called through ``ainvoke`` / ``astream``. Both report usage so ``explain()``
stays complete, and both take per-request generation parameters (``temperature``, ``max_tokens``...)
that override the config's.

Streaming (:meth:`ClientLLM.stream`): one POST with ``stream: true`` on the same pooled connection
and admission gate as every other call, read as server-sent events. The model's whole-call budget
(``parameters.timeout``) bounds the whole stream, as it bounds a plain call. A stream is not
retried: a failure before the first token raises the same typed ``BackendError`` a plain call
would (after its one attempt); a failure after it ends the stream with that error.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol

from guardcache.errors import BackendError, BackendProtocolError, BackendTimeoutError
from guardcache.llm.client import ChatClient
from guardcache.llm.response import parse_usage
from guardcache.llm.types import ChatResult, Usage
from guardcache.llm.wire import WireError, loads_body


class StreamTotals:
    """What a finished stream reported besides its text: usage (``stream_options.include_usage``)
    and the finish reason. Filled in by the stream as it ends."""

    __slots__ = ("finish_reason", "usage")

    def __init__(self) -> None:
        self.usage: Usage | None = None
        self.finish_reason: str | None = None


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

    async def stream(
        self, messages: Sequence[dict[str, str]], totals: StreamTotals, **params: Any
    ) -> AsyncIterator[str]:
        """Yield the answer's text deltas as the server sends them; ``totals`` gets the usage and
        finish reason. Raises typed ``BackendError``s (see the module docstring)."""
        client = self.client
        body: dict[str, Any] = {
            "model": client.model,
            "messages": [dict(m) for m in messages],
            **client.default_params,
            **self.params,
            **params,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        budget = client.deadline_s
        started = time.monotonic()
        scope = asyncio.timeout(budget) if budget is not None else None
        try:
            if scope is None:
                async for delta in _sse_deltas(client, body, totals):
                    yield delta
            else:
                async with scope:
                    async for delta in _sse_deltas(client, body, totals):
                        yield delta
        except TimeoutError:
            if scope is None or not scope.expired():
                raise
            raise BackendTimeoutError(
                f"{client.url} (model {client.model!r}) did not finish streaming within its "
                f"{budget:g} s budget (timeout), which bounds the whole stream "
                f"[after {time.monotonic() - started:.3g} s]; raise the main model's timeout for "
                "long answers",
                url=client.url,
            ) from None


async def _sse_deltas(
    client: ChatClient, body: Mapping[str, Any], totals: StreamTotals
) -> AsyncIterator[str]:
    # ChatClient has no public streaming call yet: this uses its lane (pooled connections and
    # admission gate, aiohttp or httpx2), headers, timeouts and failure classification, so a stream
    # fails exactly as a plain call does.
    lane = client._lane()
    gate = lane.gate
    if gate is not None:
        await gate.acquire()
    try:
        async with lane.stream(client.url, body, client._headers, client.timeout) as response:
            if not response.is_success:
                raise client._error(client._classify_status(await response.read()), 1)
            async for delta in _read_events(client, response.lines(), totals):
                yield delta
    except WireError as exc:
        raise client._error(client._classify_wire(exc), 1) from exc.__cause__
    finally:
        if gate is not None:
            gate.release()


async def _read_events(
    client: ChatClient, lines: AsyncIterator[str], totals: StreamTotals
) -> AsyncIterator[str]:
    done = False
    loads = loads_body  # orjson when installed: each event is one decode
    async for line in lines:
        if not line.startswith("data:"):
            continue  # blank separators, ": keep-alive" comments, "event:" fields
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            break
        try:
            event = loads(data)
        except ValueError:
            raise _protocol(client, "an event that is not JSON") from None
        if not isinstance(event, dict):
            raise _protocol(client, "an event that is not a JSON object")
        if "error" in event:
            raise BackendError(
                f"{client.url} (model {client.model!r}) reported an error in its stream; check the "
                "server's logs",
                url=client.url,
            )
        usage = event.get("usage")
        if isinstance(usage, dict):
            model = event.get("model")
            totals.usage = parse_usage(
                usage,
                model=model if isinstance(model, str) and model else client.model,
                provider=client.provider,
            )
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices:
            continue
        choice = choices[0]
        if not isinstance(choice, dict):
            raise _protocol(client, "a choice that is not an object")
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            totals.finish_reason = reason
        delta = choice.get("delta")
        content = delta.get("content") if isinstance(delta, dict) else None
        if isinstance(content, str) and content:
            yield content
    if not done and totals.finish_reason is None:
        raise BackendError(
            f"the stream from {client.url} (model {client.model!r}) ended before the answer was "
            "complete (no finish_reason, no [DONE]); check the server's logs",
            url=client.url,
        )


def _protocol(client: ChatClient, what: str) -> BackendProtocolError:
    return BackendProtocolError(
        f"{client.url} streamed {what}; is base_url an OpenAI-compatible /v1 endpoint?",
        status=200,
        url=client.url,
    )


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
