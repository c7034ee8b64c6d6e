"""Suite-wide settings.

In CI (``CI=true``) hypothesis runs derandomized: the same examples every run, so a red build always
reproduces. Locally it explores new examples each run, which is where new counterexamples come from.

guardcache's pytest fixtures (emulators, redis-server, a fake main model) are enabled the way an app
enables them: ``pytest_plugins`` in the root conftest. Every test under ``tests/integration/`` talks
to a real server and is marked ``integration`` here, so ``pytest -m "not integration"`` runs the unit
tests only (``tests/unit/test_markers.py`` checks it, with pytest's own ``pytester`` fixture: an
in-process run, not a child interpreter).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.database import InMemoryExampleDatabase

pytest_plugins = ["guardcache.testing.pytest_plugin", "pytester"]  # pytester: in-process pytest runs

ROOT = Path(__file__).resolve().parents[1]

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
# hypothesis keeps found examples in .hypothesis/ of the working folder: a read-only checkout keeps
# them in memory instead (said here once, rather than hypothesis's warning per test).
settings.register_profile(
    "dev", deadline=None, **({} if os.access(ROOT, os.W_OK) else {"database": InMemoryExampleDatabase()})
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

INTEGRATION = Path(__file__).parent / "integration"


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the mark must be there when it looks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(INTEGRATION):
            item.add_marker(pytest.mark.integration)
