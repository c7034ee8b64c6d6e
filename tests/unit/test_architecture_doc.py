"""docs/architecture.md describes the tree as it is: every module under ``guardcache/`` is named in
its tree, and every module the tree names exists.

What is read: the first fenced block under ``## Layers`` (the tree that starts ``guardcache/``), and
nothing else of the doc (its prose may name modules that moved, to say so).

How the tree is read. An *entry* is a line indented by a multiple of two spaces (at most six: the
tree's levels) whose first word is a folder (``cache/``) or a module (``runner.py``, ``app.py,``);
every other line continues the entry above it. A folder entry opens the folder's *section*: its
own lines and those continuing it, up to the next entry at its level or above; the sections of the
folders inside it are sections of their own. The first line, ``guardcache/``, is the package's.

The matching rule:

- A module ``guardcache/<folder>/<path>.py`` is *named* when ``<path>.py`` is a word of the section
  of ``<folder>`` itself, or ``<rest>/<path>.py`` a word of the section of a folder above it
  (``redis/cli.py`` in ``cache/``'s section names ``cache/redis/cli.py``; ``cli.py`` in the section
  of ``redis/`` does too). A word is a path made of letters, digits and underscores joined by ``/``
  and ending ``.py``, not inside a longer path or name. So ``stats.py`` in ``redis/``'s section
  names ``cache/redis/stats.py``, never ``cache/stats.py``, and a mention of another folder's module
  (``rails/builder.py`` in ``config/``'s section) names nothing.
- A package's ``__init__.py`` is named by its folder's entry; every package (a folder with an
  ``__init__.py``) has one.
- Every word ending ``.py`` in the tree is a file: relative to the folder of the section it is in, a
  folder above that, or the repository root (``tests/...``, which the doc cites). A folder entry is
  a folder that exists, at its place.

A module added, moved or removed without its line in docs/architecture.md fails here, naming the
module and the folder whose section should name it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PACKAGE = "guardcache"

_ENTRY = re.compile(r"^(?P<indent>(?:  ){0,3})(?P<name>[A-Za-z_][\w.]*/|[A-Za-z_]\w*\.py)(?=[\s,:]|$)")
_WORD = re.compile(r"(?<![\w/.<>*-])((?:\w+/)*\w+\.py)(?![\w/])")


@dataclass
class Section:
    folder: str  # relative to the repository root: "guardcache", "guardcache/cache", ...
    depth: int  # the tree's level of the folder's entry (guardcache/: 0)
    line: int  # the doc's line number of the entry
    words: list[tuple[str, int]] = field(default_factory=list)  # (word, line) in this section only


def tree_block(doc: str) -> tuple[list[str], int]:
    """The lines of the tree under ``## Layers`` and the doc's line number of the first one."""
    lines = doc.splitlines()
    start = lines.index("## Layers")
    opening = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    closing = next(i for i in range(opening + 1, len(lines)) if lines[i].startswith("```"))
    block = lines[opening + 1 : closing]
    assert block and block[0] == f"{PACKAGE}/", f"the tree under ## Layers starts {PACKAGE}/"
    return block, opening + 2


def sections(doc: str) -> list[Section]:
    """The tree's folder sections, each with the words of its own lines."""
    block, first = tree_block(doc)
    root = Section(PACKAGE, 0, first)
    found = [root]
    open_: list[Section] = [root]  # the folders whose section the current line is in, outermost first
    for offset, text in enumerate(block[1:], start=1):
        number = first + offset
        entry = _ENTRY.match(text)
        if entry and entry.group("indent"):
            depth = len(entry.group("indent")) // 2
            while open_[-1].depth >= depth:  # an entry at this level ends the folders at it or below
                open_.pop()
            name = entry.group("name")
            if name.endswith("/"):
                section = Section(f"{open_[-1].folder}/{name.rstrip('/')}", depth, number)
                found.append(section)
                open_.append(section)
        open_[-1].words += [(word, number) for word in _WORD.findall(text)]
    return found


def problems(doc: str, root: Path) -> list[str]:
    """What the doc's tree and the files under ``root/guardcache`` disagree on, one line each."""
    found = sections(doc)
    named: set[str] = set()
    out: list[str] = []
    for section in found:
        if not (root / section.folder).is_dir():
            out.append(
                f"docs/architecture.md:{section.line}: the tree has a folder {section.folder}/ "
                "that does not exist"
            )
        ancestors = [section.folder]
        while "/" in ancestors[-1]:
            ancestors.append(ancestors[-1].rpartition("/")[0])
        for word, line in section.words:
            if (root / section.folder / word).is_file():
                named.add(f"{section.folder}/{word}")
            elif not any((root / folder / word).is_file() for folder in [*ancestors[1:], "."]):
                out.append(
                    f"docs/architecture.md:{line}: {word} (in the section of {section.folder}/) "
                    f"is no module: there is no {section.folder}/{word}"
                )
    folders = {section.folder for section in found}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        module, folder = path.relative_to(root).as_posix(), path.parent.relative_to(root).as_posix()
        if path.name == "__init__.py":
            if folder not in folders:
                out.append(f"{module}: the package {folder}/ has no entry in the tree")
        elif module not in named:
            out.append(
                f"{module}: not named in docs/architecture.md's tree (add it to the section of {folder}/)"
            )
    return out


