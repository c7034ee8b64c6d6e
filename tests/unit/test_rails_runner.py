"""One turn runner for every face of the rails (``guardcache.rails.runner``).

``generate_async``, ``stream_async`` (plain or streamed main model, completed or iterated) and
``guardcache serve``'s plain and streamed chat route all run a ``GuardedTurn``: the same turn must
give the same reply, the same rail results and outcome, and the same LLM call records whichever ran
it. The rails here are real ``Rail`` objects around a fake check and the main model a fake, so no
network is involved and every path sees exactly the same verdicts and answers.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import pytest

from guardcache import REFUSAL, LLMRails, RailsConfig
from guardcache.checks.check import CheckOutcome
from guardcache.checks.verdict import Verdict
from guardcache.errors import BackendConnectionError, ConfigError
from guardcache.flows import KNOWN_FLOWS, FlowRef
from guardcache.llm.records import LLMCallInfo, record_call
from guardcache.llm.stream import StreamTotals
from guardcache.llm.types import Usage
from guardcache.rails.rail import Rail
from guardcache.rails.runner import GuardedTurn
from guardcache.rails.streaming import GuardedStream
from guardcache.rails.turn import TurnInfo
from guardcache.server.responses import EventStream, JSONResponse
from guardcache.server.routes import Handlers
from guardcache.server.settings import ServeSettings
from guardcache.server.state import ServerState

INPUT_FLOW = "content safety check input $model=content_safety"
OUTPUT_FLOW = "content safety check output $model=content_safety"
UNUSED_URL = "http://127.0.0.1:9/v1"  # never called: the checks and the main model are fakes

SAFE, UNSAFE_IN, UNSAFE_OUT = "How do I bake bread?", "How do I build a bomb?", "Which poison is best?"


class Judge:
    """A check that blocks a text holding ``word``; records a (cached) call as a real check does."""

    def __init__(self, task: str, word: str, *, output: bool) -> None:
        self.task, self.word, self.output = task, word, output

    def cached(self, variables: Mapping[str, Any]) -> bool:
        return True

    async def run(self, variables: Mapping[str, Any], deadline: float | None = None) -> CheckOutcome:
        text = variables["bot_response"] if self.output else variables["user_input"]
        record_call(LLMCallInfo.from_usage(self.task, Usage(40, 2, 42), duration=0.0, from_cache=True))
        allowed = self.word not in text
        return CheckOutcome(Verdict(allowed, () if allowed else ("S1",)), True, 0.0)

    async def prime(self) -> None:
        return None


class Scripted:
    """A main model answering ``"Sure: <the user's text>"``, plainly or as word deltas; records
    how it was called and in which task."""

    model_name = "scripted"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[tuple[str, asyncio.Task[Any] | None]] = []

    @staticmethod
    def answer(messages: Sequence[Mapping[str, Any]]) -> str:
        return "Sure: " + str(messages[-1]["content"])

    async def generate(self, messages: Sequence[Mapping[str, Any]], **params: Any) -> tuple[str, Usage]:
        self.calls.append(("plain", asyncio.current_task()))
        if self.fail:
            raise BackendConnectionError("main model down")
        return self.answer(messages), Usage(9, 4, 13, model=self.model_name)

    async def stream(
        self, messages: Sequence[Mapping[str, Any]], totals: StreamTotals, **params: Any
    ) -> AsyncIterator[str]:
        self.calls.append(("stream", asyncio.current_task()))
        for delta in re.findall(r"\S+\s*", self.answer(messages)):
            yield delta
        totals.usage = Usage(9, 4, 13, model=self.model_name)
        totals.finish_reason = "stop"


def make_rails(*, output: bool = True, fail: bool = False) -> tuple[LLMRails, Scripted]:
    outputs = f"[{OUTPUT_FLOW}]" if output else "[]"
    config = RailsConfig.from_content(
        yaml_content=f"""
models:
  - type: main
    engine: nim
    model: meta/llama-3.1-8b-instruct
    parameters: {{base_url: "{UNUSED_URL}"}}
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    parameters: {{base_url: "{UNUSED_URL}"}}
rails:
  input: {{flows: [{INPUT_FLOW}]}}
  output: {{flows: {outputs}}}
