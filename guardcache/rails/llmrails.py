"""LLMRails: input rails -> main LLM -> output rails, with cached checks.

Each call of :meth:`generate_async` is one request: its LLM call records live in a context variable,
so concurrent turns never see each other's records, and parallel rails (child tasks) record into the
turn that started them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from guardcache.cache import CacheInterface
from guardcache.config import RailsConfig
from guardcache.errors import ConfigError
from guardcache.library.check import TRANSPORT_PARAMS
from guardcache.library.verdict import RailResult
from guardcache.llm.pool import aclose_all
from guardcache.llm.stats import LLMCallInfo, record_call, request_scope
from guardcache.rails.builder import build_runtime
from guardcache.rails.main_llm import ClientLLM, LangChainLLM, MainLLM
from guardcache.rails.rail import Rail
from guardcache.rails.turn import REFUSAL, CheckResult, TurnInfo

Message = Mapping[str, str]
T = TypeVar("T")


def _last(messages: Sequence[Message], role: str) -> tuple[int, str] | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == role:
            return i, str(messages[i].get("content", ""))
    return None


class LLMRails:
    """Guardrails around a main model, configured by a :class:`RailsConfig`.

    ``llm`` may be any langchain-core chat model; without it the config's ``main`` model is called
    through guardcache's own OpenAI-compatible client. ``model_caches`` maps each model type with
    ``cache.enabled`` to its cache.
    """

    def __init__(self, config: RailsConfig, llm: Any | None = None) -> None:
        self.config = config
        self._runtime = build_runtime(config)
        self.model_caches: dict[str, CacheInterface] = self._runtime.caches
        self._main: MainLLM | None = None
        if llm is not None:
            self._main = LangChainLLM(llm)
        elif "main" in config.model_types:
            main = config.model("main")
            params = {k: v for k, v in main.parameters.items() if k not in TRANSPORT_PARAMS}
            self._main = ClientLLM(self._runtime.clients["main"], params)
        self._last: TurnInfo | None = None

    # -- the public API --------------------------------------------------------------------------

    async def generate_async(
        self, messages: Sequence[Message] | None = None, *, prompt: str | None = None
    ) -> dict[str, str]:
        """Run one guarded turn; returns ``{"role": "assistant", "content": ...}``.

        A turn blocked by any rail gets the refusal text; a rail that failed follows its ``on_error``.
        """
        msgs = self._messages(messages, prompt)
        found = _last(msgs, "user")
        if found is None:
            raise ValueError("generate_async needs at least one message with role 'user'")
        user_input = found[1]
        if self._main is None:
            raise ConfigError(
                f"{self.config.source or '<config>'}: no main model: add a model with type: main, "
                "pass llm= to LLMRails, or use check_async() to run only the rails"
            )
        with request_scope() as explain:
            turn = TurnInfo(explain)
            inputs = await self._run_group(
                self._runtime.input_rails, {"user_input": user_input}, self.config.rails.input.parallel
            )
            turn.checks = CheckResult(tuple(inputs))
            if not all(r.allowed for r in inputs):
                reply = REFUSAL
            else:
                bot = await self._call_main(msgs)
                outputs = await self._run_group(
                    self._runtime.output_rails,
                    {"user_input": user_input, "bot_response": bot},
                    self.config.rails.output.parallel,
                )
                turn.checks = CheckResult(tuple(inputs), tuple(outputs))
                reply = bot if all(r.allowed for r in outputs) else REFUSAL
        self._last = turn
        return {"role": "assistant", "content": reply}

    def generate(
        self, messages: Sequence[Message] | None = None, *, prompt: str | None = None
    ) -> dict[str, str]:
        """Blocking :meth:`generate_async`, for code without an event loop."""
        self._refuse_inside_loop("generate")
        return asyncio.run(self._closing(self.generate_async(messages, prompt=prompt)))

    async def check_async(self, messages: Sequence[Message]) -> CheckResult:
        """Run only the rails: input on the last user message, and output too when the last
        message is the assistant's. For apps that keep their own main LLM."""
        msgs = self._messages(messages, None)
        user = _last(msgs, "user")
        user_input = user[1] if user else ""
        with request_scope() as explain:
            turn = TurnInfo(explain)
            inputs: list[RailResult] = []
            if user is not None:
                inputs = await self._run_group(
                    self._runtime.input_rails, {"user_input": user_input}, self.config.rails.input.parallel
                )
            outputs: list[RailResult] = []
            if msgs and msgs[-1].get("role") == "assistant":
                bot = str(msgs[-1].get("content", ""))
                outputs = await self._run_group(
                    self._runtime.output_rails,
                    {"user_input": user_input, "bot_response": bot},
                    self.config.rails.output.parallel,
                )
            turn.checks = CheckResult(tuple(inputs), tuple(outputs))
        self._last = turn
        return turn.checks

    def check(self, messages: Sequence[Message]) -> CheckResult:
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
        sample = {"user_input": "Hello!", "bot_response": "Hello! How can I help you today?"}
        rails = [*self._runtime.input_rails, *self._runtime.output_rails]

        async def prime(rail: Rail) -> str | None:
            check = rail.check
            try:
                await check.client.complete(
                    check.messages({k: sample[k] for k in rail.spec.variables}), **check.params
                )
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

    @staticmethod
    def _messages(messages: Sequence[Message] | None, prompt: str | None) -> list[Message]:
        if prompt is not None:
            return [*(messages or ()), {"role": "user", "content": prompt}]
        if not messages:
            raise ValueError("pass messages=[{'role': 'user', 'content': ...}] or prompt=...")
        return list(messages)

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
        content, usage = await self._main.generate([dict(m) for m in messages])
        record_call(
            LLMCallInfo.from_usage("general", usage, duration=time.monotonic() - started, from_cache=False)
        )
        return content

    @staticmethod
    async def _run_group(
        rails: Sequence[Rail], variables: Mapping[str, str], parallel: bool
    ) -> list[RailResult]:
        """Sequential: stop at the first block. Parallel: all at once, and the first block cancels
        the rest (a cancelled check stores nothing: see cache.singleflight)."""
        if not rails:
            return []
        if not parallel or len(rails) == 1:
            results: list[RailResult] = []
            for rail in rails:
                result = await rail.run(variables)
                results.append(result)
                if not result.allowed:
                    break
            return results
        tasks = [asyncio.create_task(rail.run(variables)) for rail in rails]
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


__all__ = ["LLMRails"]
