"""Flow references (``content safety check input $model=content_safety``) and the registry of known flows.

A rail in ``config.yml`` names a flow and passes it arguments with NeMo Guardrails' ``$name=value``
syntax; prompt tasks in ``prompts.yml`` use the same syntax (``content_safety_check_input
$model=content_safety``). This module owns that syntax and the one table of flows guardcache can run,
so a new check registers itself here (``register_flow``) and the config loader, the prompt validation
and the runtime all see it at once.

This is a leaf module: it imports nothing from the rest of guardcache. The checks register their
flows from their own folders (``guardcache.checks.<check>.flows``, collected by
``guardcache.checks.catalog``), which the config imports before it validates.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

Direction = Literal["input", "output"]

# One ``$name=value`` argument; the value may be bare, "double" or 'single' quoted (NeMo's own example
# configs use ``$model="shieldgemma"``).
_ARG = re.compile(
    r"""\$(?P<name>[A-Za-z_][A-Za-z0-9_]*) \s*=\s*
        (?: "(?P<dq>[^"]*)" | '(?P<sq>[^']*)' | (?P<bare>[^\s"'$]+) )""",
    re.VERBOSE,
)


def split_ref(text: str) -> tuple[str, dict[str, str]]:
    """Split ``"name words $a=x $b=y"`` into ``("name words", {"a": "x", "b": "y"})``.

    Whitespace inside the name is collapsed to single spaces so ``content  safety check input`` and
    ``content safety check input`` are the same flow. Raises ``ValueError`` (with a message fit for a
    config error) when the text is empty or something after the name is not a ``$name=value`` pair.
    """
    head, dollar, tail = text.partition("$")
    name = " ".join(head.split())
    if not name:
        raise ValueError(f"expected a name before any $arguments (got {text!r})")
    args: dict[str, str] = {}
    rest = dollar + tail
    pos = 0
    while pos < len(rest):
        if rest[pos].isspace():
            pos += 1
            continue
        match = _ARG.match(rest, pos)
        if match is None:
            raise ValueError(f"cannot read {rest[pos:]!r} in {text!r}: arguments are written $name=value")
        key = match["name"]
        if key in args:
            raise ValueError(f"argument ${key} is given twice in {text!r}")
        value = next(v for v in (match["dq"], match["sq"], match["bare"]) if v is not None)
        args[key] = value
        pos = match.end()
    return name, args


@dataclass(frozen=True, slots=True)
class FlowRef:
    """One flow as written in ``rails.<input|output>.flows``, parsed.

    ``text`` keeps the string as the user wrote it, for messages.
    """

    name: str
    # Excluded from the hash (a mapping is unhashable); equal refs still hash equal via name and text.
    args: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    text: str = ""

    @classmethod
    def parse(cls, text: str) -> FlowRef:
        """Parse ``"content safety check input $model=content_safety"``; ``ValueError`` if malformed."""
        name, args = split_ref(text)
        return cls(name=name, args=MappingProxyType(args), text=text)

    @property
    def model_type(self) -> str | None:
        """The ``$model=`` argument: which configured model the check calls."""
        return self.args.get("model")


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

KNOWN_FLOWS: dict[str, FlowSpec] = {}
"""Every flow guardcache can run, by name. Extend it with ``register_flow``, not by assignment."""


def register_flow(spec: FlowSpec) -> FlowSpec:
    """Add a flow to ``KNOWN_FLOWS``; registering the same name twice with a different spec is a bug."""
    existing = KNOWN_FLOWS.get(spec.name)
    if existing is not None and existing != spec:
        raise ValueError(f"flow {spec.name!r} is already registered as {existing!r}")
    KNOWN_FLOWS[spec.name] = spec
    return spec


def prompt_variables() -> dict[str, frozenset[str]]:
    """Prompt task -> the variables its template may use, over all known flows."""
    table: dict[str, frozenset[str]] = {}
    for spec in KNOWN_FLOWS.values():
        if spec.prompt_task is not None:
            table[spec.prompt_task] = table.get(spec.prompt_task, frozenset()) | set(spec.variables)
    return table


__all__ = [
    "DEFAULT_MAX_INPUT_CHARS",
    "KNOWN_FLOWS",
    "Backend",
    "Direction",
    "FlowRef",
    "FlowSpec",
    "MessageBuilder",
    "prompt_variables",
    "register_flow",
    "split_ref",
]
