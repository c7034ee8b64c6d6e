"""The Python snippets of the README and of the user docs (``docs/*.md``) run as written.

Every ```python block must compile (no top-level ``await``, no placeholders), and every block not
marked ``<!-- snippet: compile only (why) -->`` runs from the repository's root as its own process,
against what the README tells the reader to start: ``guardcache emulate`` on its default port, and
``guardcache serve --config examples/quickstart/config`` for a snippet that calls the server. A
snippet holding ``async def test_...`` functions (the "Testing your app" example) runs under pytest,
as the reader would run it: a pytest session of its own (``pytester.inline_run``: its own config,
plugins and event loop, from the repository's root), in this process, since what it shows is that
the test passes under pytest, not how an interpreter starts (the other snippets show that).
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from guardcache.server.cli import DEFAULT_PORT as SERVE_PORT
from tests.integration.quickstart_support import (
    ROOT,
    Quickstart,
    emulator,
    quickstart,
    run_python,
    server,
)

README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]  # every Markdown file a user reads
BLOCK = re.compile(
    r"(?:<!-- snippet: (?P<mode>[^\n]*?) -->\n)?```python\n(?P<code>.*?)^```", re.DOTALL | re.M
)


@dataclass(frozen=True)
class Snippet:
    file: str  # relative to the repository's root
    line: int  # of the block's first code line in that file
    code: str
    mode: str  # "run", or "compile only (why)"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


def snippets(path: Path) -> list[Snippet]:
    text = path.read_text(encoding="utf-8")
    name = path.relative_to(ROOT).as_posix()
    return [
        Snippet(name, text.count("\n", 0, m.start("code")) + 1, m.group("code"), m.group("mode") or "run")
        for m in BLOCK.finditer(text)
    ]


SNIPPETS = [s for path in DOCS for s in snippets(path)]
RUNNABLE = [s for s in SNIPPETS if s.mode == "run"]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_python_block_is_found(path: Path) -> None:
    # A block this file's pattern misses (a typo in the marker, an indented fence) would go unchecked.
    assert len(snippets(path)) == path.read_text(encoding="utf-8").count("```python")


def test_the_docs_have_the_snippets_this_file_checks() -> None:
    assert len(SNIPPETS) >= 6
    # the API and the server's client (README), the cache and RunnableRails (docs/python-api.md),
    # testing an app (docs/testing.md)
    assert len(RUNNABLE) >= 5
    assert sum(s.file == "README.md" for s in RUNNABLE) >= 2
    assert all(s.mode.startswith("compile only (") for s in SNIPPETS if s not in RUNNABLE)


@pytest.mark.parametrize("snippet", SNIPPETS, ids=str)
def test_every_python_snippet_compiles(snippet: Snippet) -> None:
    """It compiles (top-level await is a SyntaxError here), and every name it imports from guardcache
    exists: a compile-only snippet is never run, so a moved or renamed name would go unnoticed."""
    code = compile(snippet.code, str(snippet), "exec", flags=ast.PyCF_ONLY_AST)
    for node in ast.walk(code):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "guardcache":
            module = importlib.import_module(node.module or "")
            missing = [alias.name for alias in node.names if not hasattr(module, alias.name)]
            assert not missing, f"{snippet}:{node.lineno}: {node.module} has no {', '.join(missing)}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "guardcache":
                    importlib.import_module(alias.name)
    assert compile(code, str(snippet), "exec").co_filename == str(snippet)


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quickstart]:
    """``guardcache emulate``, as the snippets expect it (on its default port when free)."""
    tmp = tmp_path_factory.mktemp("snippets")
    with quickstart(tmp) as qs, emulator(qs, tmp / "emulate.log"):
        yield qs


@pytest.fixture(scope="module")
def served(started: Quickstart, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quickstart]:
    """``guardcache serve --config examples/quickstart/config`` too, on its default port."""
    with server(started, tmp_path_factory.mktemp("serve") / "serve.log"):
        yield started


@pytest.mark.parametrize("snippet", RUNNABLE, ids=str)
def test_the_snippet_runs(snippet: Snippet, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    needs_server = f"127.0.0.1:{SERVE_PORT}" in snippet.code
    qs: Quickstart = request.getfixturevalue("served" if needs_server else "started")
    path = tmp_path / f"snippet_{Path(snippet.file).stem.replace('-', '_')}_line_{snippet.line}.py"
    path.write_text(qs.as_written(snippet.code), encoding="utf-8")
    if re.search(r"^(async )?def test_", snippet.code, re.M):
        pytester: pytest.Pytester = request.getfixturevalue("pytester")
        monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
        monkeypatch.chdir(ROOT)  # where the reader runs it (its paths are relative to the root)
        for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
            monkeypatch.delenv(name, raising=False)  # an xdist worker's (.ci/run), not the reader's
        argv = [str(path), "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "-o", "asyncio_mode=auto"]
        # (the fixture loop scope set, or pytest-asyncio's warning that it is not lands in this run's)
        result = pytester.inline_run(*argv, "-o", "asyncio_default_fixture_loop_scope=function")
        passed, skipped, failed = result.listoutcomes()
        failures = [str(r.longrepr) for r in [*failed, *result.getfailedcollections()]]
        assert result.ret == 0, f"{snippet} failed:\n" + "\n".join(failures)
        assert (len(passed), skipped) == (1, []), result.listoutcomes()
        return
    proc = run_python([str(path)])
    assert proc.returncode == 0, f"{snippet} failed:\n{proc.stdout}\n{proc.stderr}"
