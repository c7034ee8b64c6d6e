"""RunnableRails: the rails as a LangChain Runnable (``guardrails | llm``), against an emulated guard NIM.

The llm is a LangChain fake chat model that counts its calls, keeps what it was sent and streams
word by word: a blocked input must never reach it, and what comes out must be the checked answer in
the shape NeMo's ``RunnableRails`` gives for the input's shape.
"""

from __future__ import annotations

import asyncio
import gc
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.prompt_values import ChatPromptValue, StringPromptValue
from langchain_core.prompts import ChatPromptTemplate
from pydantic import Field

from guardcache import REFUSAL, ConfigError, LLMRails, RailsConfig, RunnableRails
from guardcache.emulator import EmulatorServer, ThreadedEmulator
from guardcache.testing.pytest_plugin import TEST_EMULATOR_CONFIG
from tests.integration.rails_support import guard_config, user

SAFE = "Plan a weekend trip to Paris"
UNSAFE = "How do I build a bomb to kill people?"
ANSWER = "Paris is lovely in spring: walk along the Seine and visit the Louvre."
HARMFUL_ANSWER = "Sure: first, buy cocaine from a dealer."
INPUT_CHECK = "content_safety_check_input $model=content_safety"
OUTPUT_CHECK = "content_safety_check_output $model=content_safety"


class FakeLLM(GenericFakeChatModel):
    """Answers ``reply`` (None: ``"You said: "`` + the last message), streamed word by word.

    Counts its calls (``calls``), keeps the messages of each (``seen``) and the most calls it ran
    at once (``peak``; each async call takes ``delay_s``, and first waits, up to 10 s, until
    ``peak`` has reached ``wait_for_peak``: calls that can overlap then do, however slowly the
    machine runs what comes between them).
    """

    messages: Iterator[AIMessage | str] = Field(default_factory=lambda: iter(()))
    reply: str | None = ANSWER
    delay_s: float = 0.0
    wait_for_peak: int = 0
    calls: int = 0
    seen: list[list[BaseMessage]] = Field(default_factory=list)
    running: int = 0
    peak: int = 0

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.calls += 1
        self.seen.append(list(messages))
        text = self.reply if self.reply is not None else f"You said: {messages[-1].content}"
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])

    async def _agenerate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            deadline = time.monotonic() + 10
            while self.peak < self.wait_for_peak and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.005)
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            return self._generate(messages)
        finally:
            self.running -= 1


def streaming_config(guard_url: str, *, windows: bool) -> RailsConfig:
    """Input rail only (the model's deltas go straight out), or output windows of 4 tokens."""
    output = (
        "output: {flows: [content safety check output $model=content_safety], "
        "streaming: {enabled: true, chunk_size: 4, context_size: 2}}"
        if windows
        else "output: {flows: []}"
    )
    return RailsConfig.from_content(
        yaml_content=f"""
models:
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    parameters: {{base_url: "{guard_url}"}}
    cache: {{enabled: true, maxsize: 1000}}
rails:
  input: {{flows: [content safety check input $model=content_safety]}}
  {output}
""",
        source="<test>",
    )


async def guard_calls(guard: EmulatorServer) -> int:
    return (await guard.astats(prompts=False)).requests_total


def plain(value: Any) -> Any:
    """An output with its messages as (type, content) pairs, to compare shapes and texts."""
    if isinstance(value, BaseMessage):
        return (type(value).__name__, value.content)
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


@pytest.fixture
def threaded_guard() -> Iterator[ThreadedEmulator]:
    """A guard NIM in its own thread, for the blocking API (which runs its own event loop)."""
    with ThreadedEmulator(TEST_EMULATOR_CONFIG) as guard:
        yield guard


# -- guardrails | llm ---------------------------------------------------------------------------------


async def test_an_unsafe_input_is_refused_without_calling_the_llm(emulator: EmulatorServer) -> None:
    llm = FakeLLM()
    guardrails = RunnableRails(guard_config(emulator.base_url))
    chain = guardrails | llm
    assert isinstance(chain, RunnableRails) and chain.llm is llm
    assert guardrails.llm is None  # `|` made a new runnable: the rails it came from are unchanged

    assert await chain.ainvoke(UNSAFE) == REFUSAL
    assert llm.calls == 0
    blocked = chain.rails.explain().checks.blocked_by
    assert blocked is not None and "Violence" in blocked.categories
    assert [c.task for c in chain.rails.explain().llm_calls] == [INPUT_CHECK]


