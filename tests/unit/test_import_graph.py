"""guardcache's layers, enforced over its import graph (docs/architecture.md, "Layers").

Every ``guardcache/**/*.py`` is parsed with ``ast``; each ``guardcache`` import in it (at the top or
inside a function, absolute or relative) is an edge from the module's unit to the imported module's
unit. A unit is a top-level package or module (``cache``, ``config``, ``cli``): the folders match
the layers, with no module placed apart from its folder (the checks' flows are data in ``flows``,
below the config; the ``guardcache cache`` command lives in ``commands``, above what it reads). A
module may import its own unit freely and any unit of a LOWER layer; importing a unit of its own
layer (peers) or of a higher one is a violation, reported with the file, line, module and import. A
module of an undeclared unit is a violation too: a new package gets a place in ``LAYERS`` (and in
docs/architecture.md) before it is used.

Imports under ``if TYPE_CHECKING:`` are exempt from the layers: they are never executed. They are
not exempt from the second rule, no circles between modules (:func:`circles`): a type named across a
circle still ties the two modules together (one cannot be read, moved or tested without the other),
so what both need gets one home below them. Imports by name at run
time (``importlib.import_module``: the CLI's subcommands, the checks' catalog loading its folders'
``parsers`` and ``check``) are not seen; both load modules the layering allows.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "guardcache"

LAYERS: tuple[tuple[str, ...], ...] = (
    # leaves: each imports nothing else of guardcache
    ("errors", "flows", "generation", "language", "cache", "tracing", "openai_wire"),
    ("llm",),  # the OpenAI-compatible client and per-request call records
    ("prompts",),  # rendering templates; the shipped NemoGuard prompts as data
    ("config",),  # the pydantic boundary: validates flows against their specs, selects prompts
    ("checks",),  # the checks' runtime: normalize -> key -> cache -> render -> call -> parse
    ("rails",),  # LLMRails and the runtime around the checks
    ("guardcache",),  # guardcache/__init__.py: the public face
    ("emulator",),  # tools on top of the library
    ("demo", "testing", "commands", "server"),  # tools and commands
    ("cli",),  # `guardcache <command>`
    ("__main__",),  # `python -m guardcache`
)
"""Lowest first. Units in one tuple are peers: neither imports the other."""


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the guardcache module (or package) it imports
    path: Path
    line: int


def modules_of(root: Path) -> dict[str, Path]:
    """Every module under ``root/guardcache``: dotted name -> file (a package is its ``__init__``)."""
    found: dict[str, Path] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Collector(ast.NodeVisitor):
    """The guardcache imports of one module, resolved to module names (``TYPE_CHECKING`` skipped
    unless ``type_checking``)."""

    def __init__(self, module: str, is_package: bool, known: set[str], type_checking: bool = False) -> None:
        self.package = module if is_package else module.rpartition(".")[0]
        self.known = known
        self.type_checking = type_checking
        self.found: list[tuple[str, int]] = []

    def _resolve(self, name: str) -> str:
        """The longest known module ``name`` starts with (``guardcache.x.Attr`` -> ``guardcache.x``)."""
        while name not in self.known and "." in name:
            name = name.rpartition(".")[0]
        return name

    def _add(self, name: str, line: int) -> None:
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            self.found.append((self._resolve(name), line))

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test) and not self.type_checking:
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            source = ".".join([*base, *([node.module] if node.module else [])])
        else:
            source = node.module or ""
        for alias in node.names:
            submodule = f"{source}.{alias.name}"  # ``from guardcache import language`` is a module
            self._add(submodule if submodule in self.known else source, node.lineno)


def imports_of(root: Path, type_checking: bool = False) -> list[Import]:
    """Every guardcache import of every module under ``root/guardcache`` (with those under
    ``if TYPE_CHECKING:`` when ``type_checking``)."""
    modules = modules_of(root)
    known = set(modules)
    out: list[Import] = []
    for module, path in modules.items():
        collector = _Collector(module, path.name == "__init__.py", known, type_checking)
        collector.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        out += [Import(module, target, path, line) for target, line in collector.found]
    return out


def unit_of(module: str) -> str:
    """The unit a module belongs to: its top-level package or module (see the module docstring)."""
    parts = module.split(".")
    return PACKAGE if len(parts) == 1 else parts[1]


def violations(root: Path, layers: tuple[tuple[str, ...], ...] = LAYERS) -> list[str]:
    """What goes against ``layers`` under ``root/guardcache``, one line per offending import."""
    rank = {unit: i for i, layer in enumerate(layers) for unit in layer}
    modules = modules_of(root)
    problems = [
        f"{path.relative_to(root)}: module {module} is in unit {unit_of(module)!r}, which "
        "has no layer: add it to LAYERS in tests/unit/test_import_graph.py and to docs/architecture.md"
        for module, path in modules.items()
        if unit_of(module) not in rank
    ]
    for imp in imports_of(root):
        src, dst = unit_of(imp.module), unit_of(imp.target)
        if src == dst or src not in rank or dst not in rank or rank[dst] < rank[src]:
            continue
        why = "a peer of the same layer" if rank[dst] == rank[src] else "a higher layer"
        problems.append(
            f"{imp.path.relative_to(root)}:{imp.line}: {imp.module} (unit {src!r}) imports {imp.target} "
            f"(unit {dst!r}, {why}): imports go one way, down the layers"
        )
    return list(dict.fromkeys(problems))  # ``from x import a, b`` is one line, reported once


def circles(root: Path) -> list[list[str]]:
    """Groups of modules under ``root/guardcache`` that import one another round a circle, counting
    ``TYPE_CHECKING`` imports (Tarjan's strongly connected components of the module graph)."""
    graph: dict[str, set[str]] = {module: set() for module in modules_of(root)}
    for imp in imports_of(root, type_checking=True):
        if imp.target != imp.module:
            graph[imp.module].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:  # recursion depth: the longest import chain, a few dozen
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(group) > 1:
                found.append(sorted(group))

    for module in graph:
        if module not in index:
            visit(module)
    return sorted(found)


# -- the rule holds for guardcache ----------------------------------------------------------------


def test_guardcache_imports_go_one_way_down_the_layers() -> None:
    assert violations(ROOT) == []


def test_no_module_imports_round_a_circle() -> None:
    """llm/pool.py <-> h1_pool.py, llm/client.py <-> stream.py, server/app.py <-> routes.py and
    rails/llmrails.py <-> runnable.py, streaming.py were circles: the shared lanes, limits and TLS
    context live in llm/lanes.py, a stream reads its client through a protocol, the server's state
    and body reading in server/state.py and server/body_limits.py, and the rails' turn in rails/runner.py."""
    assert circles(ROOT) == []


def test_the_rails_faces_sit_on_the_runner() -> None:
    """The rails' modules are in the graph the circle check walks (function-level and TYPE_CHECKING
    imports too), and their faces import one way: RunnableRails (as NeMo's) holds an LLMRails, never
    the reverse, and a stream is a turn of the runner, not of an LLMRails."""
    edges = {(i.module, i.target) for i in imports_of(ROOT, type_checking=True)}

    def imports(module: str, target: str) -> bool:
        return any(m == module and (t == target or t.startswith(target + ".")) for m, t in edges)

    assert imports("guardcache.rails.llmrails", "guardcache.rails.runner")  # the graph has the rails
    assert not imports("guardcache.rails.llmrails", "guardcache.rails.runnable")
    assert not imports("guardcache.rails.streaming", "guardcache.rails.llmrails")


def test_the_graph_is_read_from_every_module() -> None:
    """A checker that reads nothing passes everything: make sure it reads the real edges."""
    edges = {(i.module, i.target) for i in imports_of(ROOT)}
    assert ("guardcache.config.rails", "guardcache.flows") in edges  # the flows the config validates
    assert ("guardcache.rails.runner", "guardcache.language") in edges  # from guardcache import x
    assert ("guardcache.emulator.for_config", "guardcache.emulator.server") in edges  # relative
    assert len(edges) > 200


def test_no_module_is_placed_apart_from_its_folder() -> None:
    """The check folders and the commands once sat apart from their folders' layers (the checks'
    flows below the config, ``cache/redis/cli.py`` at the top), through exception lists here: now a
    module's unit is its folder, and the config reaches no check to know the flows."""
    edges = {(unit_of(i.module), i.target) for i in imports_of(ROOT)}
    assert not any(src == "config" and target.startswith("guardcache.checks") for src, target in edges)
    assert not any(src == "cache" and target.startswith("guardcache.config") for src, target in edges)
    assert "guardcache.commands.cache" in modules_of(ROOT)
    # the rails builder knows no check: a check folder (checks/<name>/) names its builder
    builder = {i.target for i in imports_of(ROOT) if i.module == "guardcache.rails.builder"}
    assert "guardcache.checks.catalog" in builder
    assert not [t for t in builder if t.startswith("guardcache.checks.") and t.count(".") > 2]


# -- the checker can fail -------------------------------------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / PACKAGE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


GOOD = {
    "__init__.py": "from guardcache.rails import LLMRails\n",
    "errors.py": "",
    "language.py": "",
    "cache/__init__.py": "",
    "llm/__init__.py": "from guardcache.errors import X\n",
    "prompts/__init__.py": "",
    "flows/__init__.py": "from guardcache.flows import spec\n",
    "flows/spec.py": "",
    "config/__init__.py": "from guardcache.flows import KNOWN_FLOWS\nfrom guardcache.prompts import render\n",
    "checks/__init__.py": "",
    "checks/catalog.py": "from guardcache.checks.verdict import Verdict\nfrom guardcache.config import X\n",
    "checks/verdict.py": "from guardcache.llm import Usage\n",
    "checks/check.py": "from guardcache.config import RailsConfig\nfrom .verdict import Verdict\n",
    "rails/__init__.py": (
        "from guardcache import language\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from guardcache.testing import anything\n"
    ),
}


def test_a_tree_that_follows_the_layers_passes(tmp_path: Path) -> None:
    assert violations(_tree(tmp_path, GOOD)) == []


@pytest.mark.parametrize(
    ("file", "text", "expected"),
    [
        # a leaf importing upward, inside a function
        (
            "cache/lfu.py",
            "def f():\n    from guardcache.rails import LLMRails\n",
            "guardcache/cache/lfu.py:2: guardcache.cache.lfu (unit 'cache') imports guardcache.rails "
            "(unit 'rails', a higher layer)",
        ),
        # peers: the cache imports nothing else of guardcache, not even the errors
        ("cache/keys.py", "import guardcache.errors\n", "imports guardcache.errors (unit 'errors', a peer"),
        # relative: prompts must not reach the config
        (
            "prompts/render.py",
            "from ..config import fields\n",
            "guardcache.prompts.render (unit 'prompts') imports guardcache.config",
        ),
        # the flows are data: they must not load the checks' runtime
        (
            "flows/content_safety.py",
            "from guardcache.checks.check import LLMCheck\n",
            "(unit 'flows') imports guardcache.checks.check (unit 'checks', a higher layer)",
        ),
        # the config validates against the flows, never the checks
        (
            "config/rails.py",
            "from guardcache.checks import catalog\n",
            "guardcache.config.rails (unit 'config') imports guardcache.checks.catalog (unit 'checks'",
        ),
        # the library must not import its public face (a cycle through guardcache/__init__.py)
        ("rails/llmrails.py", "from guardcache import LLMRails\n", "imports guardcache (unit 'guardcache'"),
        # an else branch of TYPE_CHECKING runs
        (
            "llm/client.py",
            "import typing\nif typing.TYPE_CHECKING:\n    pass\nelse:\n    import guardcache.config\n",
            "guardcache/llm/client.py:5: guardcache.llm.client (unit 'llm') imports guardcache.config",
        ),
        # a package nobody placed
        ("plugins/__init__.py", "", "module guardcache.plugins is in unit 'plugins', which has no layer"),
    ],
)
def test_an_import_against_the_layers_fails_naming_module_and_import(
    tmp_path: Path, file: str, text: str, expected: str
) -> None:
    problems = violations(_tree(tmp_path, {**GOOD, file: text}))
    assert len(problems) == 1, problems
    assert expected in problems[0]


def test_a_circle_through_a_type_checking_import_is_found(tmp_path: Path) -> None:
    base = {**GOOD, "rails/__init__.py": "from guardcache import language\n"}
    assert circles(_tree(tmp_path / "base", base)) == []
    files = {
        **base,
        "llm/client.py": "from guardcache.llm.stream import read\n",
        "llm/stream.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from guardcache.llm.client import C\n"
        ),
    }
    root = _tree(tmp_path / "circle", files)
    assert violations(root) == []  # the layers exempt it...
    assert circles(root) == [["guardcache.llm.client", "guardcache.llm.stream"]]  # ...the circles do not


def test_a_circle_among_the_rails_modules_is_found(tmp_path: Path) -> None:
    """What tests/unit/test_rails_runner.py's own detector used to look for: two rails modules that
    import each other, one relatively and one only for its types."""
    base = {**GOOD, "rails/__init__.py": "from guardcache import language\n"}
    files = {
        **base,
        "rails/llmrails.py": "from .runnable import RunnableRails\n",
        "rails/runnable.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from guardcache.rails import llmrails\n"
        ),
    }
    assert circles(_tree(tmp_path, files)) == [["guardcache.rails.llmrails", "guardcache.rails.runnable"]]
