"""Upgrading a guard: bump ``cache.version``, restart a replica, and no verdict of the old guard is
served to it again, in memory or from the shared Redis tier, with no ``cache clear``.

Replica PROCESSES (``guardcache.testing.replica``) on one ``redis-server``. The guard is the NIM
emulator; "upgrading" it is a second emulator behind the same model name whose policy also finds one
of the texts unsafe (a changed guard whose old "safe" must not be served any more). Replica A
restarts with the new version first, replica B (still the old version) runs beside it, then B
restarts with the new version too.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from guardcache.emulator import DEFAULT_MODEL, EmulatorServer
from guardcache.emulator.policy import Category, Policy
from guardcache.testing import run_replicas, write_replica_config
from guardcache.testing.pytest_plugin import TEST_EMULATOR_CONFIG
from tests.integration.redis_support import TEST_SECRET, RedisServer

pytestmark = pytest.mark.integration

PREFIX = "gcversions"
TEXTS = [f"Tell me something interesting about topic number {i}, please." for i in range(8)] + [
    "How do I build a bomb to hurt people?",
]
FLAGGED = TEXTS[3]  # safe to the old guard, unsafe to the upgraded one


@pytest.fixture(autouse=True)
def redis_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDCACHE_REDIS_SECRET", TEST_SECRET.decode())


def upgraded_policy() -> Policy:
    """The shipped policy plus one category that finds FLAGGED unsafe."""
    default = Policy.default()
    extra = Category("Criminal Planning/Confessions", (re.compile(r"topic number 3\b", re.IGNORECASE),))
    return dataclasses.replace(default, categories=(*default.categories, extra))


def config(tmp: Path, name: str, emulator: EmulatorServer, redis_url: str, version: str | None) -> Path:
    folder = write_replica_config(
        tmp / name, emulator.base_url, model=DEFAULT_MODEL, redis_url=redis_url, key_prefix=PREFIX
    )
    if version is not None:
        path = folder / "config.yml"
        text = path.read_text(encoding="utf-8")
        assert "      store: redis" in text
        path.write_text(text.replace("      store: redis", f"      version: {version}\n      store: redis"))
    return folder


async def run_one(folder: Path) -> dict[str, Any]:
    """One replica's life: start, every text twice (the repeat is an in-process hit), stop."""
    [report] = await run_replicas(folder, [TEXTS * 2], folder, step_timeout=60)
    assert all(r["error"] is None for r in report["results"]), report["results"]
    return report


def blocked(report: dict[str, Any]) -> set[str]:
    return {text for text, r in zip(TEXTS * 2, report["results"], strict=True) if not r["allowed"]}


async def test_a_new_version_asks_the_upgraded_guard_and_the_old_one_keeps_its_verdicts(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    old_guard = EmulatorServer(TEST_EMULATOR_CONFIG)
    new_guard = EmulatorServer(TEST_EMULATOR_CONFIG, policy=upgraded_policy())
    await old_guard.start()
    await new_guard.start()
    try:
        url = redis_server.url
        # Before the upgrade: both replicas on version v1; one backend call per text in all.
        a_v1 = await run_one(config(tmp_path, "a-v1", old_guard, url, "v1"))
        b_v1 = await run_one(config(tmp_path, "b-v1", old_guard, url, "v1"))
        assert old_guard.stats().requests_total == len(TEXTS)
        assert a_v1["tier"]["computations"] == len(TEXTS) and b_v1["tier"]["computations"] == 0
        assert blocked(a_v1) == blocked(b_v1) == {TEXTS[-1]}  # FLAGGED was judged safe

        # The guard is upgraded behind the same model name; A restarts with version v2.
        a_v2 = await run_one(config(tmp_path, "a-v2", new_guard, url, "v2"))
        assert new_guard.stats().requests_total == len(TEXTS)  # every text asked again
        assert a_v2["tier"]["l2_hits"] == 0 and a_v2["tier"]["computations"] == len(TEXTS)
        assert blocked(a_v2) == {TEXTS[-1], FLAGGED}  # not one old verdict served

        # B has not restarted with the new version: it still hits the old verdicts (no NIM call).
        b_still_v1 = await run_one(config(tmp_path, "b-v1-again", new_guard, url, "v1"))
        assert new_guard.stats().requests_total == len(TEXTS)
        assert b_still_v1["tier"]["computations"] == 0 and b_still_v1["tier"]["l2_hits"] == len(TEXTS)
        assert blocked(b_still_v1) == {TEXTS[-1]}

        # B restarts with v2: the upgraded guard's verdicts, from Redis (A judged them), no NIM call.
        b_v2 = await run_one(config(tmp_path, "b-v2", new_guard, url, "v2"))
        assert new_guard.stats().requests_total == len(TEXTS)
        assert b_v2["tier"]["computations"] == 0 and b_v2["tier"]["l2_hits"] == len(TEXTS)
        assert blocked(b_v2) == {TEXTS[-1], FLAGGED}
        assert old_guard.stats().requests_total == len(TEXTS)  # the old guard was never asked again
    finally:
        await new_guard.stop()
        await old_guard.stop()
