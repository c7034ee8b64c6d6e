"""LLMRails: input rails -> main LLM -> output rails, with cached checks.

Each call of :meth:`generate_async` is one request: its LLM call records live in a context variable,
so concurrent turns never see each other's records, and parallel rails (child tasks) record into the
turn that started them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar, overload

from guardcache import language
from guardcache.cache import CacheInterface
from guardcache.checks.verdict import RailResult
from guardcache.config import RailGroup, RailsConfig
from guardcache.config.models import check_model_keys
from guardcache.errors import ConfigError
from guardcache.llm.pool import aclose_all
from guardcache.llm.records import LLMCallInfo, record_call, request_scope
from guardcache.llm.transport import split_parameters
from guardcache.llm.types import Usage
from guardcache.rails.builder import build_runtime
from guardcache.rails.caches import log_caches
from guardcache.rails.main_llm import ClientLLM, LangChainLLM, MainLLM
from guardcache.rails.messages import Message, history, last_index, message_text, read_messages
from guardcache.rails.rail import Rail
from guardcache.rails.speculation import abandon, run_with_early_start
from guardcache.rails.streaming import GuardedStream
from guardcache.rails.turn import REFUSAL, CheckResult, TurnInfo

T = TypeVar("T")
log = logging.getLogger("guardcache.rails")
NO_USAGE = Usage(0, 0, 0, 0)


def _cached(rail: Rail, variables: Mapping[str, Any]) -> bool:
    """Whether the rail's verdict for this turn is in its cache now (never counted as a lookup)."""
    try:
        return rail.check.cached(variables)
    except Exception:  # a text the check cannot read: let the rail's own run decide
        return False


def _binds_tools(llm: Any) -> bool:
    """Whether a LangChain model was given tools (``bind_tools`` returns a binding with them)."""
    kwargs = getattr(llm, "kwargs", None)
    return isinstance(kwargs, Mapping) and bool(kwargs.get("tools") or kwargs.get("functions"))


