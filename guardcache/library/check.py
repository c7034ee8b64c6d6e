"""A cached LLM check: render the task prompt, key it, ask the cache, call the model on a miss.

This is the only place that joins prompts, the cache and the LLM client (DESIGN.md): the cache knows
nothing of LLMs and the client nothing of caching. One :class:`LLMCheck` exists per (flow, model); it is
built once at start-up, so the per-request path does no config work.

Why the pieces are where they are:
- The key is ``namespace.key(variables)``. The namespace digests the model type and name, the
  template fingerprint and the generation parameters, so a changed template or temperature can never
  serve an old verdict; normalization makes whitespace-only variants of one message share a verdict.
  A hit renders nothing: the prompt is built only for a backend call.
- The backend sees exactly the rendered template: static prefix first and byte-identical, user text
  last, one user message, fixed parameters. Nothing variable goes before the user text, so a server
  with KV-cache reuse (NIM, vLLM, TensorRT-LLM, llama.cpp) reuses the prefix on every request.
- A failed call (transport, status, timeout, unparseable output, cancellation) raises through
  ``get_or_compute`` and is never stored; the rail's ``on_error`` decides (see rails).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from guardcache.cache import CacheInterface, Namespace
from guardcache.library.verdict import CachedCheck, Verdict
from guardcache.llm.client import ChatClient
from guardcache.llm.stats import LLMCallInfo, record_call
from guardcache.prompts import TaskPrompt, fingerprint, render_messages

#: Parameters NemoGuard-style classifiers are served with (shared/reference/nemoguard-protocol.md).
CLASSIFIER_PARAMS: Mapping[str, Any] = {"temperature": 1e-20}
#: Model parameters that configure the transport, not the generation (so not part of the namespace).
TRANSPORT_PARAMS = frozenset({"base_url", "openai_api_base", "timeout", "max_retries"})


class CheckOutcome(NamedTuple):
    """One check's verdict and how it was obtained (made on every check: a cheap immutable record)."""

    verdict: Verdict
    from_cache: bool
    duration: float  # seconds the caller waited: backend call, or cache lookup (incl. joining a flight)


class LLMCheck:
    """One task prompt on one model, with its cache. Safe to share across requests and tasks."""

    def __init__(
        self,
        *,
        prompt: TaskPrompt,
        parser: Callable[[str], Verdict],
        client: ChatClient,
        cache: CacheInterface | None,
        model_type: str,
        model_name: str,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        generation = {k: v for k, v in (params or {}).items() if k not in TRANSPORT_PARAMS}
        self.params: dict[str, Any] = {**CLASSIFIER_PARAMS, **generation}
        if prompt.max_tokens is not None:
            self.params["max_tokens"] = prompt.max_tokens
        if prompt.stop:
            self.params["stop"] = list(prompt.stop)
        self.prompt = prompt
        self.task = prompt.task
        self.parser = parser
        self.client = client
        self.cache = cache
        self.namespace = Namespace.of(model_type, model_name, fingerprint(prompt), self.params)

    def messages(self, variables: Mapping[str, str]) -> list[dict[str, str]]:
        """The exact request messages for these variables."""
        return render_messages(self.prompt, variables)

    async def _call(self, messages: list[dict[str, str]]) -> CachedCheck:
        result = await self.client.complete(messages, **self.params)
        verdict = self.parser(result.content)  # ParseError propagates: never cached
        return CachedCheck(verdict, result.usage)

    def key(self, variables: Mapping[str, str]) -> bytes:
        """The cache key: the namespace (which fixes the template) and the normalized variables.

        Keying on the variables rather than the rendered prompt is exact (the template is part of
        the namespace), cheaper (no rendering on a hit), and stricter: a user text that mimics the
        template's own separators cannot collide with a different (user, bot) pair.
        """
        if len(variables) == 1:
            return self.namespace.key(next(iter(variables.values())))
        return self.namespace.key_fields([variables[name] for name in sorted(variables)])

    async def run(self, variables: Mapping[str, str]) -> CheckOutcome:
        """Decide; records the call (or its cached stand-in) in the current request's stats."""
        computed = False

        async def compute() -> CachedCheck:
            nonlocal computed
            computed = True
            return await self._call(self.messages(variables))

        started = time.monotonic()
        if self.cache is None:
            value = await compute()
        else:
            value = await self.cache.get_or_compute(self.key(variables), compute)
        duration = time.monotonic() - started
        record_call(
            LLMCallInfo.from_usage(self.task, value.usage, duration=duration, from_cache=not computed)
        )
        return CheckOutcome(value.verdict, not computed, duration)


__all__ = ["CLASSIFIER_PARAMS", "CheckOutcome", "LLMCheck"]
