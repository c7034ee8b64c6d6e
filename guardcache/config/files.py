"""Reading config YAML and merging several files into one mapping, remembering which file said what.

A config folder (``config.yml`` + ``prompts.yml`` + ...) is merged the way NeMo Guardrails merges it:
lists (``models``, ``prompts``) are concatenated in file order, mappings are merged key by key. Where
NeMo silently keeps one of two different values for the same setting, this raises: a guard config
whose effective value depends on file order is a trap. Every value's file is recorded so an error
found later, during validation, names the file that holds the bad value.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import yaml

from guardcache.config.errors import Loc, format_loc, show
from guardcache.errors import ConfigError

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(yaml.SafeLoader):
    """A safe loader that rejects duplicate keys (PyYAML silently keeps the last one)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: PyYAML reports it itself below
            continue
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {key!r} (first at line {first + 1})",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, name: str) -> Any:
    """Parse YAML text; errors become ``<name>: line L, column C: invalid YAML: <problem>``."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "cannot parse"
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ConfigError(f"{name}: {where}invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{name}: invalid YAML: {exc}") from None


def parse_mapping(text: str, name: str) -> dict[str, Any]:
    """Parse YAML whose top level must be a mapping of keys; an empty document is an empty mapping."""
    data = parse_yaml(text, name)
    if data is None:
        return {}
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a {type(data).__name__} ({show(data)})"
        raise ConfigError(f"{name}: the top level must be a mapping of keys (got {kind})")
    return data


def read_text(path: Path) -> str:
    """Read a config file as UTF-8, with errors that name it."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None


def folder_files(folder: Path) -> list[Path]:
    """The YAML files of a config folder: ``config.yml``/``config.yaml`` first, then the rest by name.

    Only the folder itself is read (not subfolders) and hidden files are skipped, so editor backups
    and tool folders never leak into a guard config.
    """
    found = [
        p
        for p in folder.iterdir()
        if p.is_file() and p.suffix in (".yml", ".yaml") and not p.name.startswith(".")
    ]
    first = [p for p in found if p.stem == "config"]
    return sorted(first, key=lambda p: p.suffix != ".yml") + sorted(
        (p for p in found if p.stem != "config"), key=lambda p: p.name
    )


def colang_files(folder: Path) -> list[str]:
    """Names of NeMo Colang files (``*.co``) in the folder: guardcache does not run them."""
    return sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix == ".co")


class MergedSources:
    """The merged data of several YAML documents and the file each value came from."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.data: dict[str, Any] = {}
        self._origins: dict[Loc, str] = {}
        self.files: list[str] = []

    def add(self, data: dict[str, Any], name: str) -> None:
        """Merge one document (already parsed) into the whole."""
        self.files.append(name)
        self._merge(self.data, copy.deepcopy(data), (), name)

    def file_of(self, loc: Loc) -> str:
        """The file holding the value at ``loc`` (its closest recorded ancestor), else the label."""
        for n in range(len(loc), 0, -1):
            found = self._origins.get(loc[:n])
            if found is not None:
                return found
        return self.files[0] if len(self.files) == 1 else self.label

    def _merge(self, dst: dict[str, Any], src: dict[Any, Any], path: Loc, name: str) -> None:
        for key, value in src.items():
            here = (*path, key)
            if key not in dst:
                dst[key] = value
                self._record(here, value, name)
            elif isinstance(dst[key], dict) and isinstance(value, dict):
                self._merge(dst[key], value, here, name)
            elif isinstance(dst[key], list) and isinstance(value, list):
                offset = len(dst[key])
                dst[key].extend(value)
                for i, item in enumerate(value):
                    self._record((*here, offset + i), item, name)
            elif dst[key] != value:
                raise ConfigError(
                    f"{name}: {format_loc(here)}: also set in {self.file_of(here)} "
                    f"({show(dst[key])} there, {show(value)} here); set it in one file only"
                )

    def _record(self, loc: Loc, value: Any, name: str) -> None:
        self._origins[loc] = name
        if isinstance(value, dict):
            for key, item in value.items():
                self._record((*loc, key), item, name)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                self._record((*loc, i), item, name)


def load_path(path: str | os.PathLike[str]) -> tuple[MergedSources, list[str]]:
    """Read a config file, or every YAML file of a config folder, into ``MergedSources``.

    Also returns the Colang files found in a folder, which the caller reports as ignored.
    """
    root = Path(path)
    if not root.exists():
        raise ConfigError(f"{root}: no such file or folder (expected a config folder or a .yml file)")
    if root.is_file():
        sources = MergedSources(str(root))
        sources.add(parse_mapping(read_text(root), str(root)), str(root))
        return sources, []
    files = folder_files(root)
    if not files:
        raise ConfigError(f"{root}: no config.yml (or other .yml/.yaml file) in this folder")
    sources = MergedSources(str(root))
    for file in files:
        sources.add(parse_mapping(read_text(file), str(file)), str(file))
    return sources, colang_files(root)


__all__ = [
    "MergedSources",
    "colang_files",
    "folder_files",
    "load_path",
    "parse_mapping",
    "parse_yaml",
    "read_text",
]
