"""Finding a config folder's files, reading them safely, and merging several YAML files into one
mapping, remembering which file said what.

A config folder is read the way NeMo Guardrails reads it (``RailsConfig.from_path`` and ``_load_path``
in ``nemoguardrails/rails/llm/config.py``, ``.railsignore`` in ``nemoguardrails/utils.py``):

- every file under the folder, subfolders included, symbolic links followed, hidden files and folders
  included (NeMo's ``os.walk`` skips none);
- a ``.yml``/``.yaml`` file is YAML, a ``.co`` file is Colang (suffixes compared case-sensitively);
- a file whose path relative to the folder starts with ``kb`` is a knowledge-base document (NeMo
  reads only its ``.md`` files, as documents), never YAML or Colang;
- a ``.railsignore`` file, the first found in the folder or above it, lists file-name patterns
  (``fnmatch``, compared with each file's NAME, never its path; blank lines and lines starting with
  ``#`` skipped): a matching file is not read.

guardcache reads the YAML files and refuses the Colang ones (``RailsConfig.from_path``). The walk is
deterministic (``config.yml``/``config.yaml`` first, then the folder's other files by name, then each
subfolder in name order) and bounded: symbolic-link loops, folders deeper than ``MAX_DEPTH`` levels,
more than ``MAX_ENTRIES`` files and folders, files over ``MAX_FILE_BYTES``, and files that are not
regular files or not UTF-8 text are errors naming the path, where NeMo would hang, recurse or fail
with a traceback.

Several files merge as NeMo merges them: lists (``models``, ``prompts``) are concatenated in file
order, mappings are merged key by key. Where NeMo silently keeps one of two different values for the
same setting, this raises: a guard config whose effective value depends on file order is a trap.
Every value's file is recorded so an error found later, during validation, names the file that
holds the bad value.
"""

from __future__ import annotations

import copy
import fnmatch
import logging
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from guardcache.config.errors import Loc, format_loc, show
from guardcache.errors import ConfigError

logger = logging.getLogger(__name__)

_MERGE_TAG = "tag:yaml.org,2002:merge"

MAX_FILE_BYTES = 10 * 1024 * 1024
"""The largest config file read (YAML, Colang, ``.railsignore``): config files are a few KB."""
MAX_DEPTH = 32
"""The deepest folder level walked below a config folder."""
MAX_ENTRIES = 10_000
"""The most files and folders a config folder may hold (all of them, read or not)."""

YAML_SUFFIXES = (".yml", ".yaml")
COLANG_SUFFIX = ".co"
RAILSIGNORE = ".railsignore"
KB_PREFIX = "kb"


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


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _megabytes(size: int) -> str:
    return f"{round(size / (1024 * 1024), 1):g} MB"


def read_text(path: Path, *, limit: int = MAX_FILE_BYTES) -> str:
    """Read a config file as UTF-8 text, with errors that name it.

    The file must be a regular file (a FIFO would block the load forever, a device never end) of at
    most ``limit`` bytes, checked before anything is read; NUL bytes and invalid UTF-8 are errors.
    Line endings are read as Python's text mode (and NeMo) reads them: ``\\r\\n`` and ``\\r`` are ``\\n``.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise ConfigError(
                f"{path}: a broken symbolic link (to {os.readlink(path)}): the file it names does not exist"
            ) from None
        raise ConfigError(f"{path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{path}: cannot read: {_kind(info.st_mode)}, not a config file")
    over = (
        f"over the {_megabytes(limit)} limit for a config file "
        "(config files are a few KB; is this the right file?)"
    )
    if info.st_size > limit:
        raise ConfigError(f"{path}: {_megabytes(info.st_size)} ({info.st_size} bytes), {over}")
    try:
        # O_NONBLOCK: if the path was swapped for a FIFO since the stat, the open does not hang.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ConfigError(f"{path}: cannot read: not a regular file, not a config file")
            data = f.read(limit + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise ConfigError(f"{path}: {over}")
    nul = data.find(b"\0")
    if nul >= 0:
        raise ConfigError(f"{path}: binary data (a NUL byte at offset {nul}), not a text config file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


# Colang 1: "define flow NAME", "define subflow NAME", "define extension flow NAME" (NAME may be
# empty: an anonymous flow); Colang 2: "flow NAME $param ...".
_COLANG_FLOW = re.compile(
    r"^[ \t]*(?:define[ \t]+)?(?:(?:parallel|extension)[ \t]+)*(?:subflow|flow)(?=[ \t]|$)([^\n:#]*)",
    re.MULTILINE,
)
# Colang 1 dialog: "define user ask about cooking", "define bot refuse to respond".
_COLANG_MESSAGE = re.compile(r"^[ \t]*define[ \t]+(?:user|bot)(?=[ \t]|$)", re.MULTILINE)


@dataclass(frozen=True)
class ColangFile:
    """A Colang file of a config folder: its path, its name relative to the folder and its flows."""

    path: Path
    name: str
    flows: tuple[str, ...] = ()
    unnamed_flows: int = 0
    messages: int = 0
    unreadable: str | None = None

    @classmethod
    def read(cls, path: Path, name: str) -> ColangFile:
        """Read the file's flow definitions (a file that cannot be read lists none, and says why)."""
        try:
            text = read_text(path)
        except ConfigError as exc:
            return cls(path, name, unreadable=str(exc).removeprefix(f"{path}: "))
        named: list[str] = []
        unnamed = 0
        for match in _COLANG_FLOW.finditer(text):
            flow = " ".join(match.group(1).split())
            if flow:
                named.append(flow)
            else:
                unnamed += 1
        return cls(path, name, tuple(named), unnamed, len(_COLANG_MESSAGE.findall(text)))

    def defines(self, flow: str) -> bool:
        """Whether the file defines the flow ``flow`` (compared without ``$`` arguments)."""
        wanted = flow_base_name(flow)
        return any(flow_base_name(f) == wanted for f in self.flows)

    def describe(self) -> str:
        """``rails/x.co (flows: a, b; 3 unnamed flows; 6 user/bot message definitions)``."""
        parts = []
        if self.flows:
            parts.append(f"flows: {', '.join(self.flows)}")
        if self.unnamed_flows:
            parts.append(f"{self.unnamed_flows} unnamed flow{'s' if self.unnamed_flows > 1 else ''}")
        if self.messages:
            parts.append(f"{self.messages} user/bot message definition{'s' if self.messages > 1 else ''}")
        if self.unreadable:
            parts.append(f"unreadable: {self.unreadable}")
        return f"{self.name} ({'; '.join(parts)})" if parts else self.name


