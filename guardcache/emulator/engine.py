"""The emulated inference server: one request's life from arrival to its last token.

``Emulator`` owns everything stateful of one instance (prefix cache, admission gate, fault RNG,
counters, the down switch) and knows nothing of HTTP; ``app.py`` maps it onto routes. A request:

1. ``prepare``: render the chat template to tokens, count the prompt, refuse it if it does not fit
   the context window (``ContextLengthExceeded``), decide the completion;
2. ``admit``: optional hang, frontend overhead, a FIFO running slot, prefix-cache lookup, then the
   prefill sleep; the result is a ``Generation`` holding the slot and its pinned KV blocks;
3. the caller drains the ``Generation`` (all at once or token by token) and releases it.

All methods run on the event loop that serves the emulator; nothing here is thread-safe.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from .config import EmulatorConfig, FaultConfig
from .faults import Fault, FaultInjector
from .images import ImageInputError, has_images
from .kvcache import Allocation, PrefixCache
from .metrics import EmulatorMetrics
from .model import Decision, GuardModel, duplicated, malformed
from .policy import Policy
from .requests import ChatRequest
from .scheduler import LatencyModel, SlotGate, Stopper
from .stats import EmulatorStats
from .tokens import Tokenizer, input_digest, prompt_digest_of_tokens
from .tools import tool_calls_for


class ContextLengthExceeded(Exception):
    """The prompt (plus the requested completion) does not fit ``max_model_len``; the message is
    vLLM's, word for word, and the HTTP layer answers 400 with it."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """A validated request with its prompt tokens and the model's decision, not yet admitted.

    ``max_tokens`` is the completion budget: the request's, or the server default capped by the
    room left in the context window.
    """

    request: ChatRequest
    prompt: list[str]
    digest: str
    decision: Decision
    arrived_at: float
    max_tokens: int


class Generation:
    """An admitted request: it holds a running slot and pinned KV blocks until ``release``."""

    def __init__(
        self,
        emulator: Emulator,
        prepared: Prepared,
        alloc: Allocation,
        content: str,
    ) -> None:
        self._emulator = emulator
        self.prepared = prepared
        self._alloc = alloc
        limit = prepared.max_tokens
        calls = prepared.decision.tool_calls
        # A tool call's tokens are its arguments' (each call's index beside each token).
        self.token_calls: list[int] = []
        if calls:
            tokens = []
            for i, call in enumerate(calls):
                pieces = emulator.tokenizer.tokenize(call.arguments) or [""]
                tokens += pieces
                self.token_calls += [i] * len(pieces)
        else:
            tokens = emulator.tokenizer.tokenize(content) or [""]
        self.tokens = tokens[:limit]
        self.token_calls = self.token_calls[:limit]
        done = "tool_calls" if calls else "stop"
        self.finish_reason = "length" if len(tokens) > limit else done
        self.prompt_tokens = len(prepared.prompt)
        self.cached_tokens = alloc.cached_tokens
        self.first_token_at: float | None = None
        self._released = False

    @property
    def content(self) -> str:
        return "" if self.token_calls else "".join(self.tokens)

    def tool_calls(self) -> list[dict[str, Any]]:
        """The tool calls of the answer (OpenAI's shape), their arguments cut with the tokens."""
        calls = self.prepared.decision.tool_calls
        arguments = [""] * len(calls)
        for i, token in zip(self.token_calls, self.tokens, strict=True):
            arguments[i] += token
        return [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": arguments[i]}}
            for i, c in enumerate(calls)
            if i <= (self.token_calls[-1] if self.token_calls else -1)
        ]

    def tool_call_delta(self, position: int, token: str) -> dict[str, Any]:
        """The streamed delta of the token at ``position``: a call's first token carries its id
        and name, as OpenAI streams them."""
        i = self.token_calls[position]
        call = self.prepared.decision.tool_calls[i]
        if position == 0 or self.token_calls[position - 1] != i:
            function = {"name": call.name, "arguments": token}
            entry: dict[str, Any] = {"index": i, "id": call.id, "type": "function", "function": function}
        else:
            entry = {"index": i, "function": {"arguments": token}}
        return {"tool_calls": [entry]}

    @property
    def completion_tokens(self) -> int:
        return len(self.tokens) if self.tokens != [""] else 0

    async def finish(self) -> None:
        """Decode the remaining tokens in one sleep (non-streaming responses)."""
        emu = self._emulator
        steps = len(self.tokens) - 1
        if steps > 0:
            await emu.stopper.sleep(steps * emu.latency.decode_step(emu.gate.running))

    async def stream(self) -> AsyncIterator[str]:
        """Yield the first token at once (it came with prefill), then one per decode step."""
        emu = self._emulator
        for i, token in enumerate(self.tokens):
            if i:
                await emu.stopper.sleep(emu.latency.decode_step(emu.gate.running))
            yield token

    def release(self, *, completed: bool) -> None:
        """Free the slot and the KV blocks; count usage and latency if the answer was delivered, and
        the work done so far if the client left first (it was spent all the same)."""
        if self._released:
            return
        self._released = True
        emu = self._emulator
        decoded = self._decoded_so_far()  # before the slot is freed: the step time depends on it
        emu.kv.release(self._alloc)
        emu.gate.release()
        if completed:
            emu.metrics.record_usage(self.prompt_tokens, self.cached_tokens, self.completion_tokens)
            emu.metrics.observe_latency(time.monotonic() - self.prepared.arrived_at)
        else:
            emu.metrics.record_abandoned(self.prompt_tokens, decoded)

    def _decoded_so_far(self) -> int:
        """Completion tokens produced before now: none during prefill, the first with it, then one
        per decode step (the decode of a non-streamed answer is one sleep, so this is computed)."""
        if self.first_token_at is None:
            return 0
        step = self._emulator.latency.decode_step(self._emulator.gate.running)
        elapsed = time.monotonic() - self.first_token_at
        steps = len(self.tokens) if step <= 0 else 1 + int(elapsed / step)
        return min(self.completion_tokens, steps)


class Emulator:
    """One emulated NIM: state, admin operations, and the request pipeline (see module doc)."""

    def __init__(self, config: EmulatorConfig, policy: Policy | None = None) -> None:
        self.config = config
        if policy is None:
            policy = Policy.from_file(config.policy_path) if config.policy_path else Policy.default()
        self.policy = policy
        self.model = GuardModel(
            policy, trailing_space=config.trailing_space, safety_guard=config.safety_guard
        )
        self.tokenizer = Tokenizer(config.chars_per_token, config.system_preamble)
        kv = config.kv_cache
        self.kv = PrefixCache(kv.block_size, kv.capacity_blocks, kv.reuse)
        self.latency = LatencyModel(config.latency)
        self.gate = SlotGate(config.latency.max_running)
        self.stopper = Stopper()
        self.faults = FaultInjector(config.faults)
        self.down = False
        self.started_at = time.monotonic()
        self.metrics = EmulatorMetrics(
            gauges={
                "requests_running": ("Requests holding a running slot.", self._running),
                "requests_waiting": ("Requests queued for a running slot.", self._waiting),
                "kv_cache_blocks": ("Blocks in the prefix cache.", self._kv_blocks),
                "down": ("1 while the admin switch holds the server down.", self._down),
            }
        )

    # -- request pipeline -------------------------------------------------------------------

    def prepare(self, request: ChatRequest) -> Prepared:
        """Tokenize, count the prompt, check the context window, and decide the answer (cheap,
        synchronous). A refused prompt still counts as a call for its digest: it reached the server.
        ``ImageInputError``: images sent to a text-only model, or an image that does not load."""
        if not self.config.vision and has_images(request.messages):
            raise ImageInputError(f"{self.config.model} is not a multimodal model: it takes no image input")
        prompt = self.tokenizer.render_chat(request.messages)
        digest = prompt_digest_of_tokens(prompt)
        self.metrics.record_prompt(digest)
        max_tokens = self._completion_budget(request, len(prompt))
        decision = self._tool_decision(request) or self.model.decide(request.messages)
        return Prepared(request, prompt, digest, decision, time.monotonic(), max_tokens)

    @staticmethod
    def _tool_decision(request: ChatRequest) -> Decision | None:
        """The main model's tool behaviour (``tools.py``), None when the request is no tool turn."""
        found = tool_calls_for(
            request.messages, request.tools, request.tool_choice, request.parallel_tool_calls
        )
        if found is None:
            return None
        if isinstance(found, str):
            return Decision("tool_answer", found)
        return Decision("tool_call", "", tool_calls=found)

    def _completion_budget(self, request: ChatRequest, prompt_tokens: int) -> int:
        """vLLM's check: an explicit max_tokens must fit beside the prompt; without one, the prompt
        alone must fit and the default is capped by the room left."""
        limit = self.config.max_model_len
        if not limit:
            return request.max_tokens
        head = f"This model's maximum context length is {limit} tokens. However, you requested"
        if not request.max_tokens_given:
            if prompt_tokens >= limit:
                raise ContextLengthExceeded(
                    f"{head} {prompt_tokens} tokens in the messages, "
                    "Please reduce the length of the messages."
                )
            return min(request.max_tokens, limit - prompt_tokens)
        if prompt_tokens + request.max_tokens > limit:
            raise ContextLengthExceeded(
                f"{head} {prompt_tokens + request.max_tokens} tokens ({prompt_tokens} in the messages, "
                f"{request.max_tokens} in the completion). "
                "Please reduce the length of the messages or completion."
            )
        return request.max_tokens

    def draw_fault(self) -> Fault | None:
        fault = self.faults.draw()
        if fault is not None:
            self.metrics.record_fault(fault.value)
        return fault

    async def admit(self, prepared: Prepared, fault: Fault | None = None) -> Generation:
        """Run the request up to its first token; the caller must ``release`` the result."""
        if fault is Fault.HANG:
            await self.stopper.sleep(self.faults.config.hang_seconds)
        content = prepared.decision.content
        if fault is Fault.MALFORMED:
            content = malformed(content, self.faults.rng)
        elif fault is Fault.DUPLICATE_KEY:
            content = duplicated(content)
        await self.stopper.sleep(self.latency.overhead())
        await self.gate.acquire()
        try:
            match = self.kv.match(prepared.prompt)
            now = time.monotonic()
            # Early reuse: a reused block may still be in another request's prefill; wait for it.
            start = max(now, match.ready_at) if self.latency.enabled else now
            uncached = len(prepared.prompt) - match.cached_tokens
            first_token_at = start + self.latency.prefill(uncached)
            alloc = self.kv.commit(match, first_token_at)
        except BaseException:
            self.gate.release()
            raise
        generation = Generation(self, prepared, alloc, content)
        try:
            await self.stopper.sleep(first_token_at - now)
        except BaseException:
            generation.release(completed=False)
            raise
        generation.first_token_at = time.monotonic()
        self.metrics.observe_ttft(generation.first_token_at - prepared.arrived_at)
        return generation

    async def classify(self, text: str) -> tuple[bool, float]:
        """Jailbreak detection: a classifier, so one forward pass in a running slot (queueing like
        any request) whose time grows with the input, no decoding and no KV cache."""
        self.metrics.record_prompt(input_digest(text))
        await self.gate.acquire()
        try:
            await self.stopper.sleep(self.latency.classify(self.tokenizer.count(text)))
        finally:
            self.gate.release()
        return self.model.classify_jailbreak(text)

    def stop(self) -> None:
        """Abandon every waiting or sleeping request (hangs included) so shutdown is prompt."""
        self.stopper.stop()
        self.gate.close()

    # -- admin ----------------------------------------------------------------------------

    def stats_dict(self, *, include_prompts: bool = True) -> dict[str, Any]:
        """The ``/admin/stats`` JSON document."""
        data = self.metrics.snapshot(include_prompts=include_prompts)
        data.update(
            running=self.gate.running,
            waiting=self.gate.waiting,
            down=self.down,
            kv_cache=dataclasses.asdict(self.kv.stats()),
            fault_config=dataclasses.asdict(self.faults.config),
            model=self.config.model,
            uptime_seconds=round(time.monotonic() - self.started_at, 3),
        )
        return data

    def stats(self) -> EmulatorStats:
        return EmulatorStats.from_dict(self.stats_dict())

    def reset(self, *, flush_cache: bool = False) -> dict[str, Any]:
        """Zero the counters and reseed the fault RNG; optionally empty the prefix cache."""
        self.metrics.reset()
        self.kv.reset_counters()
        self.faults.reseed()
        flushed = self.kv.flush() if flush_cache else 0
        return {"reset": True, "flushed_blocks": flushed}

    def set_down(self, down: bool) -> None:
        """While down, every ``/v1/*`` endpoint answers 503; admin endpoints keep working."""
        self.down = bool(down)

    def set_faults(self, **changes: Any) -> FaultConfig:
        """Change fault fields (rates, seed, hang_seconds, retry_after_seconds) and reseed."""
        return self.faults.update(**changes)

    def _running(self) -> float:
        return float(self.gate.running)

    def _waiting(self) -> float:
        return float(self.gate.waiting)

    def _kv_blocks(self) -> float:
        return float(len(self.kv))

    def _down(self) -> float:
        return 1.0 if self.down else 0.0
