"""One guarded turn, run one way for every caller.

``LLMRails.generate_async``, ``LLMRails.stream_async`` (a
:class:`~guardcache.rails.streaming.GuardedStream`), :class:`~guardcache.rails.runnable.RunnableRails`
and ``guardcache serve`` (plain and streamed) all run a :class:`GuardedTurn`, so a turn is decided,
recorded and traced the same whichever face started it. Two pieces:

- :class:`TurnRunner`: what a config becomes at start (its rails, clients and caches, its main
  model, its refusal) and the last turn it finished (``explain()``). One per ``LLMRails``; a
  ``RunnableRails`` built from a config makes its own, one built from rails shares theirs.
- :class:`GuardedTurn`: one turn's messages and, as it runs, its outcome (``blocked``, ``rail``,
  ``turn``, ``usage``, ``finish_reason``). It runs in the caller's task: :meth:`GuardedTurn.complete`
  returns the reply in one piece, :meth:`GuardedTurn.run` hands each piece to a callback as it is
  ready (a ``GuardedStream`` runs it in a task of its own and queues the pieces for its reader). A
  caller that wants the reply whole pays for no task and no queue.

What the user receives, in order:

1. **Nothing before the input verdict.** The input rails run first (in parallel or in order, as the
   group says). With ``rails.input.during_main: true`` the main model may start while they run (on
   a check miss, see :mod:`guardcache.rails.speculation`), but what it streams is buffered until the
   verdict; a block cancels it and only the refusal is sent.
2. **The answer, checked as the config says.** The main model is called plainly (one piece: the
   reply in one piece, or a stream whose output rails check it whole) or streamed:
   - no output rails: the main model's deltas as they arrive;
   - output rails, ``rails.output.streaming.enabled: false`` (the default): the whole answer is
     collected and checked once, then sent (or the refusal instead);
   - ``rails.output.streaming.enabled: true``: the deltas are grouped into chunks of ``chunk_size``
     tokens (one streamed delta is one token, as in NeMo); each chunk is checked as
     ``bot_response`` together with up to ``context_size`` tokens before it (the window), through
     the same cached checks as any other (a window repeated by many users is one backend call).
     With ``stream_first: false`` (guardcache's default) a chunk is sent once its window passed;
     with ``stream_first: true`` it is sent first and checked after (NeMo's default: less latency,
     but a block then ends a stream whose earlier text the user has seen). The model keeps
     streaming into a buffer while a window is checked. The last, shorter chunk is checked too,
     and an empty answer is checked once as it is.
3. **A block ends the turn with the refusal** (in the user's language when multilingual refusals
   are on): a main call still running is cancelled (its connection closed), the refusal is the last
   piece, ``blocked`` says ``"input"`` or ``"output"`` and ``rail`` names the rail.

The turn's LLM calls are recorded in its own ``request_scope`` (the ``guardcache.turn`` span when
tracing is on), so concurrent turns never see each other's records; when it ends, ended by an error
or cancelled included, its record is what ``explain()`` returns.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from guardcache import language
from guardcache.cache import CacheInterface
from guardcache.checks.verdict import MESSAGE, TOOL_CALL, TOOL_RESULT, RailResult
from guardcache.config import RailGroup, RailsConfig
from guardcache.config.models import check_model_keys
from guardcache.errors import BackendError, ConfigError
from guardcache.llm.default_pools import aclose_all
from guardcache.llm.records import LLMCallInfo, record_call, request_scope
from guardcache.llm.types import ChatResult, Usage
from guardcache.rails.builder import build_runtime
from guardcache.rails.caches import log_caches
from guardcache.rails.main_llm import ClientLLM, LangChainLLM, MainLLM, StreamTotals, binds_tools
from guardcache.rails.messages import Message, history, last_index, message_text
from guardcache.rails.rail import Rail
from guardcache.rails.shadow import Rng, ShadowRails
from guardcache.rails.speculation import abandon, run_with_early_start
from guardcache.rails.tools import MALFORMED, TOOL_CALL_FORMAT, call_texts, tool_names, tool_results
from guardcache.rails.turn import REFUSAL, CheckResult, TurnInfo

log = logging.getLogger("guardcache.rails")

NO_USAGE = Usage(0, 0, 0, 0)
"""The usage recorded for a main call cancelled before it answered (its tokens are unknown)."""


class TurnRunner:
    """A config's rails, main model and refusal, built once and ready to run turns.

    ``llm`` may be any langchain-core chat model; without it the config's ``main`` model is called
    through guardcache's own client (and without that, turns need a main model: only
    :meth:`check` runs). The start-up checks a config can fail live here, so every face of the
    rails fails the same way at construction rather than on a user's turn.

    Attributes:
        config: the :class:`RailsConfig`.
        runtime: the built clients, caches and rails (``guardcache.rails.builder.Runtime``).
        model_caches: each guard model type's verdict cache (the runtime's dict).
        main: the main model, or None.
        last: the last turn finished (what :meth:`explain` returns), or None.
        shadow: the shadow rails (``guardcache.rails.shadow``), or None when the config has none;
            ``shadow_rng`` is their sampling's random source (a seeded one makes a test exact).
    """

    def __init__(self, config: RailsConfig, llm: Any | None = None, *, shadow_rng: Rng | None = None) -> None:
        self.config = config
        # An api_key_env_var naming an unset or empty variable stops here, not as a 401 on a turn.
        check_model_keys(config.models, config.source, skip=("main",) if llm is not None else ())
        for model in config.models:
            note = model.unsent_key_note()
            if note is not None:
                log.warning("%s: model %r: %s", config.source or "<config>", model.type, note)
        self.runtime = build_runtime(config)
        self.model_caches: dict[str, CacheInterface] = self.runtime.caches
        log_caches(config, self.model_caches)
        self.shadow: ShadowRails | None = ShadowRails.build(config, self.runtime, shadow_rng)
        self.main: MainLLM | None = None
        if llm is not None:
            _refuse_acting_early(config, llm)
            self.main = LangChainLLM(llm)
        elif "main" in config.model_types:
            # The main model's generation settings (parsed at validation) go with every turn.
            self.main = ClientLLM(self.runtime.clients["main"], config.model("main").generation.as_body())
        self.last: TurnInfo | None = None
        self._multilingual = config.rails.config.content_safety.multilingual
        if self._multilingual.enabled:
            try:
                language.require_detector()  # a missing extra fails now, not on the first block
            except ImportError as exc:
                raise ConfigError(
                    f"{config.source or '<config>'}: rails.config.content_safety.multilingual.enabled "
                    f"needs language detection: {exc}"
                ) from exc
        # What every turn reads, resolved once (a turn does no config work).
        rails = config.rails
        self.input_rails: Sequence[Rail] = self.runtime.input_rails
        self.output_rails: Sequence[Rail] = self.runtime.output_rails
        self.input_group: RailGroup = rails.input
        self.output_group: RailGroup = rails.output
        # What judges tool results and tool calls (``guardcache.rails.tools``): the input and
        # output rails (NeMo's rails.tool_input / rails.tool_output sections, when a config has
        # them, replace these).
        runtime = self.runtime
        tool_in, tool_out = bool(rails.tool_input.flows), bool(rails.tool_output.flows)
        self.tool_input_rails: Sequence[Rail] = runtime.tool_input_rails if tool_in else self.input_rails
        self.tool_input_group: RailGroup = rails.tool_input if tool_in else rails.input
        self.tool_output_rails: Sequence[Rail] = runtime.tool_output_rails if tool_out else self.output_rails
        self.tool_output_group: RailGroup = rails.tool_output if tool_out else rails.output
        self.speculates = bool(rails.input.during_main and self.input_rails)
        # The streaming settings when output rails check a streamed answer window by window.
        streaming = rails.output.streaming
        self.windows = streaming if self.output_rails and streaming.enabled else None
        # Whether a streamed reply can send a piece before the answer ends (no output rails, or
        # output windows); otherwise it is sent whole after its check, so a plain call serves it.
        self.pieces_before_end = not self.output_rails or self.windows is not None

    def with_main(self, main: MainLLM) -> TurnRunner:
        """These rails with another main model: the same config, rails, clients and caches (a
        shallow copy), its own main model and last turn (``RunnableRails`` around a model)."""
        if isinstance(main, LangChainLLM):
            _refuse_acting_early(self.config, main.llm)
        runner = copy.copy(self)
        runner.main = main
        runner.last = None
        return runner

    def refusal(self, user_input: Any) -> str:
        """The refusal text: in the user's language when multilingual is on (detected only for
        blocked turns, so allowed turns never pay for it)."""
        if not self._multilingual.enabled:
            return REFUSAL
        return language.refusal_message(
            language.detect_language(message_text(user_input)), self._multilingual.refusal_messages
        )

    async def check(self, messages: Sequence[Message]) -> CheckResult:
        """Run only the rails (``LLMRails.check_async``): the input rails on the last user message,
        and the output rails too when the last message is the assistant's.

        Raises ``ValueError`` when there is nothing to check (no user message and no final
        assistant message): an empty result would read as "allowed" with no rail run.
        """
        user_at = last_index(messages, "user")
        bot_last = bool(messages) and messages[-1]["role"] == "assistant"
        if user_at is None and not bot_last:
            raise ValueError(
                "check_async: nothing to check: pass a user message (role 'user' or 'human') and/or "
                "end with the assistant's message (role 'assistant' or 'ai')"
            )
        variables: dict[str, Any] = {
            "user_input": messages[user_at]["content"] if user_at is not None else "",
            "history": history(messages, user_at if user_at is not None else 0),
        }
        with request_scope() as explain:
            turn = TurnInfo(explain)
            inputs: list[RailResult] = []
            if user_at is not None and not cached_results(self.input_rails, variables, inputs):
                inputs = await run_rest(self.input_rails, variables, self.input_group, inputs)
            outputs: list[RailResult] = []
            if bot_last:
                variables["bot_response"] = messages[-1]["content"]
                if not cached_results(self.output_rails, variables, outputs):
                    outputs = await run_rest(self.output_rails, variables, self.output_group, outputs)
            turn.checks = CheckResult(tuple(inputs), tuple(outputs))
        self.last = turn
        return turn.checks

    def explain(self) -> TurnInfo:
        """The last turn these rails finished: its LLM calls (``from_cache`` marks hits) and rails."""
        if self.last is None:
            raise RuntimeError("explain(): no turn has run yet")
        return self.last

    async def aclose(self, *, flush: bool = True) -> None:
        """Close what the running event loop opened for these rails: the Redis tier's connections
        (after flushing its stats when ``flush``) and the HTTP pools. A blocking API's short-lived
        loop closes them without flushing (otherwise only the garbage collector frees them).
        This loop's shadow samples end first (drained within ``rails.shadow.close_timeout`` when
        ``flush``, else cancelled: a blocking call's loop is about to end), before their clients close.
        With ``flush`` (a graceful stop) each cache's snapshot (``cache.snapshot``) is written a last
        time and its schedule ends."""
        if self.shadow is not None:
            await self.shadow.aclose(drain=flush)
        if flush:  # a graceful stop: each snapshot written one last time (off the loop's thread)
            for snapshotter in self.runtime.snapshots:
                await asyncio.to_thread(snapshotter.close)
        for cache in self.model_caches.values():
            close = getattr(cache, "aclose", None)  # the Redis tier: its connections are per loop
            if close is not None:
                await close(flush=flush)
        await aclose_all()


class GuardedTurn:
    """One guarded turn: its messages, and as it runs, its outcome. Runs once, in the caller's task.

    Args:
        runner: the rails to run it on.
        messages: the turn's messages, read already (``read_messages``); not copied.
        params: per-turn parameters of the main model (``temperature``, ``max_tokens``...); not copied.
        stream_main: call the main model streamed (True) or plainly (False); None streams it only
            when a piece can reach the user before the answer ends (``TurnRunner.pieces_before_end``):
            an answer the output rails check whole is sent in one piece after its check either way,
            and a plain call spares reading it event by event.
        defer_shadow: the caller starts the turn's shadow sample itself (:meth:`start_shadow`), once
            the reply is delivered (``guardcache serve``: after the response is sent); by default it
            starts when the turn ends.

    Raises ``ValueError`` without a user message and ``ConfigError`` without a main model, at once.

    Attributes (final once the turn ended):
        blocked: ``"input"``, ``"output"`` or None.
        rail: the flow that blocked, if any.
        turn: the :class:`TurnInfo` of this turn (also what ``explain()`` returns after it).
        usage: the main model's usage (None when it did not run or reported none).
        finish_reason: the main model's (``"content_filter"`` when a rail blocked).
        first_piece_at: ``time.monotonic()`` when the first piece of the reply was ready.
        tool_calls: the main model's tool calls (OpenAI's shape, as it sent them), once the rails
            let them through; ``()`` when it made none or the turn was blocked.

    Tool results in ``messages`` (``role: "tool"``) are judged as inputs, and the main model's tool
    calls as outputs (see :mod:`guardcache.rails.tools`); ``params`` may carry ``tools``,
    ``tool_choice`` and ``parallel_tool_calls`` for the main model.
    """

    __slots__ = (
        "_answer",
        "_calls",
        "_calls_cut",
        "_defer_shadow",
        "_ended",
        "_messages",
        "_params",
        "_runner",
        "_sink",
        "_stream_main",
        "_tool_results",
        "_variables",
        "blocked",
        "finish_reason",
        "first_piece_at",
        "rail",
        "tool_calls",
        "turn",
        "usage",
    )

    def __init__(
        self,
        runner: TurnRunner,
        messages: Sequence[Message],
        params: Mapping[str, Any] | None = None,
        *,
        stream_main: bool | None = False,
        defer_shadow: bool = False,
    ) -> None:
        user_at = last_index(messages, "user")
        if user_at is None:
            raise ValueError("a guarded turn needs a user message (role 'user' or 'human') to answer")
        if runner.main is None:
            raise ConfigError(
                f"{runner.config.source or '<config>'}: no main model: add a model with type: main, "
                "pass llm= to LLMRails, or use check_async() to run only the rails"
            )
        self._runner = runner
        self._messages = messages
        self._params: Mapping[str, Any] = params if params is not None else {}
        self._stream_main = runner.pieces_before_end if stream_main is None else stream_main
        self._variables: dict[str, Any] = {
            "user_input": messages[user_at]["content"],
            "history": history(messages, user_at),
        }
        self._sink: Callable[[str], object] | None = None
        self.blocked: str | None = None
        self.rail: str | None = None
        self.turn = _NOT_RUN  # the turn's own record from the moment it runs
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.first_piece_at: float | None = None
        # The tool results to judge before the main model reads them (positions in messages).
        self._tool_results = tool_results(messages)
        self._calls: tuple[Any, ...] = ()  # the main model's tool calls, as it sent them
        self._calls_cut: str | None = None  # why they are incomplete (a stream that broke)
        self.tool_calls: tuple[dict[str, Any], ...] = ()  # the calls the rails let through
        # The main model's whole answer, kept only for shadow output rails (None: none, or not kept).
        self._answer: str | None = None
        self._defer_shadow = defer_shadow
        self._ended = False  # the turn ran to its end (answered or refused): it may be sampled

    @property
    def allowed(self) -> bool:
        return self.blocked is None

    @property
    def one_piece(self) -> bool:
        """Whether the reply comes in one piece, when the turn ends (the main model called
        plainly): a stream of it loses nothing when the turn runs whole in the caller's task
        (``GuardedStream.complete``: no producer task, no queue)."""
        return not self._stream_main

    async def complete(self) -> str:
        """Run the turn in the calling task and return the reply's text (the answer or the
        refusal); errors (a ``BackendError`` of the main model) are raised."""
        pieces: list[str] = []
        await self.run(pieces.append)
        return "".join(pieces)

    async def run(self, send: Callable[[str], object]) -> None:
        """Run the turn in the calling task, handing each piece of the reply to ``send`` as it is
        ready (never an empty one); errors are raised. The turn's records are scoped to this call,
        and its record becomes the runner's last turn when it ends, however it ends."""
        if self._sink is not None:
            raise RuntimeError("a GuardedTurn runs once")
        self._sink = send
        runner = self._runner
        with request_scope() as explain:
            self.turn = TurnInfo(explain)
            try:
                await self._run()
            finally:
                runner.last = self.turn
        self._ended = True
        if runner.shadow is not None and not self._defer_shadow:
            self.start_shadow()

    def start_shadow(self) -> bool:
        """Offer this turn, once it ended, to the shadow rails (``guardcache.rails.shadow``): a
        sampled turn is judged in a task of its own that nobody awaits; True when one started.
        Called by :meth:`run` itself unless the turn was made with ``defer_shadow``; a turn that
        ended with an error, or a config without shadow rails, starts nothing."""
        shadow = self._runner.shadow
        if shadow is None or not self._ended:
            return False
        self._ended = False  # once
        return shadow.offer(self._variables, self._answer, self.turn)

    # -- the turn --------------------------------------------------------------------------------

    def _send(self, piece: str) -> None:
        if piece:
            if self.first_piece_at is None:
                self.first_piece_at = time.monotonic()
            self._sink(piece)  # type: ignore[misc]  # set by run() before the turn starts

    async def _run(self) -> None:
        runner = self._runner
        variables = self._variables
        # An early main model's stream is buffered here until the verdict (a plain answer needs none).
        buffer: asyncio.Queue[str | _End] | None = None
        early: asyncio.Task[Any] | None = None
        # A tool result is judged before the main model reads it: no early start with one.
        if runner.speculates and not self._tool_results:
            buffer = asyncio.Queue() if self._stream_main else None
            start = self._pump(buffer) if buffer is not None else self._generate()
            inputs, early = await run_with_early_start(self._inputs, lambda: start)
            if early is None:
                start.close()  # the coroutine never ran
        elif self._tool_results:
            inputs = await self._inputs()
        else:
            inputs = []
            if not cached_results(runner.input_rails, variables, inputs):
                inputs = await run_rest(runner.input_rails, variables, runner.input_group, inputs)
        self.turn.checks = CheckResult(tuple(inputs))
        blocker = _blocker(inputs)
        if blocker is not None:
            if early is not None:
                await abandon(early)
            self._block("input", blocker)
            return

        outputs: list[RailResult] = []
        if not self._stream_main:  # one answer, checked whole
            content = await early if early is not None else await self._generate()
            await self._check_whole(content, inputs, outputs)
            return

        if early is None and runner.windows is None:
            # Nothing runs beside the stream: read it in this task (no pump task, no buffer).
            if not runner.output_rails:
                await self._stream(self._send)
                if self._calls or self._calls_cut:
                    await self._check_calls(inputs, outputs)
            else:
                pieces: list[str] = []
                await self._stream(pieces.append)
                await self._check_whole("".join(pieces), inputs, outputs)
            return

        if buffer is None:
            buffer = asyncio.Queue()
        pump = early if early is not None else asyncio.create_task(self._pump(buffer))
        try:
            if not runner.output_rails:
                async for delta in _drain(buffer):
                    self._send(delta)
            elif runner.windows is None:
                content = "".join([delta async for delta in _drain(buffer)])
                await self._check_whole(content, inputs, outputs)
                return
            else:
                await self._check_windows(buffer, inputs, outputs)
            if self.blocked is None and (self._calls or self._calls_cut):
                await self._check_calls(inputs, outputs)
        finally:
            if not pump.done():
                await abandon(pump)
            else:
                await asyncio.gather(pump, return_exceptions=True)

    async def _inputs(self) -> list[RailResult]:
        """The input rails on the user's message, then on each tool result (the tool input rails:
        ``TurnRunner.tool_input_rails``) with the conversation before it as its history, in order;
        the first block stops them."""
        runner = self._runner
        results = await run_group(runner.input_rails, self._variables, runner.input_group)
        if not self._tool_results or _blocker(results) is not None:
            return results
        messages = self._messages
        rails, group = runner.tool_input_rails, runner.tool_input_group
        for at in self._tool_results:
            variables = {"user_input": messages[at]["content"], "history": history(messages, at)}
            found = await run_group(rails, variables, group, kind=TOOL_RESULT)
            results += found
            if _blocker(found) is not None:
                break
        return results

    async def _check_whole(self, content: str, inputs: list[RailResult], outputs: list[RailResult]) -> None:
        runner = self._runner
        if content or not (self._calls or self._calls_cut):  # tool calls alone: no answer text
            self._answer = content  # the whole answer, judged or not: what shadow output rails judge
        if self._calls or self._calls_cut:  # the answer calls tools: its text (if any), then each call
            if content:
                outputs += await run_group(
                    runner.output_rails, {**self._variables, "bot_response": content}, runner.output_group
                )
                self.turn.checks = CheckResult(tuple(inputs), tuple(outputs))
                blocker = _blocker(outputs)
                if blocker is not None:
                    self._block("output", blocker)
                    return
            if await self._check_calls(inputs, outputs):
                self._send(content)
            return
        variables = {**self._variables, "bot_response": content}
        found: list[RailResult] = []
        if not cached_results(runner.output_rails, variables, found):
            found = await run_rest(runner.output_rails, variables, runner.output_group, found)
        outputs += found
        self.turn.checks = CheckResult(tuple(inputs), tuple(outputs))
        blocker = _blocker(outputs)
        if blocker is not None:
            self._block("output", blocker)
        else:
            self._send(content)

    async def _check_calls(self, inputs: list[RailResult], outputs: list[RailResult]) -> bool:
        """Judge the main model's tool calls, one check per call (the tool output rails:
        ``TurnRunner.tool_output_rails``); True when every call passed (they become
        :attr:`tool_calls`), else the turn is blocked. Calls that cannot be read (see
        :mod:`guardcache.rails.tools`) block without a verdict, before any guard is asked."""
        runner = self._runner
        problem = self._calls_cut
        texts: list[str] = []
        if problem is None:
            if self.finish_reason == "length":
                problem = "the tool call was cut off (finish_reason: length)"
            else:
                texts, problem = call_texts(self._calls, self._offered_tools())
        if problem is not None:
            result = RailResult(TOOL_CALL_FORMAT, False, error=f"{MALFORMED}: {problem}", kind=TOOL_CALL)
            log.warning("the main model's tool call cannot be judged (%s); blocked", problem)
            outputs.append(result)
            self.turn.checks = CheckResult(tuple(inputs), tuple(outputs))
            self._block("output", result)
            return False
        rails, group = runner.tool_output_rails, runner.tool_output_group
        for text in texts:
            found = await run_group(rails, {**self._variables, "bot_response": text}, group, kind=TOOL_CALL)
            outputs += found
            self.turn.checks = CheckResult(tuple(inputs), tuple(outputs))
            blocker = _blocker(found)
            if blocker is not None:
                self._block("output", blocker)
                return False
        self.tool_calls = tuple(self._calls)
        return True

    def _offered_tools(self) -> frozenset[str]:
        """The functions the main model may call this turn: the request's ``tools`` and those the
        model itself carries (a LangChain model's ``bind_tools``, the config's parameters)."""
        main = self._runner.main
        return tool_names(self._params.get("tools")) | getattr(main, "tool_names", frozenset())

    async def _check_windows(
        self, buffer: asyncio.Queue[str | _End], inputs: list[RailResult], outputs: list[RailResult]
    ) -> None:
        runner = self._runner
        settings = runner.windows
        assert settings is not None
        size, keep, first = settings.chunk_size, settings.context_size, settings.stream_first
        rails_out, group, variables = runner.output_rails, runner.output_group, self._variables
        context: list[str] = []
        chunk: list[str] = []
        checked = False

        async def check(tokens: list[str]) -> bool:
            nonlocal context, checked
            checked = True
            text = "".join(tokens)
            if first:
                self._send(text)
            window = "".join(context) + text
            results = await run_group(rails_out, {**variables, "bot_response": window}, group)
            outputs.extend(results)
            self.turn.checks = CheckResult(tuple(inputs), tuple(outputs))
            blocker = _blocker(results)
            if blocker is not None:
                self._block("output", blocker)
                return False
            if not first:
                self._send(text)
            context = (context + tokens)[-keep:] if keep else []
            return True

        async for delta in _drain(buffer):
            chunk.append(delta)
            if len(chunk) >= size:
                tokens, chunk = chunk, []
                if not await check(tokens):
                    return
        if chunk or not checked:
            await check(chunk)

    def _block(self, direction: str, blocker: RailResult) -> None:
        self.blocked = direction
        self.rail = blocker.flow
        self.finish_reason = "content_filter"
        self._send(self._runner.refusal(self._variables["user_input"]))

    # -- the main model --------------------------------------------------------------------------

    async def _generate(self) -> str:
        """Call the main model plainly; records the call."""
        main = self._runner.main
        assert main is not None
        started = time.monotonic()
        finish = "stop"
        try:
            complete = getattr(main, "complete", None)  # the whole answer, tool calls included
            if complete is not None:
                result: ChatResult = await complete(self._messages, **self._params)
                content, usage, finish = result.content, result.usage, result.finish_reason or "stop"
                self._calls = result.tool_calls
            else:  # a main model that answers text only
                content, usage = await main.generate(self._messages, **self._params)
        except asyncio.CancelledError:  # started early, then the input rails blocked the turn
            _record_cancelled(started)
            raise
        record_call(
            LLMCallInfo.from_usage("general", usage, duration=time.monotonic() - started, from_cache=False)
        )
        self.usage = usage
        self.finish_reason = finish
        return content

    async def _pump(self, buffer: asyncio.Queue[str | _End]) -> None:
        """Stream the main model into ``buffer`` (ends with an ``_End``), for a reader in another
        task (output windows checked while the model goes on, or a stream started early)."""
        try:
            await self._stream(buffer.put_nowait)
        except asyncio.CancelledError:
            buffer.put_nowait(_End(None))
            raise
        except BaseException as exc:
            buffer.put_nowait(_End(exc))
            raise
        buffer.put_nowait(_End(None))

    async def _stream(self, each: Callable[[str], object]) -> None:
        """Stream the main model, handing each delta to ``each``; records the call."""
        main = self._runner.main
        assert main is not None
        totals = StreamTotals()
        started = time.monotonic()
        shadow = self._runner.shadow
        kept: list[str] | None = None
        if shadow is not None and shadow.outputs:  # keep the answer for the shadow output rails
            kept = []
            each = _tee(each, kept.append)
        try:
            async for delta in main.stream(self._messages, totals, **self._params):
                each(delta)
        except asyncio.CancelledError:
            _record_cancelled(started)
            raise
        except BackendError as exc:
            if not totals.tool_calls:
                raise
            # The stream broke inside a tool call: nothing of it was sent, and it cannot be
            # judged whole, so the turn is blocked (never passed on, never an unchecked half).
            self._calls_cut = f"the main model's stream ended inside a tool call ({type(exc).__name__})"
            kept = None
        if kept is not None:
            self._answer = "".join(kept)
        self._calls = totals.tool_calls
        usage = totals.usage or Usage(model=getattr(main, "model_name", None))
        record_call(
            LLMCallInfo.from_usage("general", usage, duration=time.monotonic() - started, from_cache=False)
        )
        self.usage = totals.usage
        if self.blocked is None:
            self.finish_reason = totals.finish_reason or "stop"


