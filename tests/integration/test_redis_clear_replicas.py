"""``guardcache cache clear`` reaches running replicas: three replica PROCESSES with warm L1s share one
Redis (standalone, Cluster, Sentinel) and the NIM emulator; after the clear each asks the NIM again,
within a second, for a text it had cached.

Each replica (``python -m guardcache.testing.probe_replica``) caches its own text and a common one,
then checks its own text every 50 ms (L1 hits) until one check is not answered by the cache, and
reports when. Its own text: with a text all three share, only the first replica to miss would ask
the NIM (the others wait for its verdict through the lease, an L2 hit). The command runs as an
operator runs it, in a process of its own, and "within a second" is measured from its return.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest

from guardcache.emulator import DEFAULT_MODEL, EmulatorServer
from guardcache.testing import LocalRedisCluster, write_replica_config
from guardcache.testing.fleet import ProcessFleet
from guardcache.testing.pytest_plugin import EmulatorFactory
from guardcache.testing.redis_cluster import SentinelSet
from tests.integration.redis_support import TEST_SECRET

pytestmark = pytest.mark.integration

REPLICAS = 3
COMMON = "Tell me something interesting about the sea, please."
WITHIN_S = 1.0  # the bound: each replica asks the NIM again within a second of the clear
STEP_S = 120  # generous deadline of every wait (a busy 2-core machine)


@pytest.fixture(autouse=True)
def redis_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDCACHE_REDIS_SECRET", TEST_SECRET.decode())


def own_text(i: int) -> str:
    return f"Replica {i} asks about the history of lighthouses, chapter {i}."


def config_for(mode: str, request: pytest.FixtureRequest, tmp: Path, emulator: EmulatorServer) -> Path:
    """A replica config on this mode's Redis (its fixture started only for this mode)."""
    prefix = f"gcclear-{mode}"
    folder = tmp / "config"
    if mode == "standalone":
        url = request.getfixturevalue("redis_server").url
        return write_replica_config(
            folder, emulator.base_url, model=DEFAULT_MODEL, redis_url=url, key_prefix=prefix
        )
    if mode == "cluster":
        cluster: LocalRedisCluster = request.getfixturevalue("redis_cluster")
        return write_replica_config(
            folder,
            emulator.base_url,
            model=DEFAULT_MODEL,
            redis_url=cluster.url,
            key_prefix=prefix,
            redis_extra="mode: cluster",
        )
    sentinels: SentinelSet = request.getfixturevalue("redis_sentinel")
    where = ", ".join(f"'{a}'" for a in sentinels.sentinel_addresses)
    return write_replica_config(
        folder,
        emulator.base_url,
        model=DEFAULT_MODEL,
        key_prefix=prefix,
        redis_extra=f"mode: sentinel, sentinels: [{where}], service_name: {sentinels.service_name}",
    )


async def guardcache(*args: str) -> tuple[int, str, str]:
    """``guardcache <args>`` in a process of its own: exit status, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "guardcache",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), STEP_S)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


@pytest.mark.parametrize("mode", ["standalone", "cluster", "sentinel"])
async def test_a_clear_makes_every_running_replica_ask_the_nim_again_within_a_second(
    mode: str, request: pytest.FixtureRequest, tmp_path: Path, emulator_factory: EmulatorFactory
) -> None:
    emulator = await emulator_factory()
    config = config_for(mode, request, tmp_path, emulator)
    argvs = []
    for i in range(REPLICAS):
        texts = tmp_path / f"texts-{i}.json"
        texts.write_text(json.dumps([own_text(i), COMMON]), encoding="utf-8")
        argvs.append(
            [
                sys.executable,
                "-m",
                "guardcache.testing.probe_replica",
                *("--config", str(config), "--messages", str(texts), "--probe", own_text(i)),
            ]
        )
    async with ProcessFleet(argvs, capture_stderr=True, step_timeout=STEP_S) as fleet:
        # READY: each replica cached its texts (its L1 is warm); PROBING: its checks are L1 hits
        await fleet.release()
        for proc in fleet.procs:
            assert (await fleet.readline(proc)).strip() == b"PROBING"
        asked_before = emulator.stats().requests_total
        assert asked_before == REPLICAS + 1  # each own text once, the common one once (the lease)

        started = time.time()
        code, out, err = await guardcache(
            "cache", "clear", "--config", str(config), "--model", "content_safety"
        )
        cleared = time.time()
        assert code == 0, err
        assert "running replicas told to drop their in-process entries of: content_safety:" in out

        reports = [json.loads(await fleet.readline(proc)) for proc in fleet.procs]
    for i, report in enumerate(reports):
        assert report["hits"] >= 1, report  # it served its text from L1 before the clear ...
        assert started <= report["asked_at"] <= cleared + WITHIN_S, (i, report, started, cleared)
    # ... and asked the NIM again after it: once per replica, for its own text
    assert emulator.stats().requests_total == asked_before + REPLICAS


def test_a_clear_while_redis_is_down_fails_naming_what_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from guardcache.cli import main

    config = write_replica_config(
        tmp_path / "config",
        "http://127.0.0.1:9/v1",
        model=DEFAULT_MODEL,
        redis_url="redis://:pw@127.0.0.1:1/0",
    )
    code = main(["cache", "clear", "--config", str(config), "--model", "content_safety"])
    err = capsys.readouterr().err
    assert code == 1
    assert "Redis error at redis://:***@127.0.0.1:1/0 (content_safety)" in err
    assert "ConnectionError" in err and "no replica was told" in err
    assert "pw@" not in err