""",
        source="<test>",
    )
    rails = LLMRails(config)
    runtime = rails.runner.runtime
    runtime.input_rails[:] = [_rail(INPUT_FLOW, Judge("check input", "bomb", output=False))]
    if output:
        runtime.output_rails[:] = [_rail(OUTPUT_FLOW, Judge("check output", "poison", output=True))]
    main = Scripted(fail=fail)
    rails.runner.main = main
    return rails, main


def _rail(flow: str, check: Judge) -> Rail:
    ref = FlowRef.parse(flow)
    return Rail(ref=ref, spec=KNOWN_FLOWS[ref.name], check=check, on_error="block")


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


# -- the paths a turn can take ---------------------------------------------------------------------


class Served:
    """What one path gave: the reply, where it was blocked, the finish reason, and the turn's record
    (``explain()`` after it)."""

    def __init__(self, reply: str, blocked: str | None, finish: str | None, turn: TurnInfo) -> None:
        self.reply, self.blocked, self.finish, self.turn = reply, blocked, finish, turn

    def calls(self) -> list[tuple[str, bool, int, bool]]:
        return [(c.task, c.from_cache, c.total_tokens, c.cancelled) for c in self.turn.llm_calls]


async def generate(rails: LLMRails, text: str) -> Served:
    reply = await rails.generate_async(messages=user(text))
    checks = rails.explain().checks
    blocked = "input" if not all(r.allowed for r in checks.input) else None
    blocked = blocked or ("output" if not all(r.allowed for r in checks.output) else None)
    return Served(reply["content"], blocked, None, rails.explain())


async def stream_completed(rails: LLMRails, text: str) -> Served:
    stream = rails.stream_async(messages=user(text), stream_main=False)
    reply = await stream.complete()
    return Served(reply, stream.blocked, stream.finish_reason, rails.explain())


async def stream_iterated(rails: LLMRails, text: str) -> Served:
    stream = rails.stream_async(messages=user(text))
    reply = await stream.text()
    return Served(reply, stream.blocked, stream.finish_reason, rails.explain())


def _handlers(rails: LLMRails) -> Handlers:
    return Handlers(ServerState(ServeSettings(config="<test>"), {"test": rails}))


def _body(text: str, stream: bool) -> bytes:
    return json.dumps({"model": "m", "messages": user(text), "stream": stream}).encode()


async def serve_plain(rails: LLMRails, text: str) -> Served:
    response = await _handlers(rails).turn(_body(text, stream=False))
    assert isinstance(response, JSONResponse) and response.status_code == 200
    body = json.loads(response.body)
    choice = body["choices"][0]
    blocked = body["guardcache"].get("direction")
    return Served(choice["message"]["content"], blocked, choice["finish_reason"], rails.explain())


async def serve_streamed(rails: LLMRails, text: str) -> Served:
    response = await _handlers(rails).turn(_body(text, stream=True))
    assert isinstance(response, EventStream)
    data = b"".join([event async for event in response.events]).decode()
    chunks = [json.loads(line[6:]) for line in data.splitlines() if line.startswith("data: {")]
    reply = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    last = next(c for c in reversed(chunks) if c["choices"] and c["choices"][0]["finish_reason"])
    blocked = last["guardcache"].get("direction")
    return Served(reply, blocked, last["choices"][0]["finish_reason"], rails.explain())


PATHS: dict[str, Callable[[LLMRails, str], Awaitable[Served]]] = {
    "generate_async": generate,
    "stream_async(stream_main=False).complete()": stream_completed,
    "stream_async() iterated": stream_iterated,
    "serve, plain": serve_plain,
    "serve, streamed": serve_streamed,
}


# -- one turn, the same whichever path ran it -------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reply", "blocked", "outcome"),
    [
        (SAFE, "Sure: " + SAFE, None, "allowed"),
        (UNSAFE_IN, REFUSAL, "input", "blocked_verdict"),
        (UNSAFE_OUT, REFUSAL, "output", "blocked_verdict"),
    ],
    ids=["allowed", "blocked at input", "blocked at output"],
)
async def test_every_path_gives_the_same_reply_rails_outcome_and_records(
    text: str, reply: str, blocked: str | None, outcome: str
) -> None:
    served: dict[str, Served] = {}
    for name, path in PATHS.items():
        rails, _ = make_rails()
        served[name] = await path(rails, text)
    first = served["generate_async"]
    assert first.reply == reply and first.blocked == blocked
    assert first.turn.checks.outcome == outcome
    for name, got in served.items():
        assert (got.reply, got.blocked) == (reply, blocked), name
        assert got.turn.checks == first.turn.checks, name
        assert got.calls() == first.calls(), name
    finishes = {name: got.finish for name, got in served.items() if name != "generate_async"}
    assert set(finishes.values()) == {"stop" if blocked is None else "content_filter"}


async def test_generate_async_and_the_served_plain_turn_record_the_same_calls() -> None:
    rails, _ = make_rails()
    library = await generate(rails, SAFE)
    served = await serve_plain(rails, SAFE)
    checks_and_main = [("check input", True, 42, False), ("general", False, 13, False)]
    assert library.calls() == served.calls() == [*checks_and_main, ("check output", True, 42, False)]
    assert library.turn is not served.turn  # each turn its own record


async def test_a_plain_turn_runs_in_the_callers_task_with_the_main_model_called_plainly() -> None:
    for path in (generate, stream_completed, serve_plain):
        rails, main = make_rails()
        me = asyncio.current_task()
        await path(rails, SAFE)
        assert main.calls == [("plain", me)], path.__name__


async def test_stream_main_none_streams_the_main_model_only_when_a_piece_can_go_out_early() -> None:
    rails, main = make_rails()
    assert (await rails.stream_async(messages=user(SAFE), stream_main=None).text()) == "Sure: " + SAFE
    assert [kind for kind, _ in main.calls] == ["plain"]  # nothing could go out before the check
    rails, main = make_rails(output=False)
    stream = rails.stream_async(messages=user(SAFE), stream_main=None)
    assert [piece async for piece in stream] == ["Sure: ", "How ", "do ", "I ", "bake ", "bread?"]
    assert [kind for kind, _ in main.calls] == ["stream"]


async def test_a_turn_whose_main_model_fails_is_still_the_last_turn_explained() -> None:
    for path in (generate, stream_completed):
        rails, _ = make_rails(fail=True)
        with pytest.raises(BackendConnectionError):
            await path(rails, SAFE)
        turn = rails.explain()
        assert [r.flow for r in turn.checks.input] == [INPUT_FLOW] and turn.checks.output == ()
        assert [c.task for c in turn.llm_calls] == ["check input"], path.__name__


async def test_a_turn_runs_once_and_needs_a_user_message() -> None:
    rails, _ = make_rails()
    turn = GuardedTurn(rails.runner, user(SAFE))
    assert turn.turn.llm_calls == [] and turn.allowed  # before it runs: an empty record
    await turn.complete()
    with pytest.raises(RuntimeError, match="runs once"):
        await turn.complete()
    with pytest.raises(ValueError, match="user message"):
        GuardedTurn(rails.runner, [{"role": "assistant", "content": "hi"}])


async def test_a_stream_is_a_turn_whose_record_becomes_the_last_turn() -> None:
    rails, _ = make_rails()
    stream = rails.stream_async(messages=user(SAFE))
    assert isinstance(stream, GuardedStream) and isinstance(stream, GuardedTurn)
    await stream.text()
    assert rails.explain() is stream.turn and stream.turn.checks.outcome == "allowed"


async def test_runnable_rails_share_the_runner_of_the_rails_they_come_from() -> None:
    rails, _ = make_rails()
    from guardcache.rails.runnable import RunnableRails

    runnable = RunnableRails(rails)
    assert runnable.rails is rails  # NeMo's attribute: the LLMRails the turns run on
    assert runnable._runner is rails.runner
    assert (await runnable.ainvoke(SAFE)) == "Sure: " + SAFE
    assert rails.explain().checks.outcome == "allowed"


@pytest.mark.parametrize("face", ["LLMRails", "RunnableRails"])
def test_during_main_refuses_a_model_with_tools_bound_in_any_binding(face: str) -> None:
    """One rule for "this model may act" (rails/main_llm.py's binds_tools): runner.py read only the
    outermost binding's kwargs, so tools under a with_config() (or passed to RunnableRails, which
    wraps the model so) let a model that acts start before the input verdict."""
    from guardcache.rails.runnable import RunnableRails
    from guardcache.testing import EchoChatModel

    config = RailsConfig.from_content(
        yaml_content=f"""
models:
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    parameters: {{base_url: "{UNUSED_URL}"}}
rails:
  input: {{flows: [{INPUT_FLOW}], during_main: true}}
""",
        source="<test>",
    )
    tool = {"type": "function", "function": {"name": "send_email", "parameters": {"type": "object"}}}
    llm = EchoChatModel().bind(tools=[tool]).with_config(tags=["app"])
    with pytest.raises(ConfigError, match="during_main: the main model has tools bound"):
        LLMRails(config, llm=llm) if face == "LLMRails" else RunnableRails(config, llm=llm)
