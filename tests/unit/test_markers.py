"""``pytest -m "not integration"`` selects exactly the unit tests and deselects every integration test.

The suite is collected again with the filter (collection only, nothing runs), in this process: a
fresh pytest session (``pytester.inline_run``: its own config, plugin manager and hooks, the marks
set by ``tests/conftest.py`` and the ``-m`` deselection as on the command line) whose hook calls say
what was selected and what ``-m`` deselected, so both sides are checked in one run. The modules it
imports are mostly imported already, which is what makes it cheap; a child interpreter would prove
nothing more about the selection and cost a whole cold collection.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_not_integration_selects_the_unit_tests_and_deselects_the_integration_tests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # as on the command line: from the checkout's root, its pyproject.toml
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)  # an xdist worker's, not the inner session's
    result = pytester.inline_run(
        "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "not integration", "tests"
    )
    assert result.ret == 0 and not result.getfailedcollections(), result.getfailedcollections()[:3]
    [finish] = result.getcalls("pytest_collection_finish")
    selected = {item.nodeid for item in finish.session.items}
    deselected = {item.nodeid for call in result.getcalls("pytest_deselected") for item in call.items}
    assert selected and deselected
    assert not selected & deselected
    assert all(node.startswith("tests/unit/") for node in selected), sorted(selected)[:5]
    assert all(node.startswith("tests/integration/") for node in deselected), sorted(deselected)[:5]
    in_tree = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")}
    assert {node.split("::")[0] for node in selected | deselected} == in_tree  # every module collected
