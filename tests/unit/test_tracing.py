"""OpenTelemetry spans (guardcache.tracing): a turn -> its rails -> their backend calls, under the
caller's span; cache hits without a backend child; no user text anywhere; failures with an error
status and ``error.type``; and nothing at all (not even an import) while no provider is set.

The backend here is an ``httpx2.MockTransport`` (no socket); tests/integration/test_tracing.py runs
the same through LLMRails against emulated NIMs.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx2
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from opentelemetry.util._once import Once

from guardcache import tracing
from guardcache.cache import LFUCache
from guardcache.checks.check import LLMCheck
from guardcache.checks.content_safety.parsers import parse_prompt_safety
from guardcache.config.prompts import default_prompts
from guardcache.flows import KNOWN_FLOWS, FlowRef
from guardcache.llm import ChatClient, RetryPolicy
from guardcache.llm.records import request_scope
from guardcache.rails.rail import Rail

ROOT = Path(__file__).resolve().parents[2]
MARKER = "zqxj-USER-TEXT-7731"
"""In every user message: no span may carry it (names, attributes, events, status)."""

FLOW = "content safety check input $model=content_safety"


# -- a provider for one test ----------------------------------------------------------------------


def _reset_global_provider() -> None:
    # set_tracer_provider works once per process; OpenTelemetry's own tests reset it like this.
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


def install_provider() -> tuple[InMemorySpanExporter, TracerProvider]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _reset_global_provider()
    trace.set_tracer_provider(provider)
    return exporter, provider


def remove_provider(provider: TracerProvider) -> None:
    _reset_global_provider()
    provider.shutdown()
    tracing.refresh()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter, provider = install_provider()
    yield exporter
    remove_provider(provider)


def by_name(finished: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name == name]


def children(finished: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in finished if s.parent is not None and s.parent.span_id == parent.context.span_id]


def assert_no_user_text(finished: Sequence[ReadableSpan], marker: str = MARKER) -> None:
    def texts(span: ReadableSpan) -> Iterator[str]:
        yield span.name
        yield str(span.status.description)
        for attributes in [span.attributes, *(e.attributes for e in span.events)]:
            for key, value in (attributes or {}).items():
                yield key
                yield repr(value)
        for event in span.events:
            yield event.name

    assert finished
    for span in finished:
        for text in texts(span):
            assert marker not in text, (span.name, text)


# -- a rail on a mocked NIM -----------------------------------------------------------------------


def answer(rating: str = "safe") -> httpx2.Response:
    return httpx2.Response(
        200,
        json={
            "model": "served-model",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f'{{"User Safety": "{rating}"}}'},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 410, "completion_tokens": 7, "total_tokens": 417},
        },
    )


def make_rail(
    handler: Callable[[httpx2.Request], Any], on_error: str = "block", cache: LFUCache | None = None
) -> Rail:
    ref = FlowRef.parse(FLOW)
    spec = KNOWN_FLOWS[ref.name]
    prompt = next(p for p in default_prompts() if p.base_task == "content_safety_check_input")
    client = ChatClient(
        "http://nim.test:8123/v1",
        model="nvidia/llama-3.1-nemoguard-8b-content-safety",
        transport=httpx2.MockTransport(handler),
        retry=RetryPolicy(max_retries=0),
    )
    check = LLMCheck(
        spec=spec,
        prompt=prompt,
        parser=parse_prompt_safety,
        client=client,
        cache=LFUCache(64) if cache is None else cache,
        model_type="content_safety",
        model_name="m",
    )
    return Rail(ref=ref, spec=spec, check=check, on_error=on_error)


async def turn(rail: Rail, text: str) -> Any:
    with request_scope():
        return await rail.run({"user_input": text})


# -- the tree and its attributes ------------------------------------------------------------------


async def test_turn_rail_and_backend_call_are_children_of_the_callers_span(
    spans: InMemorySpanExporter,
) -> None:
    rail = make_rail(lambda request: answer("safe"))
    tracer = trace.get_tracer("app")
    with tracer.start_as_current_span("app.request") as caller:
        result = await turn(rail, f"How do I bake bread? {MARKER}")
    assert result.allowed and not result.from_cache
    finished = spans.get_finished_spans()
    (turn_span,) = by_name(finished, "guardcache.turn")
    (rail_span,) = by_name(finished, "guardcache.rail")
    (call,) = by_name(finished, "chat nvidia/llama-3.1-nemoguard-8b-content-safety")
    assert turn_span.parent is not None and turn_span.parent.span_id == caller.get_span_context().span_id
    assert children(finished, turn_span) == [rail_span]
    assert children(finished, rail_span) == [call]
    assert {s.context.trace_id for s in finished} == {caller.get_span_context().trace_id}

    assert dict(rail_span.attributes or {}) == {
        "guardcache.rail": FLOW,
        "guardcache.rail.kind": "message",
        "guardcache.cache.hit": False,
        "guardcache.verdict": "allowed",
        "guardcache.no_verdict": False,
    }
    assert rail_span.status.status_code is StatusCode.UNSET
    assert call.kind is trace.SpanKind.CLIENT
    attributes = dict(call.attributes or {})
    assert attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": "nim",
        "gen_ai.provider.name": "nim",
        "gen_ai.request.model": "nvidia/llama-3.1-nemoguard-8b-content-safety",
        "gen_ai.request.max_tokens": attributes["gen_ai.request.max_tokens"],
        "gen_ai.request.temperature": attributes["gen_ai.request.temperature"],
        "server.address": "nim.test",
        "server.port": 8123,
        "gen_ai.response.model": "served-model",
        "gen_ai.usage.input_tokens": 410,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.response.finish_reasons": ("stop",),
    }
    assert dict(turn_span.attributes or {}) == {"guardcache.llm_calls": 1, "guardcache.cache.hits": 0}
    assert_no_user_text(finished)


async def test_a_cache_hit_is_a_rail_span_without_a_backend_call(spans: InMemorySpanExporter) -> None:
    rail = make_rail(lambda request: answer("unsafe"))
    text = f"something to judge {MARKER}"
    await turn(rail, text)
    spans.clear()
    result = await turn(rail, text)
    assert result.from_cache and not result.allowed
    finished = spans.get_finished_spans()
    assert sorted(s.name for s in finished) == ["guardcache.rail", "guardcache.turn"]
    (rail_span,) = by_name(finished, "guardcache.rail")
    assert rail_span.attributes is not None
    assert rail_span.attributes["guardcache.cache.hit"] is True
    assert rail_span.attributes["guardcache.verdict"] == "blocked"
    assert rail_span.attributes["guardcache.no_verdict"] is False
    assert "guardcache.single_flight.joined" not in rail_span.attributes
    (turn_span,) = by_name(finished, "guardcache.turn")
    assert dict(turn_span.attributes or {}) == {"guardcache.llm_calls": 1, "guardcache.cache.hits": 1}
    assert_no_user_text(finished)


async def test_an_asker_joining_another_backend_call_gets_no_backend_child(
    spans: InMemorySpanExporter,
) -> None:
    arrived, release = asyncio.Event(), asyncio.Event()

    async def slow(request: httpx2.Request) -> httpx2.Response:
        arrived.set()
        await release.wait()
        return answer("safe")

    cache = LFUCache(64, track_stats=True)
    rail = make_rail(slow, cache=cache)
    first = asyncio.create_task(turn(rail, f"same text {MARKER}"))
    await asyncio.wait_for(arrived.wait(), 10)  # the first turn's backend call is under way
    second = asyncio.create_task(turn(rail, f"same text {MARKER}"))
    deadline = time.monotonic() + 10
    while cache.get_stats().coalesced < 1:  # until the second turn has joined it
        assert time.monotonic() < deadline, cache.get_stats()
        await asyncio.sleep(0.005)
    release.set()
    results = await asyncio.gather(first, second)
    assert [r.from_cache for r in results] == [False, True]
    finished = spans.get_finished_spans()
    calls = [s for s in finished if s.name.startswith("chat ")]
    rails = by_name(finished, "guardcache.rail")
    assert len(calls) == 1 and len(rails) == 2
    leader = next(s for s in rails if s.attributes and not s.attributes["guardcache.cache.hit"])
    joiner = next(s for s in rails if s is not leader)
    assert children(finished, leader) == calls
    assert children(finished, joiner) == []
    assert joiner.attributes is not None and joiner.attributes["guardcache.single_flight.joined"] is True
    assert_no_user_text(finished)


# -- failures ---------------------------------------------------------------------------------------


async def test_an_outage_sets_error_status_and_error_type_on_rail_and_call(
    spans: InMemorySpanExporter,
) -> None:
    rail = make_rail(lambda request: httpx2.Response(503, json={"error": f"down {MARKER}"}), on_error="allow")
    result = await turn(rail, f"hello {MARKER}")
    assert result.allowed and result.error is not None  # on_error=allow: no verdict, allowed
    finished = spans.get_finished_spans()
    (rail_span,) = by_name(finished, "guardcache.rail")
    (call,) = [s for s in finished if s.name.startswith("chat ")]
    assert rail_span.attributes is not None
    assert rail_span.attributes["guardcache.no_verdict"] is True
    assert rail_span.attributes["guardcache.verdict"] == "allowed"
    assert rail_span.attributes["error.type"] == "BackendStatusError"
    assert rail_span.status.status_code is StatusCode.ERROR
    assert call.attributes is not None
    assert call.attributes["error.type"] == "BackendStatusError"
    assert call.attributes["http.response.status_code"] == 503
    assert call.status.status_code is StatusCode.ERROR
    assert "gen_ai.usage.input_tokens" not in call.attributes
    assert_no_user_text(finished)


async def test_an_unreadable_answer_is_no_verdict_of_class_parse_error(spans: InMemorySpanExporter) -> None:
    def echo(request: httpx2.Request) -> httpx2.Response:  # a guard that answers with the user's text
        body = answer().json()
        body["choices"][0]["message"]["content"] = f"I cannot rate {MARKER}"
        return httpx2.Response(200, json=body)

    result = await turn(make_rail(echo), f"hello {MARKER}")
    assert not result.allowed and result.error is not None
    finished = spans.get_finished_spans()
    (rail_span,) = by_name(finished, "guardcache.rail")
    assert rail_span.attributes is not None
    assert rail_span.attributes["error.type"] == "ParseError"
    assert rail_span.attributes["guardcache.verdict"] == "blocked"
    assert rail_span.status.status_code is StatusCode.ERROR
    (call,) = [s for s in finished if s.name.startswith("chat ")]
    assert call.status.status_code is StatusCode.UNSET  # the call itself answered
    assert_no_user_text(finished)


def test_error_class_keeps_only_a_class_name() -> None:
    assert tracing.error_class("BackendTimeoutError: no answer within 2 s") == "BackendTimeoutError"
    assert tracing.error_class("KeyError") == "KeyError"
    assert tracing.error_class("the answer is not JSON: 'x'") == "ParseError"
    assert tracing.error_class("missing") == "ParseError"


# -- an incoming traceparent --------------------------------------------------------------------------


async def test_an_incoming_traceparent_is_continued(spans: InMemorySpanExporter) -> None:
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    parent_id = "00f067aa0ba902b7"
    headers = [
        (b"content-type", b"application/json"),
        (b"traceparent", f"00-{trace_id}-{parent_id}-01".encode()),
    ]
    rail = make_rail(lambda request: answer("safe"))
    with tracing.continue_trace(headers):
        await turn(rail, f"hi {MARKER}")
    (turn_span,) = by_name(spans.get_finished_spans(), "guardcache.turn")
    assert format(turn_span.context.trace_id, "032x") == trace_id
    assert turn_span.parent is not None and format(turn_span.parent.span_id, "016x") == parent_id
    assert trace.get_current_span() is trace.INVALID_SPAN  # detached after the block
    context = tracing.extract_context({"Traceparent": f"00-{trace_id}-{parent_id}-01"})
    assert format(trace.get_current_span(context).get_span_context().trace_id, "032x") == trace_id


# -- off --------------------------------------------------------------------------------------------


async def test_a_provider_removed_turns_tracing_off_at_the_next_turn() -> None:
    exporter, provider = install_provider()
    rail = make_rail(lambda request: answer("safe"))
    await turn(rail, "one")
    assert tracing.TRACER is not None and exporter.get_finished_spans()
    remove_provider(provider)
    exporter.clear()
    await turn(rail, "two")
    assert tracing.TRACER is None and exporter.get_finished_spans() == ()


def test_without_a_provider_nothing_is_imported_and_no_span_is_made() -> None:
    # A fresh interpreter: this one imported opentelemetry for the other tests.
    script = textwrap.dedent(
        """
        import asyncio, sys, json
        sys.path.insert(0, {root!r})
        import httpx2
        from guardcache import tracing
        from guardcache.cache import LFUCache
        from guardcache.checks.check import LLMCheck
        from guardcache.checks.content_safety.parsers import parse_prompt_safety
        from guardcache.config.prompts import default_prompts
        from guardcache.flows import KNOWN_FLOWS, FlowRef
        from guardcache.llm import ChatClient, RetryPolicy
        from guardcache.llm.records import request_scope
        from guardcache.rails.rail import Rail

        ANSWER = {answer!r}
        ref = FlowRef.parse({flow!r})
        spec = KNOWN_FLOWS[ref.name]
        prompt = next(p for p in default_prompts() if p.base_task == "content_safety_check_input")
        client = ChatClient("http://nim.test/v1", model="m", retry=RetryPolicy(max_retries=0),
                            transport=httpx2.MockTransport(lambda r: httpx2.Response(200, json=ANSWER)))
        check = LLMCheck(spec=spec, prompt=prompt, parser=parse_prompt_safety, client=client,
                         cache=LFUCache(8), model_type="content_safety", model_name="m")
        rail = Rail(ref=ref, spec=spec, check=check, on_error="block")

        async def turn(text):
            with request_scope():
                return await rail.run({{"user_input": text}})

        assert asyncio.run(turn("one")).allowed
        assert asyncio.run(turn("one")).from_cache
        assert not [m for m in sys.modules if m.startswith("opentelemetry")], "imported eagerly"
        assert tracing.TRACER is None

        import opentelemetry.trace  # imported by something else, with no provider set
        assert asyncio.run(turn("two")).allowed
        assert tracing.TRACER is None and "opentelemetry.sdk" not in sys.modules
        print("OFF-OK")
        """
    ).format(root=str(ROOT), answer=answer().json(), flow=FLOW)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OFF-OK" in result.stdout


def test_the_tracer_follows_the_global_provider() -> None:
    exporter, provider = install_provider()
    try:
        tracer = tracing.refresh()
        assert tracer is not None and tracing.refresh() is tracer  # cached per provider
        _reset_global_provider()
        trace.set_tracer_provider(trace.NoOpTracerProvider())
        assert tracing.refresh() is None  # a no-op provider is off
    finally:
        remove_provider(provider)
    assert tracing.refresh() is None
    assert exporter.get_finished_spans() == ()


async def test_the_jailbreak_classifier_call_is_a_classify_span(spans: InMemorySpanExporter) -> None:
    from guardcache.checks.jailbreak_detection.check import MODEL, ClassifyClient

    client = ClassifyClient(
        "http://jailbreak.test/v1/classify",
        api_key=None,
        transport=httpx2.MockTransport(lambda request: httpx2.Response(200, json={"jailbreak": False})),
        retry=RetryPolicy(max_retries=0),
    )
    await client.classify(f"hello {MARKER}")
    (call,) = spans.get_finished_spans()
    assert call.name == f"classify {MODEL}" and call.kind is trace.SpanKind.CLIENT
    assert call.attributes is not None and call.attributes["gen_ai.operation.name"] == "classify"
    assert call.attributes["server.address"] == "jailbreak.test" and call.attributes["server.port"] == 80
    assert_no_user_text([call])