def flow_base_name(flow: str) -> str:
    """A flow's name without its ``$`` arguments, whitespace collapsed."""
    return " ".join(flow.split("$", 1)[0].split())


@dataclass
class ConfigFiles:
    """What a config path holds, as NeMo would load it."""

    root: Path
    yaml: list[Path] = field(default_factory=list)
    colang: list[ColangFile] = field(default_factory=list)
    # Colang files NeMo does not load either: excluded by .railsignore or under kb.
    skipped_colang: list[tuple[ColangFile, str]] = field(default_factory=list)
    railsignore: Path | None = None
    knowledge_base: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return str(self.root)


def find_railsignore(start: Path) -> Path | None:
    """The ``.railsignore`` NeMo uses for a config folder: the first found in it or above it.

    Like NeMo, the search starts at the path as given and goes up through its parents (for a
    relative path, up to the working folder).
    """
    current = start
    while True:
        candidate = current / RAILSIGNORE
        if candidate.is_file():
            return candidate
        if current == current.parent:
            return None
        current = current.parent


def railsignore_patterns(path: Path) -> list[str]:
    """The patterns of a ``.railsignore``: each stripped line, except blank ones and those starting
    with ``#`` (as NeMo reads it: a ``#`` after leading spaces is part of a pattern)."""
    patterns: list[str] = []
    for line in read_text(path).split("\n"):
        if line.strip() and not line.startswith("#") and line.strip() not in patterns:
            patterns.append(line.strip())
    for pattern in patterns:
        if "/" in pattern or os.sep in pattern:
            logger.warning(
                "%s: the pattern %r never matches: .railsignore patterns are compared with file "
                "names, not paths or folders (as in NeMo Guardrails); use a name pattern like '*.co'",
                path,
                pattern,
            )
    return patterns


def _ignored(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in patterns)