class LLMRails:
    """Guardrails around a main model, configured by a :class:`RailsConfig`.

    ``llm`` may be any langchain-core chat model; without it the config's ``main`` model is called
    through guardcache's own OpenAI-compatible client. ``model_caches`` maps each guard model type
    to its verdict cache: every model but ``main`` unless its ``cache: {enabled: false}``, and
    ``jailbreak_detection`` for the JailbreakDetect NIM (one INFO line at start lists them).
    """

    def __init__(self, config: RailsConfig, llm: Any | None = None) -> None:
        self.config = config
        # An api_key_env_var naming an unset or empty variable stops here, not as a 401 on a turn.
        check_model_keys(config.models, config.source, skip=("main",) if llm is not None else ())
        for model in config.models:
            note = model.unsent_key_note()
            if note is not None:
                log.warning("%s: model %r: %s", config.source or "<config>", model.type, note)
        self._runtime = build_runtime(config)
        self.model_caches: dict[str, CacheInterface] = self._runtime.caches
        log_caches(config, self.model_caches)
        # Images a user message may carry: None (refused) unless a vision rail judges them.
        self.image_limits = config.image_limits()
        self._main: MainLLM | None = None
        if llm is not None:
            if config.rails.input.during_main and _binds_tools(llm):
                raise ConfigError(
                    f"{config.source or '<config>'}: rails.input.during_main: the main model has tools "
                    "bound; a model that acts must not start before the input verdict"
                )
            self._main = LangChainLLM(llm)
        elif "main" in config.model_types:
            main = config.model("main")
            _, params = split_parameters(main.parameters)
            self._main = ClientLLM(self._runtime.clients["main"], params)
        self._last: TurnInfo | None = None
        self._multilingual = config.rails.config.content_safety.multilingual
        if self._multilingual.enabled:
            try:
                language.require_detector()  # a missing extra fails now, not on the first block
            except ImportError as exc:
                raise ConfigError(
                    f"{config.source or '<config>'}: rails.config.content_safety.multilingual.enabled "
                    f"needs language detection: {exc}"
                ) from exc

    # -- the public API --------------------------------------------------------------------------

    @overload
    async def generate_async(self, prompt: str, messages: None = None) -> str: ...
    @overload
    async def generate_async(self, prompt: None = None, *, messages: Sequence[Any]) -> dict[str, str]: ...
    @overload
    async def generate_async(self, prompt: Sequence[Any]) -> dict[str, str]: ...

    async def generate_async(
        self, prompt: str | Sequence[Any] | None = None, messages: Sequence[Any] | None = None
    ) -> str | dict[str, str]:
        """Run one guarded turn.

        As NeMo Guardrails: ``generate_async(prompt="...")`` (or a string first argument) returns
        the reply text; ``generate_async(messages=[...])`` returns ``{"role": "assistant",
        "content": ...}`` (a list as first argument, guardcache's earlier form, too). A turn blocked
        by any rail gets the refusal text; a rail that failed follows its ``on_error``.
        """
        msgs, as_text = self._turn_input(prompt, messages)
        user_at = last_index(msgs, "user")
        if user_at is None:
            raise ValueError("generate_async needs a user message (role 'user' or 'human') to answer")
        if self._main is None:
            raise ConfigError(
                f"{self.config.source or '<config>'}: no main model: add a model with type: main, "
                "pass llm= to LLMRails, or use check_async() to run only the rails"
            )
        variables: dict[str, Any] = {
            "user_input": msgs[user_at]["content"],
            "history": history(msgs, user_at),
        }
        with request_scope() as explain:
            turn = TurnInfo(explain)
            run_inputs = functools.partial(
                self._run_group, self._runtime.input_rails, variables, self.config.rails.input
            )
            early: asyncio.Task[str] | None = None
            if self.config.rails.input.during_main and self._runtime.input_rails:
                inputs, early = await run_with_early_start(run_inputs, lambda: self._call_main(msgs))
            else:
                inputs = await run_inputs()
            turn.checks = CheckResult(tuple(inputs))
            if not all(r.allowed for r in inputs):
                if early is not None:
                    await abandon(early)
                reply = self._refusal(variables["user_input"])
            else:
                bot = await early if early is not None else await self._call_main(msgs)
                variables["bot_response"] = bot
                outputs = await self._run_group(
                    self._runtime.output_rails, variables, self.config.rails.output
                )
                turn.checks = CheckResult(tuple(inputs), tuple(outputs))
                reply = bot if all(r.allowed for r in outputs) else self._refusal(variables["user_input"])
        self._last = turn
        return reply if as_text else {"role": "assistant", "content": reply}

    @overload
    def generate(self, prompt: str, messages: None = None) -> str: ...
    @overload
    def generate(self, prompt: None = None, *, messages: Sequence[Any]) -> dict[str, str]: ...
    @overload
    def generate(self, prompt: Sequence[Any]) -> dict[str, str]: ...

    def generate(
        self, prompt: str | Sequence[Any] | None = None, messages: Sequence[Any] | None = None
    ) -> str | dict[str, str]:
        """Blocking :meth:`generate_async`, for code without an event loop."""
        self._refuse_inside_loop("generate")
        turn = self.generate_async(prompt, messages)  # type: ignore[arg-type]
        return asyncio.run(self._closing(turn))

    async def check_async(self, messages: Sequence[Any]) -> CheckResult:
        """Run only the rails, for apps that keep their own main LLM: the input rails on the last
        user message, and the output rails too when the last message is the assistant's.

        Raises ``ValueError`` when there is nothing to check (no user message and no final
        assistant message): an empty result would read as "allowed" with no rail run.
        """
        msgs = read_messages(messages, images=self.image_limits)
        user_at = last_index(msgs, "user")
        bot_last = bool(msgs) and msgs[-1]["role"] == "assistant"
        if user_at is None and not bot_last:
            raise ValueError(
                "check_async: nothing to check: pass a user message (role 'user' or 'human') and/or "
                "end with the assistant's message (role 'assistant' or 'ai')"
            )
        variables: dict[str, Any] = {
            "user_input": msgs[user_at]["content"] if user_at is not None else "",
            "history": history(msgs, user_at if user_at is not None else 0),
        }
        with request_scope() as explain:
            turn = TurnInfo(explain)
            inputs: list[RailResult] = []
            if user_at is not None:
                inputs = await self._run_group(self._runtime.input_rails, variables, self.config.rails.input)
            outputs: list[RailResult] = []
            if bot_last:
                variables["bot_response"] = msgs[-1]["content"]
                outputs = await self._run_group(
                    self._runtime.output_rails, variables, self.config.rails.output
                )
            turn.checks = CheckResult(tuple(inputs), tuple(outputs))
        self._last = turn
        return turn.checks

    def check(self, messages: Sequence[Any]) -> CheckResult:
        """Blocking :meth:`check_async`."""
        self._refuse_inside_loop("check")
        return asyncio.run(self._closing(self.check_async(messages)))

    async def warm_up_async(self) -> dict[str, str | None]:
        """Prime every guard backend once, before real traffic: returns flow -> error (None if ok).

        One request per rail renders its template around a neutral text, so each server computes the
        static prompt prefix into its KV cache and the connection pool opens, and the first users are
        not cold. It matters most on servers that make a block reusable only after the request that
        computed it finished (older TensorRT-LLM): without priming, a cold burst recomputes the prefix
        in every request. The cache and its stats are not touched.
        """
        rails = [*self._runtime.input_rails, *self._runtime.output_rails]

        async def prime(rail: Rail) -> str | None:
            try:
                await rail.check.prime()
            except Exception as exc:  # priming is best effort: report, never raise
                return f"{type(exc).__name__}: {exc}"
            return None

        results = await asyncio.gather(*(prime(r) for r in rails))
        return {rail.name: err for rail, err in zip(rails, results, strict=True)}

    def explain(self) -> TurnInfo:
        """The last turn this instance finished: its LLM calls (``from_cache`` marks hits) and rails."""
        if self._last is None:
            raise RuntimeError("explain(): no turn has run yet")
        return self._last

    async def aclose(self) -> None:
        """Flush and close what this loop opened: shared-tier stats and connections, HTTP pools."""
        await self._close_loop_resources(flush=True)

    # -- internals -------------------------------------------------------------------------------

    async def _close_loop_resources(self, *, flush: bool) -> None:
        for cache in self.model_caches.values():
            close = getattr(cache, "aclose", None)  # the Redis tier: its connections are per loop
            if close is not None:
                await close(flush=flush)
        await aclose_all()

    async def _closing(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a sync-API call's coroutine, then close the connections of its short-lived loop
        (otherwise only the garbage collector frees them, with ResourceWarnings)."""
        try:
            return await coro
        finally:
            await self._close_loop_resources(flush=False)

    def _refusal(self, user_input: Any) -> str:
        """The refusal text: in the user's language when multilingual is on (detected only for
        blocked turns, so allowed turns never pay for it)."""
        if not self._multilingual.enabled:
            return REFUSAL
        return language.refusal_message(
            language.detect_language(message_text(user_input)), self._multilingual.refusal_messages
        )

    def _turn_input(self, prompt: Any, messages: Any) -> tuple[list[Message], bool]:
        """The turn's messages, and whether the caller gave a prompt (and so gets text back)."""
        if prompt is not None and messages is not None:
            raise ValueError("pass either prompt or messages, not both (as NeMo Guardrails)")
        if isinstance(prompt, str):
            return [{"role": "user", "content": prompt}], True
        if prompt is not None:
            if isinstance(prompt, bytes | bytearray | Mapping):
                raise TypeError(f"prompt must be a str, not {type(prompt).__name__}")
            messages = prompt  # a list first: guardcache's earlier generate_async(messages) form
        if messages is None:
            raise ValueError("pass prompt='...' or messages=[{'role': 'user', 'content': ...}]")
        msgs = read_messages(messages, images=self.image_limits)
        if not msgs:
            raise ValueError("messages is empty: pass at least one user message")
        return msgs, False

    @staticmethod
    def _refuse_inside_loop(name: str) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        raise RuntimeError(f"{name}() cannot run inside an event loop; use 'await {name}_async(...)'")

    async def _call_main(self, messages: Sequence[Message]) -> str:
        assert self._main is not None
        started = time.monotonic()
        try:
            content, usage = await self._main.generate([dict(m) for m in messages])
        except asyncio.CancelledError:  # started early, then the input rails blocked the turn
            spent = LLMCallInfo.from_usage(
                "general", NO_USAGE, duration=time.monotonic() - started, from_cache=False
            )
            record_call(spent._replace(cancelled=True))
            raise
        record_call(
            LLMCallInfo.from_usage("general", usage, duration=time.monotonic() - started, from_cache=False)
        )
        return content

    @staticmethod
    async def _run_group(
        rails: Sequence[Rail], variables: Mapping[str, Any], group: RailGroup
    ) -> list[RailResult]:
        """Sequential: stop at the first block. Parallel: all at once, and the first block cancels
        the rest (a cancelled check stores nothing: see cache.singleflight). The group's
        ``timeout`` is one deadline for all its checks."""
        parallel = group.parallel
        deadline = time.monotonic() + group.timeout if group.timeout is not None else None
        if not rails:
            return []
        if not parallel or len(rails) == 1 or all(_cached(rail, variables) for rail in rails):
            # Sequential, or parallel with every verdict already cached: with no backend call to
            # overlap, three tasks and as_completed cost ~150-240 us of CPU per turn (bench_checks
            # part 2b) for nothing; in order, the first block still stops the rest. An entry
            # evicted between the look and the run makes that one check a miss run in order.
            results: list[RailResult] = []
            for rail in rails:
                result = await rail.run(variables, deadline)
                results.append(result)
                if not result.allowed:
                    break
            return results
        tasks = [asyncio.create_task(rail.run(variables, deadline)) for rail in rails]
        done_results: list[RailResult] = []
        try:
            for next_done in asyncio.as_completed(tasks):
                result = await next_done
                done_results.append(result)
                if not result.allowed:
                    break
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        order = {rail.name: i for i, rail in enumerate(rails)}
        return sorted(done_results, key=lambda r: order.get(r.flow, 0))

    # -- streaming (guardcache.rails.streaming) ---------------------------------------------------

    def stream_async(
        self,
        prompt: str | Sequence[Any] | None = None,
        messages: Sequence[Any] | None = None,
        *,
        stream_main: bool | None = True,
        **params: Any,
    ) -> GuardedStream:
        """One guarded turn with its reply streamed, as NeMo's ``stream_async``: ``async for chunk
        in rails.stream_async(messages=[...])``. Nothing is sent before the input verdict; output
        rails check the whole answer, or windows of it with ``rails.output.streaming.enabled``
        (see :mod:`guardcache.rails.streaming` for what the user sees when a rail blocks).

        ``params`` (``temperature``, ``max_tokens``...) override the main model's for this turn.
        The returned :class:`GuardedStream` says, once iterated, whether and where the turn was
        blocked (``blocked``, ``rail``) and holds its record (``turn``, as ``explain()``).
        ``stream_main=False`` calls the main model without streaming (one piece); ``None`` streams
        it only when a piece can reach the user before the answer ends (no output rails, or output
        windows): an answer the output rails check whole is sent in one piece after its check either
        way, and a plain call spares reading it event by event (what ``guardcache serve`` does).
        """
        msgs, _ = self._turn_input(prompt, messages)
        if last_index(msgs, "user") is None:
            raise ValueError("stream_async needs a user message (role 'user' or 'human') to answer")
        if self._main is None:
            raise ConfigError(
                f"{self.config.source or '<config>'}: no main model: add a model with type: main, "
                "pass llm= to LLMRails, or use check_async() to run only the rails"
            )
        if stream_main is None:
            stream_main = not self._runtime.output_rails or self.config.rails.output.streaming.enabled
        return GuardedStream(self, msgs, params, stream_main=stream_main)

    def as_runnable(self, **kwargs: Any) -> Any:
        """These rails as a LangChain Runnable sharing their caches: ``rails.as_runnable() | llm``.

        Returns a :class:`guardcache.rails.runnable.RunnableRails` (``kwargs``: its ``llm``,
        ``runnable``, ``input_key``, ``output_key``...).
        """
        from guardcache.rails.runnable import RunnableRails  # LangChain's runnables: a heavy import

        return RunnableRails(self, **kwargs)


__all__ = ["LLMRails"]