async def run_group(
    rails: Sequence[Rail], variables: Mapping[str, Any], group: RailGroup, *, kind: str = MESSAGE
) -> list[RailResult]:
    """Run a group of rails on a turn's variables. Sequential: stop at the first block. Parallel:
    the cached verdicts at once, the others all at once, and the first block cancels the rest (a
    cancelled check stores nothing: see cache.singleflight). The group's ``timeout`` is one
    deadline for all its checks. ``kind``: what the texts are (``RailResult.kind``: the message, a
    tool result, a tool call).

    :func:`cached_results` then :func:`run_rest`, which a caller on the hot path calls itself: a
    group its hits decide then costs no coroutine."""
    results: list[RailResult] = []
    if cached_results(rails, variables, results, kind):
        return results
    return await run_rest(rails, variables, group, results, kind=kind)


def cached_results(
    rails: Sequence[Rail], variables: Mapping[str, Any], results: list[RailResult], kind: str = MESSAGE
) -> bool:
    """The cached verdicts of the group's rails, in order, appended to ``results`` without awaiting
    (``Rail.hit``); True when they decide the group (every rail answered, or one blocked), False at
    the first rail without one: :func:`run_rest` decides from there."""
    for rail in rails:
        result = rail.hit(variables, kind)
        if result is None:
            return False
        results.append(result)
        if not result.allowed:
            return True
    return True