class _Walk:
    """One bounded, deterministic walk of a config folder (see the module docstring)."""

    def __init__(self, root: Path, patterns: list[str], found: ConfigFiles) -> None:
        self.root = root
        self.patterns = patterns
        self.found = found
        self.entries = 0
        self.seen: dict[tuple[int, int], Path] = {}

    def folder(self, folder: Path, rel: tuple[str, ...], ancestors: tuple[tuple[int, int], ...]) -> None:
        if len(rel) > MAX_DEPTH:
            raise ConfigError(
                f"{folder}: more than {MAX_DEPTH} folder levels below the config folder {self.root} "
                "(a config folder is a few files)"
            )
        try:
            info = os.stat(folder)
        except OSError as exc:
            raise ConfigError(f"{folder}: cannot read this folder ({exc.strerror or exc})") from None
        ident = (info.st_dev, info.st_ino)
        if ident in ancestors:
            raise ConfigError(
                f"{folder}: a symbolic link loop: this folder is {self.seen[ident]}, which contains it "
                "(NeMo Guardrails would read its files over and over); remove the link"
            )
        if ident in self.seen:
            raise ConfigError(
                f"{folder}: the same folder as {self.seen[ident]} (through a symbolic link): its files "
                "would be read twice; remove one of the two"
            )
        self.seen[ident] = folder
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            raise ConfigError(f"{folder}: cannot list this folder ({exc.strerror or exc})") from None
        self.entries += len(entries)
        if self.entries > MAX_ENTRIES:
            raise ConfigError(
                f"{self.root}: more than {MAX_ENTRIES} files and folders under the config folder "
                f"(while listing {folder}); is this the right folder? (NeMo Guardrails would walk "
                "them all: keep a config in a folder of its own)"
            )
        files: list[str] = []
        subfolders: list[str] = []
        for entry in entries:
            try:
                is_dir = entry.is_dir()  # follows symbolic links, as NeMo's os.walk(followlinks=True)
            except OSError:
                is_dir = False
            (subfolders if is_dir else files).append(entry.name)
        if not rel:  # config.yml (then config.yaml) first, as before
            files.sort(key=lambda n: (n not in ("config.yml", "config.yaml"), n != "config.yml", n))
        for name in files:
            self.file(folder / name, "/".join((*rel, name)))
        for name in subfolders:
            self.folder(folder / name, (*rel, name), (*ancestors, ident))

    def file(self, path: Path, rel: str) -> None:
        name = path.name
        if _ignored(name, self.patterns):
            if name.endswith(COLANG_SUFFIX):
                self.found.skipped_colang.append(
                    (ColangFile.read(path, rel), f"excluded by {self.found.railsignore}")
                )
            logger.info("%s: excluded by %s", path, self.found.railsignore)
            return
        if rel.startswith(KB_PREFIX):
            if rel.endswith(".md"):
                self.found.knowledge_base.append(rel)
            elif name.endswith((*YAML_SUFFIXES, COLANG_SUFFIX)):
                why = (
                    f"its path starts with {KB_PREFIX!r}: NeMo Guardrails reads such files as "
                    "knowledge-base documents"
                )
                if name.endswith(COLANG_SUFFIX):
                    self.found.skipped_colang.append((ColangFile.read(path, rel), why))
                logger.warning("%s: not read (%s, .md only)", path, why)
            return
        if name.endswith(YAML_SUFFIXES):
            self.found.yaml.append(path)
        elif name.endswith(COLANG_SUFFIX):
            self.found.colang.append(ColangFile.read(path, rel))


def find_config_files(path: str | os.PathLike[str]) -> ConfigFiles:
    """The files of a config path, as NeMo Guardrails would load them (see the module docstring).

    A file path is one YAML file (or one Colang file, if it ends in ``.co``); a folder is walked.
    """
    root = Path(path)
    try:
        info = os.stat(root)
    except FileNotFoundError:
        raise ConfigError(
            f"{root}: no such file or folder (expected a config folder or a .yml file)"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{root}: cannot read ({exc.strerror or exc})") from None
    found = ConfigFiles(root)
    if stat.S_ISREG(info.st_mode):
        if root.name.endswith(COLANG_SUFFIX):
            found.colang.append(ColangFile.read(root, root.name))
        else:
            found.yaml.append(root)
        return found
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"{root}: {_kind(info.st_mode)}, not a config folder or file")
    found.railsignore = find_railsignore(root)
    patterns = railsignore_patterns(found.railsignore) if found.railsignore is not None else []
    _Walk(root, patterns, found).folder(root, (), ())
    if not found.yaml and not found.colang:
        raise ConfigError(f"{root}: no config.yml (or other .yml/.yaml file) in this folder")
    return found


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


def merge_yaml(files: ConfigFiles) -> MergedSources:
    """Read, parse and merge the YAML files found, in their order."""
    if not files.yaml:
        raise ConfigError(f"{files.root}: no config.yml (or other .yml/.yaml file) in this folder")
    sources = MergedSources(files.label)
    for path in files.yaml:
        sources.add(parse_mapping(read_text(path), str(path)), str(path))
    return sources


def listed_flows(data: Any) -> list[tuple[Loc, str]]:
    """Every flow named under ``rails.<group>.flows`` of a parsed config (any group), with its path."""
    found: list[tuple[Loc, str]] = []
    rails = data.get("rails") if isinstance(data, dict) else None
    if not isinstance(rails, dict):
        return found
    for group, section in rails.items():
        flows = section.get("flows") if isinstance(section, dict) else None
        if isinstance(flows, list):
            found += [(("rails", group, "flows", i), f) for i, f in enumerate(flows) if isinstance(f, str)]
    return found


__all__ = [
    "MAX_DEPTH",
    "MAX_ENTRIES",
    "MAX_FILE_BYTES",
    "ColangFile",
    "ConfigFiles",
    "MergedSources",
    "find_config_files",
    "find_railsignore",
    "flow_base_name",
    "listed_flows",
    "merge_yaml",
    "parse_mapping",
    "parse_yaml",
    "railsignore_patterns",
    "read_text",
]
