"""Fresh replica processes against a Redis Cluster and a Sentinel set, as a new user starts them: the
documented defaults (one seed node, ``timeout_ms`` unset), no warm-up (the first checks start the
tier), twenty new texts each. Ten starts one after another: every one writes all twenty verdicts and
logs nothing about its tier, and a second replica started after each (up before its checks, as
``guardcache serve`` brings it up at start) reads all twenty from Redis without asking the guard.
Once more with both cores kept busy by other processes, where reading the cluster's slots alone took
up to 185 ms (an operation's budget is 50 ms). The spinners run at nice 19 and the replicas at the
normal priority: the spinners take every cycle nobody else wants, so the replicas never find an idle
core, while the tests beside this one (the other pytest-xdist worker), Redis and the guard emulator
are not starved. (Replicas at nice 19 as well starved outright when the machine was already loaded
by other processes at normal priority, as the suite is when run with both cores kept busy.)
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from guardcache.emulator import DEFAULT_MODEL
from guardcache.testing import LocalRedisCluster, SentinelSet, run_replicas, write_replica_config
from guardcache.testing.pytest_plugin import EmulatorFactory
from tests.integration.redis_support import TEST_SECRET

pytestmark = pytest.mark.integration

STARTS = 10
TEXTS = 20


@pytest.fixture(autouse=True)
def redis_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDCACHE_REDIS_SECRET", TEST_SECRET.decode())


BUSY_NICE = 19


@pytest.fixture
def busy_cores() -> Iterator[None]:
    """Two processes spinning for the duration of the test (CI machines have two cores), at nice 19
    (see the module doc)."""
    spin = ["nice", "-n", str(BUSY_NICE), sys.executable, "-c", "while True: pass"]
    spinners = [subprocess.Popen(spin, stdin=subprocess.DEVNULL) for _ in range(2)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait(10)


def texts(tag: str) -> list[str]:
    return [
        f"New replica {tag}, text {i}: what is a good way to learn about topic {i}?" for i in range(TEXTS)
    ]


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy cores"])
@pytest.mark.parametrize("mode", ["cluster", "sentinel"])
async def test_every_fresh_replica_writes_every_verdict_and_the_next_one_reads_them(
    mode: str, busy: bool, request: pytest.FixtureRequest, tmp_path: Path, emulator_factory: EmulatorFactory
) -> None:
    emulator = await emulator_factory()
    if mode == "cluster":
        cluster: LocalRedisCluster = request.getfixturevalue("redis_cluster")
        url, extra = cluster.url, "mode: cluster"  # one seed node

        def stored(prefix: str) -> int:
            return sum(1 for _ in cluster.keys(f"{prefix}:*}}"))
    else:
        sentinels: SentinelSet = request.getfixturevalue("redis_sentinel")
        where = ", ".join(f"'{a}'" for a in sentinels.sentinel_addresses)
        url, extra = "", f"mode: sentinel, sentinels: [{where}], service_name: {sentinels.service_name}"

        def stored(prefix: str) -> int:
            return sum(1 for _ in sentinels.client().scan_iter(match=f"{prefix}:*}}", count=1000))

    nice = 0  # the replicas' (see the module doc)
    if busy:
        request.getfixturevalue("busy_cores")
    calls = 0
    for start in range(STARTS):
        prefix = f"gcfresh{mode}{int(busy)}{start}"
        workload = texts(f"{mode} {busy} {start}")
        config = write_replica_config(
            tmp_path / f"start{start}",
            emulator.base_url,
            model=DEFAULT_MODEL,
            redis_url=url,
            key_prefix=prefix,
            redis_extra=extra,
        )
        (writer,) = await run_replicas(config, [workload], tmp_path, cold=True, nice=nice, step_timeout=120)
        calls += TEXTS
        assert emulator.stats().requests_total == calls, f"start {start}"
        assert all(r["error"] is None for r in writer["results"])
        # nothing about its tier in its log (no "unavailable"), nothing given up, all 20 in Redis
        assert writer["redis_log"] == [] and writer["writes_dropped"] == 0, f"start {start}: {writer}"
        assert writer["tier"]["l2_errors"] == 0, f"start {start}"
        assert stored(prefix) == TEXTS, f"start {start}"

        reader_config = write_replica_config(
            tmp_path / f"reader{start}",
            emulator.base_url,
            model=DEFAULT_MODEL,
            redis_url=url,
            key_prefix=prefix,
            redis_extra=extra,  # the default timeout_ms, like the writer's
        )
        (reader,) = await run_replicas(reader_config, [workload], tmp_path, nice=nice, step_timeout=120)
        assert emulator.stats().requests_total == calls, f"start {start}: the reader asked the guard"
        assert reader["tier"]["l2_hits"] == TEXTS and reader["redis_log"] == [], f"start {start}"
        assert all(r["from_cache"] for r in reader["results"])
