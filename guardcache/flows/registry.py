"""The one table of flows guardcache can run, by name: what the config validates rails against and
the runtime builds checks from."""

from __future__ import annotations

from guardcache.flows.spec import FlowSpec

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


__all__ = ["KNOWN_FLOWS", "prompt_variables", "register_flow"]