async def run_rest(
    rails: Sequence[Rail],
    variables: Mapping[str, Any],
    group: RailGroup,
    results: list[RailResult],
    *,
    kind: str = MESSAGE,
) -> list[RailResult]:
    """:func:`run_group` for the rails after the ``results`` :func:`cached_results` found (the first
    of them had no cached verdict); returns the group's results."""
    deadline = time.monotonic() + group.timeout if group.timeout is not None else None
    rest = rails[len(results) :]
    if not group.parallel or len(rest) == 1 or all(rail.cached(variables) for rail in rest):
        # Sequential, or parallel with nothing to overlap (every verdict cached, for checks that
        # only say so: Check.hit is optional): three tasks and as_completed cost ~150-240 us of
        # CPU per turn (bench_checks part 2b) for nothing; in order, the first block still stops
        # the rest. An entry evicted between the look and the run makes that one check a miss.
        for n, rail in enumerate(rest):  # the first has no cached verdict (cached_results asked)
            found = rail.hit(variables, kind) if n else None
            result = found or await rail.run(variables, deadline, kind=kind)
            results.append(result)
            if not result.allowed:
                break
        return results
    tasks = [asyncio.create_task(rail.run(variables, deadline, kind=kind)) for rail in rest]
    try:
        for next_done in asyncio.as_completed(tasks):
            result = await next_done
            results.append(result)
            if not result.allowed:
                break
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    order = {rail.name: i for i, rail in enumerate(rails)}
    return sorted(results, key=lambda r: order.get(r.flow, 0))


