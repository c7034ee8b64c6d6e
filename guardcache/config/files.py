"""Finding a config folder's files, reading them within limits, and merging several YAML files into
one mapping, remembering which file said what.

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
subfolder in name order).

Every read of a config goes through one :class:`ConfigReader`, so a config that cannot be loaded
cheaply is an error before the expensive work, never a hang or a process out of memory: configs are
loaded by platforms that did not write them (per-tenant configs, a config store, a shared folder),
and ``from_content`` is public API. The reader holds :class:`ConfigLimits` (each with a default,
docs/configuration.md, "Limits of a config") and counts against them as it goes:

- the walk: folders deeper than ``folder_depth`` levels, more than ``entries`` files and folders
  (counted while listing, so a folder of a million files is not listed whole), a symbolic-link loop
  (or a folder reached twice), a FIFO, socket or device anywhere under the folder;
- each file read: a regular file (not a FIFO, which would block the read forever, nor a device,
  which would never end it) of at most ``file_bytes`` (its size checked before it is opened), UTF-8
  text without NUL bytes (not a binary file);
- the load: at most ``total_bytes`` read from all its files together (checked before each read);
- each YAML document, while it is composed (before anything is built from it): at most
  ``yaml_depth`` levels of nested mappings and lists, and at most ``yaml_nodes`` nodes counted with
  every alias expanded (the whole load shares them). An alias costs the size of the node it names,
  so a 1 KB "alias bomb" (anchors of lists of aliases of the anchor before: tens of millions of
  nodes once expanded, which the merge and the validation would walk) stops after the budget's
  worth; a recursive alias (a node holding an alias of itself) is an error of its own.

The walk (``_Walk``) and the reader (:meth:`ConfigReader.read_text`) check all of these, with one
test of what a path is (``_kind``) for a folder's entries and a file read alike; each error is a
``ConfigError`` naming the file (and the line, for YAML) and the limit.
``tests/unit/test_config_limits.py`` holds a case of each.

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
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from guardcache.config.errors import Loc, format_loc, show
from guardcache.errors import ConfigError

logger = logging.getLogger(__name__)

_MERGE_TAG = "tag:yaml.org,2002:merge"

MAX_FILE_BYTES = 1024 * 1024
"""The largest config file read (YAML, Colang, ``.railsignore``), and the largest ``from_content``
text: config files are a few KB (NeMo's largest prompts files are tens of KB)."""
MAX_TOTAL_BYTES = 4 * 1024 * 1024
"""The most bytes one config load reads from all its files together."""
MAX_DEPTH = 32
"""The deepest folder level walked below a config folder."""
MAX_ENTRIES = 1_000
"""The most files and folders a config folder may hold (all of them, read or not)."""
MAX_YAML_DEPTH = 32
"""The deepest nesting of mappings and lists in a YAML document (NeMo's configs nest about 6)."""
MAX_YAML_NODES = 20_000
"""The most YAML nodes (mappings, lists, keys, values) one config load composes, every alias counted
as a copy of the node it names (NeMo's configs have a few hundred)."""

YAML_SUFFIXES = (".yml", ".yaml")
COLANG_SUFFIX = ".co"
RAILSIGNORE = ".railsignore"
KB_PREFIX = "kb"


@dataclass(frozen=True, slots=True)
class ConfigLimits:
    """What one config load may read (see the module docstring); each field defaults to the
    module constant of its name (``MAX_FILE_BYTES``...). A platform that loads configs it did not
    write can pass tighter ones to ``RailsConfig.from_path``/``from_content``."""

    file_bytes: int = MAX_FILE_BYTES
    total_bytes: int = MAX_TOTAL_BYTES
    entries: int = MAX_ENTRIES
    folder_depth: int = MAX_DEPTH
    yaml_depth: int = MAX_YAML_DEPTH
    yaml_nodes: int = MAX_YAML_NODES

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ConfigLimits.{item.name} must be a positive integer (got {value!r})")


DEFAULT_LIMITS = ConfigLimits()


def _size_text(size: int) -> str:
    """A size as an operator reads it in an error (``0.6 KB``, ``50 MB``)."""
    if size < 1024 * 1024:
        return f"{round(size / 1024, 1):g} KB"
    return f"{round(size / (1024 * 1024), 1):g} MB"


def _kind(mode: int) -> str:
    """What a path that is no regular file is, for its error: the one test of a path's kind, which
    the walk (a folder's entries) and the reader (a file read) share."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


class _OverBudget(ConfigError):
    """A load over its ``total_bytes``: raised, never kept as a file's reason to be unreadable."""


class _LimitExceeded(Exception):
    """A YAML document over a limit, raised while it is composed (``mark``: where)."""

    def __init__(self, message: str, mark: Any) -> None:
        super().__init__(message)
        self.message = message
        self.mark = mark


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


class _BoundedLoader(_StrictLoader):
    """The strict loader, counting as it composes: nodes (an alias as many as the node it names:
    what it expands to wherever the document is walked) and the nesting of mappings and lists.

    The counts are taken in ``compose_node``, before a node's children are composed and before
    anything is constructed, so a document over a limit costs only the part read up to it. PyYAML's
    composer is recursive, so the depth limit also keeps a deeply nested document from ending in a
    ``RecursionError``.
    """

    def __init__(self, stream: str, *, max_depth: int, max_nodes: int, used_nodes: int) -> None:
        super().__init__(stream)
        self.max_depth = max_depth
        self.max_nodes = max_nodes
        self.nodes = used_nodes
        self.aliases = 0
        self._depth = 0  # mappings and lists open around the node being composed
        self._deepest = 0  # the deepest level reached in the collection being composed
        self._sizes: dict[str, tuple[int, int]] = {}  # anchor -> (nodes, levels) when expanded

    def _count(self, nodes: int, mark: Any) -> None:
        self.nodes += nodes
        if self.nodes > self.max_nodes:
            expanded = f", {self.aliases} aliases expanded" if self.aliases else ""
            raise _LimitExceeded(
                f"more than {self.max_nodes} YAML nodes{expanded} (the limit for a config: "
                "config files hold a few hundred; with aliases, is this an alias bomb?)",
                mark,
            )

    def _reach(self, level: int, mark: Any) -> None:
        if level > self.max_depth:
            raise _LimitExceeded(
                f"mappings and lists nested more than {self.max_depth} levels deep (the limit for a "
                "config: config files nest a few levels)",
                mark,
            )
        self._deepest = max(self._deepest, level)

    def compose_node(self, parent: Any, index: Any) -> Any:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            size = self._sizes.get(event.anchor) if event.anchor is not None else None
            if size is None and event.anchor in self.anchors:
                raise _LimitExceeded(
                    f"a recursive alias: *{event.anchor} is part of the node &{event.anchor} names, "
                    "so it would expand forever (a config is a tree)",
                    event.start_mark,
                )
            if size is not None:
                self.aliases += 1
                self._count(size[0], event.start_mark)
                self._reach(self._depth + size[1], event.start_mark)
            return super().compose_node(parent, index)  # PyYAML's own error for an unknown alias
        collection = isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent)
        before, outer = self.nodes, self._deepest
        self._count(1, event.start_mark)
        if collection:
            self._depth += 1
            self._deepest = self._depth
            self._reach(self._depth, event.start_mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            if collection:
                self._depth -= 1
        levels = self._deepest - self._depth if collection else 0
        self._deepest = max(outer, self._deepest)
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._sizes[anchor] = (self.nodes - before, levels)
        return node


def _yaml_error(exc: yaml.YAMLError, name: str) -> ConfigError:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "cannot parse"
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        return ConfigError(f"{name}: {where}invalid YAML: {problem}")
    return ConfigError(f"{name}: invalid YAML: {exc}")


class ConfigReader:
    """The one way a config is read: files, texts and YAML, counted against one load's
    :class:`ConfigLimits` (see the module docstring). One reader per load: its byte and node counts
    are the load's."""

    def __init__(self, limits: ConfigLimits | None = None) -> None:
        self.limits = limits if limits is not None else DEFAULT_LIMITS
        self.bytes_read = 0
        self.nodes = 0

    def _over_file(self, size: int) -> str:
        return (
            f"{_size_text(size)} ({size} bytes), over the {_size_text(self.limits.file_bytes)} limit "
            "for a config file (config files are a few KB; is this the right file?)"
        )

    def check_size(self, name: str | Path, size: int, planned: int = 0) -> None:
        """Refuse a file of ``size`` bytes over ``file_bytes``, or one that would bring the load
        over ``total_bytes`` (``planned``: bytes found to read later, which count already: the walk
        adds up the YAML files' sizes and refuses a folder over the limit before any of them is
        parsed)."""
        if size > self.limits.file_bytes:
            raise ConfigError(f"{name}: {self._over_file(size)}")
        total = self.bytes_read + planned + size
        if total > self.limits.total_bytes:
            raise _OverBudget(
                f"{name}: {_size_text(size)} more would bring this config's files to "
                f"{_size_text(total)} ({total} bytes), over the {_size_text(self.limits.total_bytes)} "
                "limit for one config's files together (config files are a few KB; is this the right "
                "folder?)"
            )

    def _take(self, name: str | Path, size: int) -> None:
        """Count ``size`` more bytes of the load, or refuse them (before they are read)."""
        self.check_size(name, size)
        self.bytes_read += size

    def text(self, text: str, name: str) -> str:
        """An in-memory document (``from_content``), held to the limits of a file of its size."""
        if len(text) > self.limits.file_bytes:  # every character is at least a byte: no encoding
            raise ConfigError(f"{name}: {self._over_file(len(text))}")
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > self.limits.file_bytes:
            raise ConfigError(f"{name}: {self._over_file(size)}")
        self._take(name, size)
        return text

    def read_text(self, path: Path) -> str:
        """Read a config file as UTF-8 text, with errors that name it.

        The file must be a regular file of at most ``file_bytes`` (and within the load's
        ``total_bytes``), checked before anything is read; NUL bytes and invalid UTF-8 are errors.
        Line endings are read as Python's text mode (and NeMo) reads them: ``\\r\\n`` and ``\\r``
        are ``\\n``.
        """
        limit = self.limits.file_bytes
        try:
            info = os.stat(path)
        except FileNotFoundError:
            if os.path.islink(path):
                raise ConfigError(
                    f"{path}: a broken symbolic link (to {os.readlink(path)}): the file it names does "
                    "not exist"
                ) from None
            raise ConfigError(f"{path}: no such file") from None
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{path}: cannot read: {_kind(info.st_mode)}, not a config file")
        if info.st_size > limit:
            raise ConfigError(f"{path}: {self._over_file(info.st_size)}")
        self._take(path, info.st_size)
        try:
            # O_NONBLOCK: if the path was swapped for a FIFO since the stat, the open does not hang.
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    raise ConfigError(f"{path}: cannot read: not a regular file, not a config file")
                # The size the stat gave, and a byte more to see a file that grew (then read on, up
                # to the limit): read(limit + 1) would allocate the limit for every small file.
                data = f.read(info.st_size + 1)
                if len(data) > info.st_size:
                    data += f.read(limit + 1 - len(data))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
        if len(data) > limit:
            raise ConfigError(
                f"{path}: over the {_size_text(limit)} limit for a config file (it grew while read)"
            )
        if len(data) > info.st_size:  # grew since the stat: count what was read
            self._take(path, len(data) - info.st_size)
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

    def parse_yaml(self, text: str, name: str) -> Any:
        """Parse YAML text within the limits; errors become ``<name>: line L, column C: <problem>``."""
        loader = _BoundedLoader(
            text,
            max_depth=self.limits.yaml_depth,
            max_nodes=self.limits.yaml_nodes,
            used_nodes=self.nodes,
        )
        try:
            return loader.get_single_data()  # a SafeLoader subclass: no arbitrary objects
        except _LimitExceeded as exc:
            mark = exc.mark
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
            raise ConfigError(f"{name}: {where}{exc.message}") from None
        except yaml.YAMLError as exc:
            raise _yaml_error(exc, name) from None
        finally:
            self.nodes = loader.nodes
            loader.dispose()

    def parse_mapping(self, text: str, name: str) -> dict[str, Any]:
        """Parse YAML whose top level must be a mapping of keys; an empty document is an empty
        mapping."""
        data = self.parse_yaml(text, name)
        if data is None:
            return {}
        if not isinstance(data, dict):
            kind = "a list" if isinstance(data, list) else f"a {type(data).__name__} ({show(data)})"
            raise ConfigError(f"{name}: the top level must be a mapping of keys (got {kind})")
        return data

    def read_mapping(self, path: Path) -> dict[str, Any]:
        """A YAML file's top-level mapping (:meth:`read_text`, then :meth:`parse_mapping`)."""
        return self.parse_mapping(self.read_text(path), str(path))


def parse_yaml(text: str, name: str, *, limits: ConfigLimits | None = None) -> Any:
    """Parse YAML text (one document, within ``limits``); errors name ``name``."""
    return ConfigReader(limits).parse_yaml(text, name)


def parse_mapping(text: str, name: str, *, limits: ConfigLimits | None = None) -> dict[str, Any]:
    """Parse YAML whose top level must be a mapping (see :meth:`ConfigReader.parse_mapping`)."""
    return ConfigReader(limits).parse_mapping(text, name)


def read_text(path: Path, *, limits: ConfigLimits | None = None) -> str:
    """Read one config file (see :meth:`ConfigReader.read_text`)."""
    return ConfigReader(limits).read_text(path)


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
    def read(cls, path: Path, name: str, reader: ConfigReader | None = None) -> ColangFile:
        """Read the file's flow definitions (a file that cannot be read lists none, and says why);
        ``reader`` counts its bytes into a load's."""
        try:
            text = (reader or ConfigReader()).read_text(path)
        except _OverBudget:
            raise  # the load is over its limit: no more reading, of this file or any other
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


def railsignore_patterns(path: Path, reader: ConfigReader | None = None) -> list[str]:
    """The patterns of a ``.railsignore``: each stripped line, except blank ones and those starting
    with ``#`` (as NeMo reads it: a ``#`` after leading spaces is part of a pattern)."""
    patterns: list[str] = []
    for line in (reader or ConfigReader()).read_text(path).split("\n"):
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

    def __init__(self, root: Path, patterns: list[str], found: ConfigFiles, reader: ConfigReader) -> None:
        self.root = root
        self.patterns = patterns
        self.found = found
        self.reader = reader
        self.limits = reader.limits
        self.entries = 0
        self.seen: dict[tuple[int, int], Path] = {}
        self.yaml_bytes = 0  # the YAML files found so far: read after the walk, counted now

    def folder(self, folder: Path, rel: tuple[str, ...], ancestors: tuple[tuple[int, int], ...]) -> None:
        limit = self.limits.folder_depth
        if len(rel) > limit:
            raise ConfigError(
                f"{folder}: more than {limit} folder levels below the config folder {self.root} "
                "(the limit for a config folder: a config folder is a few files)"
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
        files: dict[str, int] = {}  # name -> size
        subfolders: list[str] = []
        try:
            with os.scandir(folder) as it:
                for entry in it:  # counted as listed: a huge folder is refused, not listed whole
                    self.entries += 1
                    if self.entries > self.limits.entries:
                        raise ConfigError(
                            f"{self.root}: more than {self.limits.entries} files and folders under the "
                            f"config folder (the limit for a config folder, reached while listing "
                            f"{folder}); is this the right folder? (NeMo Guardrails would walk them "
                            "all: keep a config in a folder of its own)"
                        )
                    size = self._size(folder, entry)
                    if size is None:
                        subfolders.append(entry.name)
                    else:
                        files[entry.name] = size
        except OSError as exc:
            raise ConfigError(f"{folder}: cannot list this folder ({exc.strerror or exc})") from None
        names = sorted(files)
        subfolders.sort()
        if not rel:  # config.yml (then config.yaml) first, as before
            names.sort(key=lambda n: (n not in ("config.yml", "config.yaml"), n != "config.yml", n))
        for name in names:
            self.file(folder / name, "/".join((*rel, name)), files[name])
        for name in subfolders:
            self.folder(folder / name, (*rel, name), (*ancestors, ident))

    @staticmethod
    def _size(folder: Path, entry: os.DirEntry[str]) -> int | None:
        """A file's size, None for a folder to walk (symbolic links followed, as NeMo's
        ``os.walk(followlinks=True)``). A FIFO, socket or device is an error wherever it is (a
        config folder holds files and folders: such an entry means it is not what it seems, and
        any read of it would block or never end). A broken link is a file (of size 0): an error if
        it is read."""
        try:
            info = entry.stat()
        except OSError:
            return 0
        if stat.S_ISDIR(info.st_mode):
            return None
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(
                f"{folder / entry.name}: {_kind(info.st_mode)} in a config folder, which holds files and "
                "folders only (reading it would block or never end); remove it or keep the config "
                "elsewhere"
            )
        return info.st_size

    def file(self, path: Path, rel: str, size: int) -> None:
        name = path.name
        reader = self.reader
        if _ignored(name, self.patterns):
            if name.endswith(COLANG_SUFFIX):
                self.found.skipped_colang.append(
                    (ColangFile.read(path, rel, reader), f"excluded by {self.found.railsignore}")
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
                    self.found.skipped_colang.append((ColangFile.read(path, rel, reader), why))
                logger.warning("%s: not read (%s, .md only)", path, why)
            return
        if name.endswith(YAML_SUFFIXES):
            self.reader.check_size(path, size, self.yaml_bytes)
            self.yaml_bytes += size
            self.found.yaml.append(path)
        elif name.endswith(COLANG_SUFFIX):
            self.found.colang.append(ColangFile.read(path, rel, reader))


def find_config_files(path: str | os.PathLike[str], reader: ConfigReader | None = None) -> ConfigFiles:
    """The files of a config path, as NeMo Guardrails would load them (see the module docstring),
    found within ``reader``'s limits (the Colang files read by it).

    A file path is one YAML file (or one Colang file, if it ends in ``.co``); a folder is walked.
    """
    reader = reader or ConfigReader()
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
            found.colang.append(ColangFile.read(root, root.name, reader))
        else:
            found.yaml.append(root)
        return found
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"{root}: {_kind(info.st_mode)}, not a config folder or file")
    found.railsignore = find_railsignore(root)
    patterns = railsignore_patterns(found.railsignore, reader) if found.railsignore is not None else []
    _Walk(root, patterns, found, reader).folder(root, (), ())
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


def merge_yaml(files: ConfigFiles, reader: ConfigReader | None = None) -> MergedSources:
    """Read, parse and merge the YAML files found, in their order (within ``reader``'s limits)."""
    reader = reader or ConfigReader()
    if not files.yaml:
        raise ConfigError(f"{files.root}: no config.yml (or other .yml/.yaml file) in this folder")
    sources = MergedSources(files.label)
    for path in files.yaml:
        sources.add(reader.read_mapping(path), str(path))
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
    "DEFAULT_LIMITS",
    "MAX_DEPTH",
    "MAX_ENTRIES",
    "MAX_FILE_BYTES",
    "MAX_TOTAL_BYTES",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "ColangFile",
    "ConfigFiles",
    "ConfigLimits",
    "ConfigReader",
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
