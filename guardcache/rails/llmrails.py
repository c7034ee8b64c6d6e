"""LLMRails: NeMo Guardrails' face of the rails (input rails -> main LLM -> output rails, cached).

It reads what a NeMo user passes (a prompt or messages in any role spelling) and hands the turn to
the config's :class:`~guardcache.rails.runner.TurnRunner`, which runs every turn the same way
whoever asks (``generate_async``, ``stream_async``, ``RunnableRails``, ``guardcache serve``). Each
turn's LLM call records live in its own request scope, so concurrent turns never see each other's
records, and parallel rails (child tasks) record into the turn that started them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar, overload

from guardcache.cache import CacheInterface
from guardcache.config import RailsConfig
from guardcache.rails.messages import Message, read_messages
from guardcache.rails.rail import Rail
from guardcache.rails.runner import GuardedTurn, TurnRunner, run_group
from guardcache.rails.shadow import Rng
from guardcache.rails.streaming import GuardedStream
from guardcache.rails.turn import CheckResult, TurnInfo

T = TypeVar("T")


class LLMRails:
    """Guardrails around a main model, configured by a :class:`RailsConfig`.

    ``llm`` may be any langchain-core chat model; without it the config's ``main`` model is called
    through guardcache's own OpenAI-compatible client. ``model_caches`` maps each guard model type
    to its verdict cache: every model but ``main`` unless its ``cache: {enabled: false}``, and
    ``jailbreak_detection`` for the JailbreakDetect NIM (one INFO line at start lists them).
    ``runner`` is the :class:`TurnRunner` that runs these rails' turns (``guardcache serve`` runs
    its turns on it directly, with messages it has read already). ``shadow_rng`` is the random
    source that samples turns for the shadow rails (``rails.input.shadow_flows``...): a seeded
    ``random.Random`` makes which turns are judged reproducible.
    """

    def __init__(self, config: RailsConfig, llm: Any | None = None, *, shadow_rng: Rng | None = None) -> None:
        self._adopt(TurnRunner(config, llm, shadow_rng=shadow_rng))

    @classmethod
    def on_runner(cls, runner: TurnRunner) -> LLMRails:
        """Rails around an existing runner (its caches, clients and main model shared): what
        ``RunnableRails`` hands out as its ``rails`` when ``guardrails | llm`` made a runner of its
        own with ``llm`` as the main model."""
        rails = cls.__new__(cls)
        rails._adopt(runner)
        return rails

    def _adopt(self, runner: TurnRunner) -> None:
        config = runner.config
        self.config = config
        self.runner = runner
        self._runtime = self.runner.runtime  # the built clients, caches and rails
        self.model_caches: dict[str, CacheInterface] = self.runner.model_caches
        # Images a user message may carry: None (refused) unless a vision rail judges them.
        self.image_limits = config.image_limits()

    # -- the public API --------------------------------------------------------------------------

    @overload
    async def generate_async(self, prompt: str, messages: None = None, **params: Any) -> str: ...
    @overload
    async def generate_async(
        self, prompt: None = None, *, messages: Sequence[Any], **params: Any
    ) -> dict[str, Any]: ...
    @overload
    async def generate_async(self, prompt: Sequence[Any], **params: Any) -> dict[str, Any]: ...

    async def generate_async(
        self, prompt: str | Sequence[Any] | None = None, messages: Sequence[Any] | None = None, **params: Any
    ) -> str | dict[str, Any]:
        """Run one guarded turn.

        As NeMo Guardrails: ``generate_async(prompt="...")`` (or a string first argument) returns
        the reply text; ``generate_async(messages=[...])`` returns ``{"role": "assistant",
        "content": ...}`` (a list as first argument, guardcache's earlier form, too), with
        ``"tool_calls"`` (OpenAI's shape) when the main model called tools and the rails let the
        calls through, as NeMo's. A turn blocked by any rail gets the refusal text; a rail that
        failed follows its ``on_error``.

        ``params`` (``temperature``, ``max_tokens``, ``tools``, ``tool_choice``,
        ``parallel_tool_calls``...) go to the main model for this turn, as ``stream_async``'s.
        Tool results in ``messages`` (``role: "tool"``) are judged by the input rails, and the
        main model's tool calls by the output rails (``guardcache.rails.tools``).
        """
        msgs, as_text = self._turn_input(prompt, messages)
        turn = GuardedTurn(self.runner, msgs, params)
        reply = await turn.complete()
        if as_text:
            return reply
        if turn.tool_calls:
            return {"role": "assistant", "content": reply, "tool_calls": [dict(c) for c in turn.tool_calls]}
        return {"role": "assistant", "content": reply}

    @overload
    def generate(self, prompt: str, messages: None = None, **params: Any) -> str: ...
    @overload
    def generate(self, prompt: None = None, *, messages: Sequence[Any], **params: Any) -> dict[str, Any]: ...
    @overload
    def generate(self, prompt: Sequence[Any], **params: Any) -> dict[str, Any]: ...

    def generate(
        self, prompt: str | Sequence[Any] | None = None, messages: Sequence[Any] | None = None, **params: Any
    ) -> str | dict[str, Any]:
        """Blocking :meth:`generate_async`, for code without an event loop."""
        self._refuse_inside_loop("generate")
        turn = self.generate_async(prompt, messages, **params)  # type: ignore[arg-type]
        return asyncio.run(self._closing(turn))

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
        (see :mod:`guardcache.rails.runner` for what the user sees when a rail blocks).

        ``params`` (``temperature``, ``max_tokens``...) override the main model's for this turn.
        The returned :class:`GuardedStream` says, once iterated, whether and where the turn was
        blocked (``blocked``, ``rail``) and holds its record (``turn``, as ``explain()``) and the
        main model's tool calls the rails let through (``tool_calls``: assembled from the stream
        and judged whole, never yielded piece by piece).
        ``stream_main=False`` calls the main model without streaming (one piece); ``None`` streams
        it only when a piece can reach the user before the answer ends (no output rails, or output
        windows): an answer the output rails check whole is sent in one piece after its check either
        way, and a plain call spares reading it event by event (what ``guardcache serve`` does).
        """
        msgs, _ = self._turn_input(prompt, messages)
        return GuardedStream(self.runner, msgs, params, stream_main=stream_main)

    async def check_async(self, messages: Sequence[Any]) -> CheckResult:
        """Run only the rails, for apps that keep their own main LLM: the input rails on the last
        user message, and the output rails too when the last message is the assistant's.

        Raises ``ValueError`` when there is nothing to check (no user message and no final
        assistant message): an empty result would read as "allowed" with no rail run.
        """
        return await self.runner.check(read_messages(messages, images=self.image_limits))

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
        runtime = self._runtime
        rails = [
            *runtime.input_rails,
            *runtime.output_rails,
            *runtime.tool_input_rails,
            *runtime.tool_output_rails,
        ]

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
        return self.runner.explain()

    async def aclose(self) -> None:
        """Flush and close what this loop opened: shared-tier stats and connections, HTTP pools,
        after this loop's shadow samples end (waited for up to ``rails.shadow.close_timeout``, then
        cancelled: closing never hangs on a shadow guard)."""
        await self.runner.aclose(flush=True)

    # -- internals -------------------------------------------------------------------------------

    # The group runner, where tests and benchmarks of rail groups reach it.
    _run_group = staticmethod(run_group)

    async def _closing(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a sync-API call's coroutine, then close the connections of its short-lived loop
        (otherwise only the garbage collector frees them, with ResourceWarnings)."""
        try:
            return await coro
        finally:
            await self.runner.aclose(flush=False)

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


__all__ = ["LLMRails"]
