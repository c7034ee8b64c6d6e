"""Flow references (``content safety check input $model=content_safety``) and the registry of known flows.

A rail in ``config.yml`` names a flow and passes it arguments with NeMo Guardrails' ``$name=value``
syntax; prompt tasks in ``prompts.yml`` use the same syntax (``content_safety_check_input
$model=content_safety``). This module owns that syntax and the one table of flows guardcache can run,
so a new check registers itself here (``register_flow``) and the config loader, the prompt validation
and the runtime all see it at once.

This is a leaf module: it imports nothing from the rest of guardcache.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

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


@dataclass(frozen=True, slots=True)
class FlowSpec:
    """What guardcache knows about a flow it can run.

    ``direction`` says which rail group it belongs to; ``required_args`` must be present and no other
    argument is accepted; ``prompt_task`` is the prompt task the flow renders (``None`` for a flow that
    needs no prompt); ``variables`` are the only placeholders that prompt may use, so a template typo
    fails when the config loads instead of reaching the model verbatim.
    """

    name: str
    direction: Direction
    required_args: tuple[str, ...] = ()
    prompt_task: str | None = None
    variables: tuple[str, ...] = ()


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
    """Prompt task -> the placeholders its template may use, over all known flows."""
    table: dict[str, frozenset[str]] = {}
    for spec in KNOWN_FLOWS.values():
        if spec.prompt_task is not None:
            table[spec.prompt_task] = table.get(spec.prompt_task, frozenset()) | set(spec.variables)
    return table


register_flow(
    FlowSpec(
        name="content safety check input",
        direction="input",
        required_args=("model",),
        prompt_task="content_safety_check_input",
        variables=("user_input",),
    )
)
register_flow(
    FlowSpec(
        name="content safety check output",
        direction="output",
        required_args=("model",),
        prompt_task="content_safety_check_output",
        variables=("user_input", "bot_response"),
    )
)

__all__ = [
    "KNOWN_FLOWS",
    "Direction",
    "FlowRef",
    "FlowSpec",
    "prompt_variables",
    "register_flow",
    "split_ref",
]
