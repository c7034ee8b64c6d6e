"""The renderer guardcache used before Jinja: ``{{ name }}`` placeholders substituted in one pass.

Kept as the reference the Jinja renderer is held to: for a template made only of ``{{ name }}``
placeholders both must produce the same bytes (tests/unit/test_prompts_jinja.py checks it on the
shipped NemoGuard prompts for many random inputs, and benchmarks/bench_render.py times both).
Nothing in the request path calls it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# ``{{ name }}`` with optional whitespace inside the braces.
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def is_plain(template: str) -> bool:
    """Whether every ``{{``/``{%``/``{#`` in ``template`` is a plain ``{{ name }}`` placeholder."""
    rest = PLACEHOLDER.sub("", template)
    return "{{" not in rest and "{%" not in rest and "{#" not in rest


def render_placeholders(template: str, variables: Mapping[str, str]) -> str:
    """Replace every ``{{ name }}`` with ``variables[name]`` in a single pass (values are never
    scanned again); ``KeyError`` for a placeholder without a value."""

    def value(match: re.Match[str]) -> str:
        return variables[match.group(1)]

    return PLACEHOLDER.sub(value, template)


__all__ = ["PLACEHOLDER", "is_plain", "render_placeholders"]
