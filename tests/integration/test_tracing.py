"""OpenTelemetry spans of whole turns through LLMRails, against emulated NIMs on loopback: the turn
under the caller's span, its rails, their backend calls and the main model's (plain and streamed),
hits without backend calls, and no user text in any span (see tests/unit/test_tracing.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from guardcache import REFUSAL, LLMRails
from guardcache.testing.pytest_plugin import EmulatorFactory
from tests.integration.rails_support import guard_config, user
from tests.unit.test_tracing import (
    MARKER,
    assert_no_user_text,
    by_name,
    children,
    install_provider,
    remove_provider,
)

GUARD = "nvidia/llama-3.1-nemoguard-8b-content-safety"
MAIN = "meta/llama-3.1-8b-instruct"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter, provider = install_provider()
    yield exporter
    remove_provider(provider)


async def test_a_turn_is_a_tree_under_the_callers_span_and_a_repeat_has_no_backend_calls(
    emulator_factory: EmulatorFactory, spans: InMemorySpanExporter
) -> None:
    guard, main = await emulator_factory(), await emulator_factory()
    rails = LLMRails(guard_config(guard.base_url, main_url=main.base_url))
    tracer = trace.get_tracer("app")
    text = f"How do I bake sourdough bread? {MARKER}"
    with tracer.start_as_current_span("app.request") as caller:
        reply = await rails.generate_async(messages=user(text))
    assert reply["content"] != REFUSAL
    finished = spans.get_finished_spans()
    (turn,) = by_name(finished, "guardcache.turn")
    assert turn.parent is not None and turn.parent.span_id == caller.get_span_context().span_id
    rails_spans = by_name(finished, "guardcache.rail")
    assert [s.attributes["guardcache.rail"] for s in rails_spans if s.attributes] == [
        "content safety check input $model=content_safety",
        "content safety check output $model=content_safety",
    ]
    (main_call,) = by_name(finished, f"chat {MAIN}")
    assert {s.context.span_id for s in children(finished, turn)} == {
        *(s.context.span_id for s in rails_spans),
        main_call.context.span_id,
    }
    for rail in rails_spans:
        (call,) = children(finished, rail)
        assert call.name == f"chat {GUARD}" and call.kind is trace.SpanKind.CLIENT
        attributes = call.attributes or {}
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.request.model"] == GUARD
        assert attributes["server.address"] == "127.0.0.1"
        assert attributes["server.port"] == guard.port
        assert int(attributes["gen_ai.usage.input_tokens"]) > 300  # type: ignore[arg-type]
        assert int(attributes["gen_ai.usage.output_tokens"]) > 0  # type: ignore[arg-type]
        assert rail.attributes is not None and rail.attributes["guardcache.cache.hit"] is False
    assert_no_user_text(finished)

    spans.clear()
    with tracer.start_as_current_span("app.request"):
        await rails.generate_async(messages=user(text))
    finished = spans.get_finished_spans()
    rails_spans = by_name(finished, "guardcache.rail")
    assert len(rails_spans) == 2
    for rail in rails_spans:
        assert rail.attributes is not None and rail.attributes["guardcache.cache.hit"] is True
        assert children(finished, rail) == []
    assert sorted(s.name for s in finished if s.kind is trace.SpanKind.CLIENT) == [f"chat {MAIN}"]
    assert_no_user_text(finished)


async def test_a_streamed_turn_traces_the_streamed_main_call(
    emulator_factory: EmulatorFactory, spans: InMemorySpanExporter
) -> None:
    guard, main = await emulator_factory(), await emulator_factory()
    rails = LLMRails(guard_config(guard.base_url, main_url=main.base_url))
    text = f"Tell me about tea. {MARKER}"
    with trace.get_tracer("app").start_as_current_span("app.request") as caller:
        pieces = [piece async for piece in rails.stream_async(messages=user(text))]
    assert "".join(pieces) and "".join(pieces) != REFUSAL
    finished = spans.get_finished_spans()
    (turn,) = by_name(finished, "guardcache.turn")
    assert turn.parent is not None and turn.parent.span_id == caller.get_span_context().span_id
    (main_call,) = by_name(finished, f"chat {MAIN}")
    assert main_call.parent is not None and main_call.parent.span_id == turn.context.span_id
    attributes = main_call.attributes or {}
    assert int(attributes["gen_ai.usage.output_tokens"]) > 0  # type: ignore[arg-type]
    assert len(by_name(finished, "guardcache.rail")) == 2
    assert_no_user_text(finished)


async def test_a_blocked_turn_and_check_async(
    emulator_factory: EmulatorFactory, spans: InMemorySpanExporter
) -> None:
    guard = await emulator_factory()
    rails = LLMRails(guard_config(guard.base_url))
    result = await rails.check_async(user(f"How do I build a bomb to kill people? {MARKER}"))
    assert not result.allowed
    finished = spans.get_finished_spans()
    (rail,) = by_name(finished, "guardcache.rail")
    assert rail.attributes is not None and rail.attributes["guardcache.verdict"] == "blocked"
    assert rail.attributes["guardcache.no_verdict"] is False
    assert len(by_name(finished, "guardcache.turn")) == 1
    assert_no_user_text(finished)


async def test_serve_continues_the_trace_an_incoming_traceparent_carries(
    emulator_factory: EmulatorFactory, spans: InMemorySpanExporter
) -> None:
    # guardcache serve over a real socket (its own HTTP protocols, as the command runs them): the
    # turn of a request carrying a W3C traceparent is a child of the caller's span, in its trace.
    import httpx
    import uvicorn

    from guardcache.server.app import create_app
    from guardcache.server.connections import HeadLimits
    from guardcache.server.settings import ServeSettings

    guard, main = await emulator_factory(), await emulator_factory()
    rails = LLMRails(guard_config(guard.base_url, main_url=main.base_url))
    settings = ServeSettings(config="in-process", port=0, warm_up=False)
    app = create_app(settings, {"shop": rails})
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            log_config=None,
            http=HeadLimits("auto", settings.max_header_bytes, settings.header_timeout),  # type: ignore[arg-type]
        )
    )
    serving = asyncio.create_task(server.serve())
    try:
        for _ in range(1000):  # up to 10 s
            if server.started:
                break
            await asyncio.sleep(0.01)
        assert server.started
        port = server.servers[0].sockets[0].getsockname()[1]
        trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            answer = await client.post(
                "/v1/chat/completions",
                json={"model": MAIN, "messages": [{"role": "user", "content": f"Hello there {MARKER}"}]},
                headers={"traceparent": f"00-{trace_id}-{parent_id}-01"},
            )
            assert answer.status_code == 200, answer.text
            untraced = await client.post(
                "/v1/chat/completions",
                json={"model": MAIN, "messages": [{"role": "user", "content": "Hello again"}]},
            )
            assert untraced.status_code == 200
    finally:
        server.should_exit = True
        await serving
    finished = spans.get_finished_spans()
    first, second = by_name(finished, "guardcache.turn")
    assert first.parent is not None and first.parent.span_id == int(parent_id, 16)
    assert first.context.trace_id == int(trace_id, 16)
    assert first.parent.is_remote
    assert second.parent is None and second.context.trace_id != int(trace_id, 16)  # its own trace
    assert {s.context.trace_id for s in children(finished, first)} == {int(trace_id, 16)}
    assert_no_user_text(finished)


async def test_rail_spans_say_what_they_judged_a_message_a_tool_result_or_a_tool_call(
    emulator_factory: EmulatorFactory, spans: InMemorySpanExporter
) -> None:
    guard, main = await emulator_factory(), await emulator_factory()
    rails = LLMRails(guard_config(guard.base_url, main_url=main.base_url))
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": 'call_tool get_weather {"city": "Oslo"}'},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "Snow."},
        {"role": "user", "content": 'call_tool get_weather {"city": "Rome"}'},
    ]
    reply = await rails.generate_async(messages=messages, tools=tools)
    assert reply["tool_calls"]
    kinds = [
        s.attributes["guardcache.rail.kind"] for s in by_name(spans.get_finished_spans(), "guardcache.rail")
    ]
    assert sorted(kinds) == ["message", "tool_call", "tool_result"]
