"""Flow references as NeMo Guardrails writes them (``content safety check input $model=content_safety``).

A rail in ``config.yml`` names a flow and passes it arguments with NeMo's ``$name=value`` syntax;
prompt tasks in ``prompts.yml`` use the same syntax (``content_safety_check_input
$model=content_safety``). This module owns that syntax, so the config, the prompts and the runtime
read a flow the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

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


__all__ = ["FlowRef", "split_ref"]