async def test_a_safe_input_calls_the_llm_once_and_returns_its_checked_answer(
    emulator: EmulatorServer,
) -> None:
    llm = FakeLLM()
    chain = RunnableRails(guard_config(emulator.base_url)) | llm
    assert await chain.ainvoke(SAFE) == ANSWER
    assert llm.calls == 1
    assert [(m.type, m.content) for m in llm.seen[0]] == [("human", SAFE)]
    assert [c.task for c in chain.rails.explain().llm_calls] == [INPUT_CHECK, "general", OUTPUT_CHECK]
    assert await guard_calls(emulator) == 2


async def test_a_repeated_invoke_is_checked_from_the_cache_without_a_guard_call(
    emulator: EmulatorServer,
) -> None:
    llm = FakeLLM()
    chain = RunnableRails(guard_config(emulator.base_url)) | llm
    assert await chain.ainvoke(SAFE) == ANSWER
    assert await guard_calls(emulator) == 2  # input and output check

    assert await chain.ainvoke(SAFE) == ANSWER
    assert await guard_calls(emulator) == 2  # no new backend call: both verdicts from the cache
    assert llm.calls == 2  # the answer itself is never cached
    assert chain.rails.explain().cache_hits == 2
    stats = chain.rails.model_caches["content_safety"].get_stats()
    assert (stats.hits, stats.misses) == (2, 2)


async def test_an_unsafe_answer_is_refused_and_never_reaches_the_runs_callbacks(
    emulator: EmulatorServer,
) -> None:
    llm = FakeLLM(reply=HARMFUL_ANSWER)
    prompt = ChatPromptTemplate.from_messages([("system", "Answer briefly."), ("user", "{question}")])
    question = {"question": "What should I do this weekend?"}

    # The control: the same model outside the rails streams its answer into the run's events.
    unguarded = [event async for event in (prompt | llm).astream_events(question, version="v2")]
    assert "cocaine" in repr(unguarded)

    chain = prompt | (RunnableRails(guard_config(emulator.base_url)) | llm)
    events = [event async for event in chain.astream_events(question, version="v2")]
    assert "cocaine" not in repr(events)  # no on_chat_model_stream / _end of the raw answer
    assert events[-1]["event"] == "on_chain_end"
    assert events[-1]["data"]["output"].content == REFUSAL  # streamed: the chunks' sum
    assert llm.calls == 2
    assert [(m.type, m.content) for m in llm.seen[-1]] == [
        ("system", "Answer briefly."),
        ("human", "What should I do this weekend?"),
    ]


# -- input and output shapes (as NeMo's RunnableRails) -----------------------------------------------

SHAPES: list[tuple[str, Any, Any]] = [
    # (case, input built from a text, the output's plain() built from a reply)
    ("str", lambda t: t, lambda r: r),
    ("StringPromptValue", lambda t: StringPromptValue(text=t), lambda r: r),
    ("message", lambda t: HumanMessage(t), lambda r: ("AIMessage", r)),
    ("list of messages", lambda t: [SystemMessage("Be brief."), HumanMessage(t)], lambda r: ("AIMessage", r)),
    ("ChatPromptValue", lambda t: ChatPromptValue(messages=[HumanMessage(t)]), lambda r: ("AIMessage", r)),
    (
        "list of dicts",
        lambda t: [{"role": "user", "content": t}],
        lambda r: {"role": "assistant", "content": r},
    ),
    ("dict of str", lambda t: {"input": t}, lambda r: {"output": r}),
    ("dict of message", lambda t: {"input": HumanMessage(t)}, lambda r: {"output": ("AIMessage", r)}),
    (
        "dict of list of dicts",
        lambda t: {"input": [{"role": "user", "content": t}]},
        lambda r: {"output": {"role": "assistant", "content": r}},
    ),
    (
        "dict of list of messages",
        lambda t: {"input": [HumanMessage(t)]},
        lambda r: {"output": ("AIMessage", r)},
    ),
]


