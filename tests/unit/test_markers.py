"""``pytest -m "not integration"`` selects exactly the unit tests and deselects every integration test.

One child pytest collects the suite with the filter (collection only, nothing runs); a small plugin
reports what ``-m`` deselected, so both sides are checked in one run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

REPORTER = """
def pytest_deselected(items):
    for item in items:
        print("DESELECTED", item.nodeid)
"""


def test_not_integration_selects_the_unit_tests_and_deselects_the_integration_tests(tmp_path: Path) -> None:
    (tmp_path / "deselected_reporter.py").write_text(REPORTER, encoding="utf-8")
    path = [str(ROOT), str(tmp_path), os.environ.get("PYTHONPATH", "")]  # this checkout first
    argv = ["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "deselected_reporter"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *argv, "-m", "not integration", "tests"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    deselected = {line.split(" ", 1)[1] for line in lines if line.startswith("DESELECTED ")}
    selected = {line for line in lines if "::" in line and not line.startswith("DESELECTED ")}
    assert selected and deselected
    assert all(node.startswith("tests/unit/") for node in selected), sorted(selected)[:5]
    assert all(node.startswith("tests/integration/") for node in deselected), sorted(deselected)[:5]
    in_tree = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")}
    assert {node.split("::")[0] for node in selected | deselected} == in_tree  # every module collected
