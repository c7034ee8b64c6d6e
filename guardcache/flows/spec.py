"""What a flow guardcache can run is (``FlowSpec``): pure data, so the config validates against it
without loading any check's runtime."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

Direction = Literal["input", "output"]

Backend = Literal["chat", "classify"]
"""``chat``: an OpenAI-compatible chat completion read by an output parser; ``classify``: a JSON
classifier endpoint (NemoGuard JailbreakDetect's ``{"input": text}``)."""

MessageBuilder = Callable[[list[dict[str, str]], Mapping[str, Any]], list[dict[str, str]]]
"""Turns a check's rendered prompt messages and its variables into the request's messages."""


@dataclass(frozen=True, slots=True)
class FlowSpec:
    """What guardcache knows about a flow it can run: pure data, so config validation needs no runtime.

    ``direction`` says which rail group it belongs to; ``required_args`` must be present and
    ``optional_args`` may be, nothing else; ``prompt_task`` is the prompt task the flow renders
    (``None`` for a flow that needs no prompt); ``variables`` are the texts the check reads from the
    turn (the prompt may use them, the cache key covers all of them); ``settings`` are read-only
    config values a template may also use (``reasoning_enabled``), part of the cache namespace.

    ``models`` names the model types a flow without ``$model=`` runs on, first configured wins
    (``self check input`` uses a ``self_check_input`` model if there is one, else ``main``);
    ``model_required`` False means the model entry is optional (the jailbreak NIM's endpoint comes
    from ``rails.config``, and it is cached by default; a ``jailbreak_detection`` model only sizes
    or turns off that cache).
    ``default_parser`` reads the answer when the prompt names no ``output_parser``; ``params`` are
    generation defaults (the prompt's ``max_tokens`` and the model's parameters override them);
    ``build_messages`` shapes the request (default: the rendered prompt as it is).
    """

    name: str
    direction: Direction
    required_args: tuple[str, ...] = ()
    prompt_task: str | None = None
    variables: tuple[str, ...] = ()
    backend: Backend = "chat"
    optional_args: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    model_required: bool = True
    default_parser: str | None = None
    params: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    build_messages: MessageBuilder | None = field(default=None, compare=False, hash=False)

    @property
    def accepted_args(self) -> tuple[str, ...]:
        return (*self.required_args, *self.optional_args)


DEFAULT_MAX_INPUT_CHARS = 32_768
"""The longest text a check sends (characters, per text): ~8k tokens, the NemoGuard NIMs' context.
Longer text cannot be judged whole, so it is unsafe (``rails.max_input_chars`` changes it)."""


__all__ = ["DEFAULT_MAX_INPUT_CHARS", "Backend", "Direction", "FlowSpec", "MessageBuilder"]