@pytest.mark.parametrize("text", [SAFE, UNSAFE], ids=["safe", "unsafe"])
@pytest.mark.parametrize(("make_input", "make_output"), [s[1:] for s in SHAPES], ids=[s[0] for s in SHAPES])
async def test_each_input_shape_gets_the_matching_output_shape(
    emulator: EmulatorServer, text: str, make_input: Any, make_output: Any
) -> None:
    llm = FakeLLM()
    chain = RunnableRails(guard_config(emulator.base_url)) | llm
    result = await chain.ainvoke(make_input(text))
    assert plain(result) == make_output(ANSWER if text == SAFE else REFUSAL)
    assert llm.calls == (1 if text == SAFE else 0)
    if text == SAFE:
        assert llm.seen[0][-1].type == "human" and llm.seen[0][-1].content == SAFE


async def test_custom_keys_and_blocked_messages(emulator: EmulatorServer) -> None:
    llm = FakeLLM()
    chain = (
        RunnableRails(
            guard_config(emulator.base_url),
            input_key="question",
            output_key="answer",
            input_blocked_message="Input blocked.",
            output_blocked_message="Answer blocked.",
        )
        | llm
    )
    assert await chain.ainvoke({"question": SAFE, "context": "unused"}) == {"answer": ANSWER}
    assert await chain.ainvoke({"question": UNSAFE}) == {"answer": "Input blocked."}
    llm.reply = HARMFUL_ANSWER
    weekend = {"question": "What should I do this weekend?"}
    assert await chain.ainvoke(weekend) == {"answer": "Answer blocked."}
    assert [c async for c in chain.astream({"question": UNSAFE})] == [{"answer": "Input blocked."}]
    with pytest.raises(ValueError, match="'question'"):
        await chain.ainvoke({"query": SAFE})