def _blocker(results: Sequence[RailResult]) -> RailResult | None:
    """The first result that blocks (a plain loop: this runs on every turn)."""
    for result in results:
        if not result.allowed:
            return result
    return None


def _refuse_acting_early(config: RailsConfig, llm: Any) -> None:
    """``rails.input.during_main`` starts the main model before the input verdict: refused for a
    LangChain model with tools bound (in any binding around it), which may act on an unjudged input."""
    if config.rails.input.during_main and binds_tools(llm):
        raise ConfigError(
            f"{config.source or '<config>'}: rails.input.during_main: the main model has tools "
            "bound; a model that acts must not start before the input verdict"
        )


_NOT_RUN = TurnInfo()
"""The record of a turn that has not run (no calls, no rails): read-only, shared, so making a turn
builds no record it replaces at once."""


class _End:
    """The end of a buffered main-model stream, with the error that ended it, if any."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


async def _drain(buffer: asyncio.Queue[str | _End]) -> AsyncIterator[str]:
    while True:
        item = await buffer.get()
        if isinstance(item, _End):
            if item.error is not None:
                raise item.error
            return
        yield item


def _tee(each: Callable[[str], object], keep: Callable[[str], object]) -> Callable[[str], object]:
    """``each``, with every delta also handed to ``keep``."""

    def both(delta: str) -> None:
        keep(delta)
        each(delta)

    return both


def _record_cancelled(started: float) -> None:
    spent = LLMCallInfo.from_usage("general", NO_USAGE, duration=time.monotonic() - started, from_cache=False)
    record_call(spent._replace(cancelled=True))


__all__ = ["NO_USAGE", "GuardedTurn", "TurnRunner", "run_group"]