# -- the doc and the tree agree ---------------------------------------------------------------------


def test_the_architecture_doc_names_every_module_and_only_modules_that_exist() -> None:
    assert problems(DOC.read_text(encoding="utf-8"), ROOT) == []


def test_the_tree_is_read_from_the_doc() -> None:
    """A reader that reads nothing passes everything: make sure it reads the real sections."""
    found = {section.folder: section for section in sections(DOC.read_text(encoding="utf-8"))}
    assert {
        "guardcache",
        "guardcache/cache",
        "guardcache/cache/redis",
        "guardcache/checks/content_safety",
    } <= set(found)
    assert "lfu_core.py" in {word for word, _ in found["guardcache/cache"].words}
    assert "clearing.py" in {word for word, _ in found["guardcache/cache/redis"].words}
    assert sum(len(section.words) for section in found.values()) > 50


# -- the checker can fail -------------------------------------------------------------------------

TREE = """\
# doc

## Layers

```
guardcache/
  __init__.py      the face
  errors.py        errors
  cache/           caches: lfu.py, stats.py
    redis/         the tier: store.py, stats.py;
                   cli.py: the command (see tests/unit/test_x.py, rails/runner.py)
  rails/           the runtime
    runner.py        the runner
```

## Later

prose may name gone.py, as history
"""

FILES = [
    "guardcache/__init__.py",
    "guardcache/errors.py",
    "guardcache/cache/__init__.py",
    "guardcache/cache/lfu.py",
    "guardcache/cache/stats.py",
    "guardcache/cache/redis/__init__.py",
    "guardcache/cache/redis/store.py",
    "guardcache/cache/redis/stats.py",
    "guardcache/cache/redis/cli.py",
    "guardcache/rails/__init__.py",
    "guardcache/rails/runner.py",
    "tests/unit/test_x.py",
]


def tree(root: Path, files: list[str]) -> Path:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("", encoding="utf-8")
    return root


def test_a_doc_that_names_the_tree_passes(tmp_path: Path) -> None:
    assert problems(TREE, tree(tmp_path, FILES)) == []


@pytest.mark.parametrize(
    ("files", "doc", "expected"),
    [
        (
            [*FILES, "guardcache/cache/keys.py"],
            TREE,
            "guardcache/cache/keys.py: not named in docs/architecture.md's tree (add it to the section of "
            "guardcache/cache/)",
        ),
        (
            [f for f in FILES if f != "guardcache/cache/stats.py"],  # named only in redis/: not cache's
            TREE.replace("lfu.py, stats.py", "lfu.py"),
            "",
        ),
        (
            [*FILES, "guardcache/llm/__init__.py"],
            TREE,
            "guardcache/llm/__init__.py: the package guardcache/llm/ has no entry in the tree",
        ),
        (
            [f for f in FILES if f != "guardcache/rails/runner.py"],
            TREE.replace("    runner.py        the runner\n", ""),
            "docs/architecture.md:11: rails/runner.py (in the section of guardcache/cache/redis/) is no",
        ),
        (
            FILES,
            TREE.replace("lfu.py, stats.py", "lfu.py, stats.py, gone.py"),
            "docs/architecture.md:9: gone.py (in the section of guardcache/cache/) is no module",
        ),
        (
            [*FILES, "guardcache/cache/gone.py"],
            TREE.replace("lfu.py, stats.py", "lfu.py, stats.py, gone.py").replace(
                "  errors.py ", "  errs.py   "
            ),
            "docs/architecture.md:8: errs.py (in the section of guardcache/) is no module",
        ),
        (
            FILES,
            TREE.replace("  rails/   ", "  rail/    "),
            "docs/architecture.md:12: the tree has a folder guardcache/rail/ that does not exist",
        ),
    ],
    ids=["unnamed", "nested-name-is-not-the-parents", "package", "reference", "gone", "renamed", "folder"],
)
def test_a_doc_and_a_tree_that_disagree_fail_naming_what(
    tmp_path: Path, files: list[str], doc: str, expected: str
) -> None:
    found = problems(doc, tree(tmp_path, files))
    if not expected:
        assert found == [], found
        return
    assert any(line.startswith(expected) for line in found), found


def test_a_bare_name_in_a_folders_section_does_not_name_its_parents_module(tmp_path: Path) -> None:
    found = problems(TREE.replace("lfu.py, stats.py", "lfu.py"), tree(tmp_path, FILES))
    assert found == [
        "guardcache/cache/stats.py: not named in docs/architecture.md's tree (add it to the section of "
        "guardcache/cache/)"
    ]
