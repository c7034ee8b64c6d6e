"""The rails as a LangChain Runnable: ``guardrails | llm``, as NeMo Guardrails' ``RunnableRails``.

    from guardcache import RailsConfig, RunnableRails

    guardrails = RunnableRails(RailsConfig.from_path("./config"))
    chain = prompt | (guardrails | llm)        # or RunnableRails(config, llm=llm), RunnableRails(rails) | llm
    chain.invoke({"question": "..."})

``guardrails | llm`` is one guarded turn per call, the turn :meth:`LLMRails.generate_async` runs
(a :class:`~guardcache.rails.runner.GuardedTurn`) with ``llm`` as the main model: the input rails
check the input; a block returns the refusal without calling ``llm``; otherwise ``llm`` answers and
the output rails check the answer. Every check goes through the same cached checks (one
:class:`~guardcache.rails.runner.TurnRunner`, so one set of caches, per ``RunnableRails``; those made
by ``|`` from one ``RunnableRails``, or given an ``LLMRails``, share its caches).

What goes in and what comes out (as NeMo's ``RunnableRails``):

=====================================================  ==========================================
input                                                  output (``invoke``; ``stream``: pieces of it)
=====================================================  ==========================================
``str``, ``StringPromptValue``                         ``str``
``ChatPromptValue``, a message, a list of messages     ``AIMessage`` (``AIMessageChunk`` pieces)
a list of ``{"role", "content"}`` dicts                ``{"role": "assistant", "content": ...}``
``{input_key: any of the above}``                      ``{output_key: the matching output}``
=====================================================  ==========================================

A dict without ``input_key`` falls back to ``"input"`` (as NeMo); other keys are passed to a wrapped
chain but not checked. The wrapped model is called with the messages the rails checked.

Wrapping a chain (``RunnableRails(config, runnable=chain)`` or ``guardrails | chain`` when the rails
have no main model): the chain gets the original input; the rails check the input's text and the
chain's text output (a ``str``, a message, or ``output[output_key]``). A turn blocked at input
returns ``{output_key: refusal}`` (as NeMo, since the chain's output type is unknown); a turn
blocked at output returns the refusal in the chain's output type.

Where guardcache differs from NeMo's ``RunnableRails``, it is to stay safe:

- **No unchecked text is handed on.** The output is rebuilt from the checked text: a message keeps
  its id and response/usage metadata, and the tool calls the rails judged (never content parts
  or fields the rails did not read).
  A wrapped chain's answer that is blocked at output is replaced whatever its type (NeMo returns a
  chain's message output as it is), and a blocked dict keeps none of its other keys (they may carry
  the same text).
- **The wrapped model's callbacks are its own.** It runs with ``callbacks=[]``, so the raw,
  unchecked answer never reaches the run's callbacks: ``astream_events`` (``on_chat_model_stream``)
  and LangGraph's ``messages`` stream mode, which an app may show to its user, see only this
  runnable's checked output (``on_chain_stream`` / ``on_chain_end``). Tracing keeps the rails' run.
- **Errors keep their type** (a ``BackendError`` of the main model, a ``TypeError`` for a message
  of the wrong type): NeMo rewraps every error as a ``ValueError``. Nothing is passed on unchecked
  on any error.
- **Tool calls are judged**: a model with tools bound (``llm.bind_tools([...])``) may answer with
  tool calls; each is judged by the output rails (function name and arguments, see
  ``guardcache.rails.tools``) before the reply carries it, and a ``ToolMessage`` in the input (a tool
  result) is judged by the input rails before the model reads it. NeMo passes tool calls on
  unchecked. A reply shaped as text (a ``str`` input) cannot carry tool calls: give messages.
  ``rails.input.during_main`` with a wrapped chain is refused (a chain may act; it must not start
  before the input verdict).
- ``a | b`` never changes ``a``: it returns a new ``RunnableRails`` (sharing ``a``'s caches). NeMo
  sets ``b`` as the llm of ``a`` and returns ``a``.
- ``stream``/``astream`` on a ``str`` input yield ``str`` pieces (NeMo yields ``AIMessageChunk``):
  the pieces add up to what ``invoke`` returns. Sync ``stream`` streams (NeMo collects the whole
  answer first). ``batch`` runs the inputs concurrently on one event loop, as ``abatch`` does, at most
  ``config["max_concurrency"]`` (default 32) at a time (NeMo: ``batch`` one by one, ``abatch``
  unbounded).

``passthrough=False`` (NeMo: let dialog rails rewrite the prompt) has no meaning without dialog rails
and is accepted with a warning; ``tools`` (NeMo's actions) is refused; ``verbose`` is ignored.
``input_blocked_message`` / ``output_blocked_message`` replace the refusal of a turn blocked at
input / output (default: the rails' refusal, as NeMo, which stores but does not use them).

Mind Python's ``|``: ``prompt | guardrails | llm`` is ``(prompt | guardrails) | llm``, a sequence in
which ``llm`` only reads the rails' output. Write ``prompt | (guardrails | llm)``; when the rails
have no main model of their own, the other form fails on its first call instead of running ``llm``
unguarded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.base import RunnableSequence, coerce_to_runnable
from langchain_core.runnables.config import get_config_list

from guardcache.config import RailsConfig
from guardcache.errors import ConfigError
from guardcache.rails.blocking import DONE, BlockingLoop, next_or_done
from guardcache.rails.langchain_shapes import read_input, replaced, shaped
from guardcache.rails.llmrails import LLMRails
from guardcache.rails.runner import GuardedTurn, TurnRunner
from guardcache.rails.streaming import GuardedStream
from guardcache.rails.wrapped_main import CALL, Call, WrappedMain, is_model

logger = logging.getLogger(__name__)

DEFAULT_MAX_CONCURRENCY = 32
"""Turns ``batch``/``abatch`` run at once when the config names no ``max_concurrency``."""


def _runner_of(config: RailsConfig | LLMRails | TurnRunner) -> TurnRunner:
    """The runner a ``RunnableRails`` runs on: a new one for a config, else the given rails' own
    (so their caches are shared; a runner: ``guardrails | llm`` deriving from these rails)."""
    if isinstance(config, RailsConfig):
        return TurnRunner(config)
    if isinstance(config, TurnRunner):
        return config
    if isinstance(config, LLMRails):
        return config.runner
    raise TypeError(f"RunnableRails takes a RailsConfig or an LLMRails, not {type(config).__name__}")


async def _one(value: Any) -> AsyncIterator[Any]:
    yield value


_warned_passthrough = False


# -- the Runnable ------------------------------------------------------------------------------------


class RunnableRails(Runnable[Any, Any]):
    """The rails of a config as a LangChain ``Runnable`` (see the module docstring).

    Args:
        config: a :class:`RailsConfig`, or an :class:`LLMRails` whose caches to share.
        llm: the main model (any LangChain chat model); ``RunnableRails(config) | llm`` sets it too.
            Without it (and without ``runnable``), the config's ``main`` model answers.
        runnable: a chain to wrap instead of a model; it gets the caller's original input.
        input_key / output_key: where a dict input holds the user's message, and where a dict
            output holds the answer.
        input_blocked_message / output_blocked_message: the reply of a turn blocked at input /
            output (default: the rails' refusal).
        passthrough, tools, verbose: NeMo's; see the module docstring.

    Attributes:
        rails: the :class:`LLMRails` these turns run on, as NeMo's (``rails.explain()``,
            ``rails.model_caches``; with ``llm``/``runnable`` set, rails of their own whose main
            model it is, sharing the caches).
    """

    def __init__(
        self,
        config: RailsConfig | LLMRails | TurnRunner,
        llm: Any | None = None,
        tools: Sequence[Any] | None = None,
        passthrough: bool = True,
        runnable: Runnable[Any, Any] | None = None,
        input_key: str = "input",
        output_key: str = "output",
        verbose: bool = False,
        input_blocked_message: str | None = None,
        output_blocked_message: str | None = None,
    ) -> None:
        global _warned_passthrough
        if tools:
            raise ValueError(
                "RunnableRails(tools=...): guardcache runs no actions (NeMo registers tools as actions); "
                "give the tools to your agent and wrap the agent: RunnableRails(config, runnable=agent)"
            )
        if not passthrough and not _warned_passthrough:
            _warned_passthrough = True
            logger.warning(
                "RunnableRails(passthrough=False): guardcache has no dialog rails to rewrite the prompt; "
                "the input is passed through as checked"
            )
        if llm is not None and runnable is not None:
            raise ValueError("RunnableRails: pass llm= or runnable=, not both")
        base = _runner_of(config)
        self._base = base
        self.llm = llm
        self.runnable = runnable
        self.passthrough = passthrough
        self.input_key = input_key
        self.output_key = output_key
        self.verbose = verbose
        self.input_blocked_message = input_blocked_message
        self.output_blocked_message = output_blocked_message
        runner = base
        where = base.config.source or "<config>"
        if llm is not None:
            if not is_model(llm):
                raise TypeError(
                    f"RunnableRails(llm=...) takes a LangChain language model, not {type(llm).__name__}; "
                    "wrap a chain with runnable=..."
                )
            runner = base.with_main(WrappedMain(llm, chain=False, output_key=output_key))
        elif runnable is not None:
            if base.config.rails.input.during_main:
                raise ConfigError(
                    f"{where}: rails.input.during_main: a wrapped chain may act; it must not start "
                    "before the input verdict (wrap a model instead, or turn during_main off)"
                )
            runner = base.with_main(WrappedMain(runnable, chain=True, output_key=output_key))
        self._runner = runner
        self.rails = config if isinstance(config, LLMRails) and runner is base else LLMRails.on_runner(runner)

    # -- composition -------------------------------------------------------------------------------

    def __or__(self, other: Any) -> Runnable[Any, Any]:  # type: ignore[override]
        """``guardrails | llm``: a new ``RunnableRails`` with ``llm`` as its main model (sharing
        these rails' caches). ``guardrails | chain`` wraps the chain when the rails have no main
        model; anything else (or rails that already have one) makes a plain sequence."""
        if self.llm is None and self.runnable is None:
            if is_model(other):
                return self._derive(llm=other)
            if self._runner.main is None:
                return self._derive(runnable=coerce_to_runnable(other))
        return RunnableSequence(self, coerce_to_runnable(other))

    def _derive(self, **wrapped: Any) -> RunnableRails:
        return RunnableRails(
            self._base,
            passthrough=self.passthrough,
            input_key=self.input_key,
            output_key=self.output_key,
            verbose=self.verbose,
            input_blocked_message=self.input_blocked_message,
            output_blocked_message=self.output_blocked_message,
            **wrapped,
        )

    @property
    def InputType(self) -> Any:
        return Any

    @property
    def OutputType(self) -> Any:
        return Any

    # -- one turn ------------------------------------------------------------------------------------

    def _require_main(self) -> None:
        if self._runner.main is None:
            raise ConfigError(
                f"{self._runner.config.source or '<config>'}: RunnableRails has no main model: compose "
                "guardrails | llm (in a longer chain, prompt | (guardrails | llm): Python reads "
                "prompt | guardrails | llm as (prompt | guardrails) | llm), pass llm= or runnable=, or "
                "add a model with type: main to the config"
            )

    def _refusal(self, blocked: str | None) -> str | None:
        if blocked == "input":
            return self.input_blocked_message
        if blocked == "output":
            return self.output_blocked_message
        return None

    async def _turn(self, value: Any) -> Any:
        messages, shape = read_input(value, self.input_key)
        self._require_main()
        rails = self._runner
        call = Call(value)
        token = CALL.set(call)
        try:
            turn = GuardedTurn(rails, messages)
            reply = await turn.complete()
        finally:
            CALL.reset(token)
        blocked = turn.blocked
        text = self._refusal(blocked) or reply
        if self.runnable is not None:  # a wrapped chain
            if call.output is None:  # blocked at input: the chain never ran
                return {self.output_key: text}
            if blocked is not None:  # nothing of a blocked answer is handed on, its other keys included
                if isinstance(call.output, BaseMessage):
                    return AIMessage(content=text)
                return {self.output_key: text} if isinstance(call.output, Mapping) else text
            return replaced(call.output, text, self.output_key)
        like = call.output if blocked is None else None
        return shaped(text, shape, self.output_key, like=like, calls=turn.tool_calls)

    async def _stream_turn(self, inputs: AsyncIterator[Any]) -> AsyncIterator[Any]:
        value = [item async for item in inputs][-1]  # astream hands over its one input
        messages, shape = read_input(value, self.input_key)
        self._require_main()
        stream = GuardedStream(self._runner, messages, stream_main=None)
        async with stream:  # closes the turn (and the main call) if the caller stops early
            token = CALL.set(Call(value))
            try:
                piece = await next_or_done(stream)  # starts the turn's task, which copies this context
            finally:
                CALL.reset(token)
            while piece is not DONE:
                assert isinstance(piece, str)
                text = self._refusal(stream.blocked) or piece  # the refusal is a blocked stream's last piece
                yield shaped(text, shape, self.output_key, chunk=True)
                piece = await next_or_done(stream)
            if stream.tool_calls:  # judged whole at the end: one last piece carries them
                yield shaped("", shape, self.output_key, chunk=True, calls=stream.tool_calls)

    # -- the Runnable interface ------------------------------------------------------------------------

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """One guarded turn (blocking). In async code, prefer :meth:`ainvoke`."""
        return self._call_with_config(self._invoke_blocking, input, config)

    def _invoke_blocking(self, value: Any) -> Any:
        with BlockingLoop(self._runner) as runner:
            return runner.run(self._turn(value))

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """One guarded turn."""
        return await self._acall_with_config(self._turn, input, config)

    def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        """One guarded turn, its reply in pieces, as :meth:`LLMRails.stream_async`: nothing before
        the input verdict; the answer checked whole (one piece after its check) or, with
        ``rails.output.streaming``, window by window; a block ends the stream with the refusal.

        Closing the iterator early (``aclose()``) cancels the turn and the main call."""
        # LangChain's own generator, not one around it: its aclose() reaches the turn at once.
        return self._atransform_stream_with_config(_one(input), self._stream_turn, config)

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[Any]:
        """:meth:`astream`, blocking: each piece is yielded as it comes."""
        runner = BlockingLoop(self._runner)
        pieces = self.astream(input, config)
        try:
            while (piece := runner.run(next_or_done(pieces))) is not DONE:
                yield piece
        finally:
            try:
                runner.run(pieces.aclose())  # type: ignore[attr-defined]
            finally:
                runner.close()

    async def abatch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """One guarded turn per input, concurrently (at most ``max_concurrency`` of the config, by
        default 32, at a time); the outputs in the order of the inputs. An error is raised (the
        other turns are cancelled) unless ``return_exceptions``, which puts it in its place."""
        if not inputs:
            return []
        configs = get_config_list(config, len(inputs))
        limit = configs[0].get("max_concurrency") or DEFAULT_MAX_CONCURRENCY
        results: list[Any] = [None] * len(inputs)
        order = iter(range(len(inputs)))

        async def worker() -> None:
            for i in order:  # shared: each input is taken by one worker
                try:
                    results[i] = await self.ainvoke(inputs[i], configs[i])
                except Exception as exc:
                    if not return_exceptions:
                        raise
                    results[i] = exc

        workers = [asyncio.ensure_future(worker()) for _ in range(min(limit, len(inputs)))]
        try:
            await asyncio.gather(*workers)
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        return results

    def batch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """:meth:`abatch`, blocking (one event loop for the whole batch)."""
        if not inputs:
            return []
        with BlockingLoop(self._runner) as runner:
            return runner.run(self.abatch(inputs, config, return_exceptions=return_exceptions))


__all__ = ["DEFAULT_MAX_CONCURRENCY", "RunnableRails"]
