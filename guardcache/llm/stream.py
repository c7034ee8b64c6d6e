"""Reading a streamed chat completion (server-sent events) into text deltas.

Why here, beside the client: a stream must fail exactly as a plain call does (the same lane,
admission gate, headers, timeouts, limits and failure classification), so it is one of
:class:`~guardcache.llm.client.ChatClient`'s calls (:meth:`~guardcache.llm.client.ChatClient.stream`)
and not a second client reaching into the first one's private parts.

Bounded: each line is at most ``WireLimits.max_line_bytes`` (the transport's line reader), each
event's ``data:`` lines together at most ``max_event_bytes``, the whole body ``max_body_bytes``.
A stream is not retried: a failure before the first token raises the same typed ``BackendError``
a plain call would (after its one attempt); a failure after it ends the stream with that error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from guardcache.errors import BackendError, BackendProtocolError
from guardcache.llm.response import parse_usage
from guardcache.llm.transport_contract import WireError, WireKind, WireLimits
from guardcache.llm.types import Usage
from guardcache.llm.wire import loads_body


class StreamSource(Protocol):
    """What reading a stream needs of the client that opened it: the URL and model its messages
    name, the provider its usage is labelled with (:class:`~guardcache.llm.client.ChatClient` fits;
    this module imports nothing above it)."""

    @property
    def url(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def provider(self) -> str: ...


class StreamTotals:
    """What a finished stream reported besides its text: usage (``stream_options.include_usage``),
    the finish reason, and its tool calls, assembled from their deltas (never yielded: a tool call
    is judged whole, see ``guardcache.rails.tools``). Filled in by the stream as it goes."""

    __slots__ = ("_calls", "finish_reason", "usage")

    def __init__(self) -> None:
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self._calls: dict[Any, Any] | None = None

    def add_tool_call_delta(self, delta: Any) -> None:
        """Add one streamed tool-call delta (``{"index", "id"?, "type"?, "function": {"name"?,
        "arguments"?}}``): strings are concatenated per index, as the OpenAI SDK accumulates them.
        A delta that is not of that shape is kept as it is, so the assembled calls fail their
        validation (a malformed tool call blocks the turn, it is never dropped)."""
        calls = self._calls
        if calls is None:
            calls = self._calls = {}
        index = delta.get("index") if isinstance(delta, dict) else None
        function = delta.get("function") if isinstance(delta, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not isinstance(function, dict | None):
            calls[("malformed", len(calls))] = delta
            return
        call = calls.get(index)
        if call is None:
            call = calls[index] = {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
        elif not isinstance(call, dict):
            return
        for key in ("id", "type"):
            value = delta.get(key)
            if isinstance(value, str):
                call[key] = value if key == "type" else call[key] + value
            elif value is not None:
                call[key] = value  # not a string: kept, so the call fails its validation
        for key, value in (function or {}).items():
            if isinstance(value, str) and isinstance(call["function"].get(key, ""), str):
                call["function"][key] = call["function"].get(key, "") + value
            elif value is not None:
                call["function"][key] = value

    @property
    def tool_calls(self) -> tuple[Any, ...]:
        """The tool calls assembled so far, by index (``()`` when the stream had none)."""
        calls = self._calls
        if not calls:
            return ()
        ordered = sorted(
            calls.items(), key=lambda item: (1, item[0][1]) if isinstance(item[0], tuple) else (0, item[0])
        )
        return tuple(call for _, call in ordered)


async def read_events(
    client: StreamSource, lines: AsyncIterator[str], totals: StreamTotals, limits: WireLimits
) -> AsyncIterator[str]:
    """The text deltas of an OpenAI chat completion stream, ``totals`` filled in as it ends.

    Raises:
        WireError: ``TOO_LARGE`` when one event's data passes ``limits.max_event_bytes``.
        BackendProtocolError: an event that is not a JSON object, or a choice that is not one.
        BackendError: an ``error`` event, or a stream that ended before its answer did.
    """
    done = False
    loads = loads_body  # orjson when installed: each event is one decode
    event_bytes = 0
    max_event = limits.max_event_bytes
    async for line in lines:
        if not line.startswith("data:"):
            if not line:
                event_bytes = 0  # a blank line ends an event
            continue  # ": keep-alive" comments, "event:" fields
        data = line[5:].strip()
        event_bytes += len(data)
        if event_bytes > max_event:
            raise WireError(WireKind.TOO_LARGE, "EventTooLarge", f"an event over {max_event} bytes")
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
        calls = delta.get("tool_calls") if isinstance(delta, dict) else None
        if calls is not None:
            for call in calls if isinstance(calls, list) else (calls,):
                totals.add_tool_call_delta(call)
    if not done and totals.finish_reason is None:
        raise BackendError(
            f"the stream from {client.url} (model {client.model!r}) ended before the answer was "
            "complete (no finish_reason, no [DONE]); check the server's logs",
            url=client.url,
        )


def _protocol(client: StreamSource, what: str) -> BackendProtocolError:
    return BackendProtocolError(
        f"{client.url} streamed {what}; is base_url an OpenAI-compatible /v1 endpoint?",
        status=200,
        url=client.url,
    )


__all__ = ["StreamSource", "StreamTotals", "read_events"]
