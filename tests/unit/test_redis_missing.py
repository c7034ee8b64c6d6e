"""Without a ``redis-server`` binary, the tests that need one say so in one line (the package to
install), not a traceback each, and the rest of the suite still runs; under ``CI`` they fail."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = """
from guardcache.testing import RedisServer

def test_through_the_fixture(redis_server):
    raise AssertionError("never reached: there is no redis-server")

def test_starting_one_itself(tmp_path):
    RedisServer(tmp_path).start_on_free_port()

def test_without_redis():
    assert 1 + 1 == 2
"""


@pytest.fixture
def no_redis_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def run(pytester: pytest.Pytester) -> pytest.RunResult:
    pytester.makepyfile(test_needs_redis=TESTS)
    return pytester.runpytest_inprocess(
        "-p",
        "guardcache.testing.pytest_plugin",
        "-p",
        "no:cacheprovider",
        "-ra",
        "-o",
        "asyncio_default_fixture_loop_scope=function",
    )


@pytest.mark.usefixtures("no_redis_on_path")
def test_a_missing_redis_server_is_one_line_and_the_rest_runs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)
    result = run(pytester)
    result.assert_outcomes(passed=1, skipped=2)
    lines = [line for line in result.outlines if "redis-server is not installed" in line]
    assert len(lines) == 1 and lines[0].startswith("SKIPPED [2] "), result.outlines
    assert "apt-get install -y redis-server" in lines[0]
    assert "Traceback" not in result.stdout.str() and "AssertionError" not in result.stdout.str()


@pytest.mark.usefixtures("no_redis_on_path")
def test_under_ci_a_missing_redis_server_fails_its_tests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1, errors=1)  # the fixture's is a setup error
    assert result.ret != 0
    assert "Traceback" not in result.stdout.str()
