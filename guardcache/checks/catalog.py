"""Every check guardcache can run: importing this registers each check folder's flows and collects
its answer parsers.

A check is one folder under this package with a ``flows.py`` (its ``FlowSpec``s: flow names, prompt
task, variables, backend, defaults; pure data, so the config can validate against it without
loading any runtime) and a ``parsers.py`` (``PARSERS``: output-parser name -> function). The folders
are found by name, so adding a check is a folder and a prompt; nothing here lists them.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path

from guardcache.checks.verdict import Verdict
from guardcache.flows import KNOWN_FLOWS, FlowSpec

_PACKAGE = "guardcache.checks"


def _check_folders() -> list[str]:
    here = Path(__file__).parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.ispkg)


def _load() -> dict[str, Callable[[str], Verdict]]:
    parsers: dict[str, Callable[[str], Verdict]] = {}
    for folder in _check_folders():
        importlib.import_module(f"{_PACKAGE}.{folder}.flows")
        try:
            module = importlib.import_module(f"{_PACKAGE}.{folder}.parsers")
        except ModuleNotFoundError as exc:
            if exc.name != f"{_PACKAGE}.{folder}.parsers":
                raise
            continue
        for name, parser in module.PARSERS.items():
            if name in parsers:
                raise RuntimeError(f"output parser {name!r} is defined by two checks")
            parsers[name] = parser
    return parsers


PARSERS: dict[str, Callable[[str], Verdict]] = _load()
"""Output-parser name (as in a prompt's ``output_parser``) -> function reading an answer."""


def flow(name: str) -> FlowSpec:
    """The spec of a known flow (``KeyError`` if unknown: the config has validated names)."""
    return KNOWN_FLOWS[name]


__all__ = ["PARSERS", "flow"]
