"""Flows: NeMo's ``$name=value`` references, what each flow guardcache can run is, and the table of them.

A check's flows are data (``FlowSpec``: name, direction, arguments, prompt task, variables, backend,
defaults), one module per check here (``content_safety.py``, ``topic_safety.py``, ...), named as the
check's folder under ``guardcache.checks`` (its parsers and, for a classifier, its runtime). They live
in this leaf package, below the config, so the config validates rails against them without importing
any check: importing ``guardcache.flows`` registers every one of them (``KNOWN_FLOWS``). Adding a
check is a module here, a folder under ``guardcache.checks`` and a prompt.

Modules: :mod:`~guardcache.flows.syntax` (``FlowRef``, ``split_ref``), :mod:`~guardcache.flows.spec`
(``FlowSpec``), :mod:`~guardcache.flows.registry` (``KNOWN_FLOWS``, ``register_flow``).
"""

from __future__ import annotations

from guardcache.flows import content_safety, jailbreak_detection, self_check, topic_safety
from guardcache.flows.registry import KNOWN_FLOWS, prompt_variables, register_flow
from guardcache.flows.spec import DEFAULT_MAX_INPUT_CHARS, Backend, Direction, FlowSpec, MessageBuilder
from guardcache.flows.syntax import FlowRef, split_ref

CHECK_FLOWS = (content_safety, jailbreak_detection, self_check, topic_safety)
"""The modules of the checks' flows (each a ``FLOWS`` tuple), in the order they are registered."""

for _module in CHECK_FLOWS:
    for _spec in _module.FLOWS:
        register_flow(_spec)

__all__ = [
    "CHECK_FLOWS",
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