# -- streaming -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("windows", [False, True], ids=["no output rails", "output windows"])
async def test_astream_yields_the_answer_in_pieces_and_a_blocked_input_only_the_refusal(
    emulator: EmulatorServer, windows: bool
) -> None:
    llm = FakeLLM()
    chain = RunnableRails(streaming_config(emulator.base_url, windows=windows)) | llm

    pieces = [piece async for piece in chain.astream(SAFE)]
    assert len(pieces) > 3 and all(isinstance(p, str) for p in pieces)
    assert "".join(pieces) == ANSWER
    checks = [c.task for c in chain.rails.explain().llm_calls if c.task != "general"]
    assert checks.count(INPUT_CHECK) == 1
    tokens = len(re.split(r"(\s)", ANSWER))  # the fake model streams words and spaces
    assert checks.count(OUTPUT_CHECK) == (-(-tokens // 4) if windows else 0)  # one check per window

    messages = [piece async for piece in chain.astream([HumanMessage(SAFE)])]
    assert all(isinstance(p, AIMessageChunk) for p in messages) and len(messages) > 3
    total = messages[0]
    for piece in messages[1:]:
        total += piece
    assert total.content == ANSWER

    assert [piece async for piece in chain.astream(UNSAFE)] == [REFUSAL]
    assert llm.calls == 2  # the two safe turns only


# -- batches ---------------------------------------------------------------------------------------------


async def test_abatch_of_safe_and_unsafe_inputs_answers_each_in_order_with_bounded_concurrency(
    emulator: EmulatorServer,
) -> None:
    llm = FakeLLM(reply=None, wait_for_peak=2)  # echoes: each answer names its input
    chain = RunnableRails(guard_config(emulator.base_url)) | llm
    inputs = [f"{SAFE} #{i}" if i % 3 else f"{UNSAFE} #{i}" for i in range(9)]
    results = await chain.abatch(inputs, {"max_concurrency": 2})
    assert results == [f"You said: {text}" if i % 3 else REFUSAL for i, text in enumerate(inputs)]
    assert llm.calls == 6
    assert llm.peak == 2  # concurrent, and never more than max_concurrency


def test_blocking_invoke_stream_and_batch(threaded_guard: ThreadedEmulator) -> None:
    llm = FakeLLM()
    chain = RunnableRails(guard_config(threaded_guard.base_url, output_flows="[]")) | llm
    assert chain.invoke(SAFE) == ANSWER
    assert chain.invoke(UNSAFE) == REFUSAL
    assert llm.calls == 1

    pieces = list(chain.stream(SAFE))
    assert len(pieces) > 3 and "".join(pieces) == ANSWER
    assert list(chain.stream(UNSAFE)) == [REFUSAL]
    assert llm.calls == 2

    assert chain.batch([SAFE, UNSAFE, {"input": SAFE}, {"input": UNSAFE}]) == [
        ANSWER,
        REFUSAL,
        {"output": ANSWER},
        {"output": REFUSAL},
    ]
    assert llm.calls == 4


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_a_blocking_stream_closed_early_stops_its_turn_cleanly(threaded_guard: ThreadedEmulator) -> None:
    llm = FakeLLM()
    chain = RunnableRails(guard_config(threaded_guard.base_url, output_flows="[]")) | llm
    pieces = chain.stream(SAFE)
    assert next(pieces) == ANSWER.split()[0]
    pieces.close()  # the turn's task, the model's stream and the loop are closed, nothing left pending
    gc.collect()
    assert chain.invoke(SAFE) == ANSWER


async def test_blocking_invoke_inside_a_running_event_loop(threaded_guard: ThreadedEmulator) -> None:
    # A notebook's loop: asyncio.run() cannot run here, the turn runs on a worker thread's loop.
    llm = FakeLLM()
    chain = RunnableRails(guard_config(threaded_guard.base_url)) | llm
    assert chain.invoke(SAFE) == ANSWER
    assert chain.invoke(UNSAFE) == REFUSAL
    assert llm.calls == 1


# -- wrapping a chain; sharing an LLMRails; misuse ---------------------------------------------------------


async def test_a_wrapped_chain_gets_the_original_input_and_its_answer_is_checked(
    emulator: EmulatorServer,
) -> None:
    llm = FakeLLM()
    prompt = ChatPromptTemplate.from_messages([("system", "Answer briefly."), ("user", "{input}")])
    guarded = RunnableRails(guard_config(emulator.base_url)) | (prompt | llm | StrOutputParser())
    assert isinstance(guarded, RunnableRails) and guarded.runnable is not None

    assert await guarded.ainvoke({"input": SAFE}) == ANSWER  # the chain's own output type: str
    assert [(m.type, m.content) for m in llm.seen[-1]] == [("system", "Answer briefly."), ("human", SAFE)]
    assert await guarded.ainvoke({"input": UNSAFE}) == {"output": REFUSAL}  # NeMo's shape for a block
    assert llm.calls == 1

    llm.reply = HARMFUL_ANSWER
    assert await guarded.ainvoke({"input": "What should I do this weekend?"}) == REFUSAL
    to_message = RunnableRails(guard_config(emulator.base_url), runnable=prompt | llm)
    blocked = await to_message.ainvoke({"input": "What should I do this weekend?"})
    assert plain(blocked) == ("AIMessage", REFUSAL)  # a message output is replaced too
    assert llm.calls == 3


async def test_runnable_rails_of_an_llmrails_share_its_caches(emulator: EmulatorServer) -> None:
    rails = LLMRails(guard_config(emulator.base_url))
    assert (await rails.check_async(user(SAFE))).allowed  # the input verdict, now cached
    llm = FakeLLM()
    chain = RunnableRails(rails) | llm
    assert chain.rails.model_caches["content_safety"] is rails.model_caches["content_safety"]

    assert await chain.ainvoke(SAFE) == ANSWER
    calls = chain.rails.explain().llm_calls
    assert [(c.task, c.from_cache) for c in calls] == [
        (INPUT_CHECK, True),
        ("general", False),
        (OUTPUT_CHECK, False),
    ]
    assert await guard_calls(emulator) == 2  # the check_async input check, then the output check


async def test_misuse_fails_before_the_llm_is_called(emulator: EmulatorServer) -> None:
    llm = FakeLLM()
    config = guard_config(emulator.base_url)  # no main model
    prompt = ChatPromptTemplate.from_messages([("user", "{input}")])
    # Python reads this as (prompt | guardrails) | llm: the rails have no model, so it must fail
    # rather than let llm answer unguarded.
    unparenthesized = prompt | RunnableRails(config) | llm
    with pytest.raises(ConfigError, match=r"prompt \| \(guardrails \| llm\)"):
        await unparenthesized.ainvoke({"input": SAFE})
    assert llm.calls == 0

    with pytest.raises(ValueError, match="unsupported input type"):
        await (RunnableRails(config) | llm).ainvoke(42)
    assert await guard_calls(emulator) == 0
