"""What each check folder brings to the runtime: its answer parsers and, when it is not a chat check,
the builder of its check.

A check is a module of flows in :mod:`guardcache.flows` (its ``FlowSpec``s: data, below the config)
and a folder here, named alike, with a ``parsers.py`` (``PARSERS``: output-parser name -> function)
and, for a check that is not an ``LLMCheck`` (the JailbreakDetect classifier), a ``check.py`` whose
``BUILDERS`` names the builder of each of its flows. The folders are found by name, so the rails
builder knows no check: it takes a flow's builder from ``BUILDERS`` (else builds an ``LLMCheck``)
and its parser from ``PARSERS``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

from guardcache.cache import CacheInterface
from guardcache.checks.check import Check
from guardcache.checks.verdict import Verdict
from guardcache.config import RailsConfig
from guardcache.flows import KNOWN_FLOWS, FlowSpec

_PACKAGE = "guardcache.checks"

Parser = Callable[[str], Verdict]
"""Reads a model's answer into a verdict (``ParseError`` when it cannot)."""


class CheckBuilder(Protocol):
    """Builds the check of one flow from the validated config, the flow's cache (None: uncached),
    the config's input limit and the flow's parser."""

    def __call__(
        self,
        config: RailsConfig,
        spec: FlowSpec,
        cache: CacheInterface | None,
        max_input_chars: int,
        parser: Parser,
    ) -> Check: ...


def _check_folders() -> list[str]:
    here = Path(__file__).parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.ispkg)


def _optional(module: str) -> object | None:
    """``module`` imported, or None when the folder has no such file (an error inside it is raised)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        return None


def _load() -> tuple[dict[str, Parser], dict[str, CheckBuilder]]:
    parsers: dict[str, Parser] = {}
    builders: dict[str, CheckBuilder] = {}
    for folder in _check_folders():
        module = _optional(f"{_PACKAGE}.{folder}.parsers")
        for name, parser in getattr(module, "PARSERS", {}).items():
            if name in parsers:
                raise RuntimeError(f"output parser {name!r} is defined by two checks")
            parsers[name] = parser
        runtime = _optional(f"{_PACKAGE}.{folder}.check")
        for flow_name, builder in getattr(runtime, "BUILDERS", {}).items():
            if flow_name not in KNOWN_FLOWS or flow_name in builders:
                raise RuntimeError(f"checks/{folder}: flow {flow_name!r} is unknown or has two builders")
            builders[flow_name] = builder
    return parsers, builders


_PARSERS, _BUILDERS = _load()

PARSERS: Mapping[str, Parser] = MappingProxyType(_PARSERS)
"""Output-parser name (as in a prompt's ``output_parser``) -> function reading an answer."""

BUILDERS: Mapping[str, CheckBuilder] = MappingProxyType(_BUILDERS)
"""Flow name -> the builder its check folder names; a flow without one is an ``LLMCheck``."""


def flow(name: str) -> FlowSpec:
    """The spec of a known flow (``KeyError`` if unknown: the config has validated names)."""
    return KNOWN_FLOWS[name]


__all__ = ["BUILDERS", "PARSERS", "CheckBuilder", "Parser", "flow"]
