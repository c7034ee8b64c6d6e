"""Drive a fleet of replica processes (``python -m guardcache.testing.replica``): their config,
their start barrier, their reports.

Shared by the cross-replica tests and ``benchmarks/bench_redis.py``, so both exercise replicas the
same way: separate processes (no shared memory, no shared event loop), each with its own L1, that
meet only in Redis and at the backend.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from guardcache.testing.fleet import ProcessFleet

REPLICA_MODULE = "guardcache.testing.replica"
"""Run by each replica process: ``python -m guardcache.testing.replica``."""


def write_replica_config(
    folder: Path,
    base_url: str,
    *,
    model: str,
    store: str = "redis",
    redis_url: str = "",
    key_prefix: str = "guardcache",
    maxsize: int = 1000,
    ttl: int = 600,
    timeout_ms: int | None = None,
    backend_timeout: float = 10,
    redis_extra: str = "",
) -> Path:
    """A config folder with one content-safety input rail on ``base_url``, cached in ``store``;
    ``timeout_ms`` the config's (None: the default), ``redis_url`` none with Sentinel (``""``),
    ``redis_extra`` adds entries to its ``cache.redis`` mapping (e.g. ``"mode: cluster"``)."""
    folder.mkdir(parents=True, exist_ok=True)
    extra = f", {redis_extra}" if redis_extra else ""
    url = f"url: '{redis_url}', " if redis_url else ""
    budget = f"timeout_ms: {timeout_ms}, " if timeout_ms is not None else ""
    redis = (
        f"\n      redis: {{{url}ttl: {ttl}, key_prefix: {key_prefix}, {budget}pool_size: 8{extra}}}"
        if store == "redis"
        else ""
    )
    (folder / "config.yml").write_text(
        f"""
models:
  - type: content_safety
    engine: nim
    model: {model}
    parameters: {{base_url: "{base_url}", timeout: {backend_timeout}}}
    cache:
      enabled: true
      maxsize: {maxsize}
      store: {store}{redis}
rails:
  input:
    flows:
      - content safety check input $model=content_safety
""",
        encoding="utf-8",
    )
    return folder


async def run_replicas(
    config: Path,
    workloads: list[list[str]],
    tmp: Path,
    *,
    concurrency: int = 0,
    step_timeout: float = 120,
    cold: bool = False,
    nice: int = 0,
) -> list[dict[str, Any]]:
    """Start one replica per workload, release them together, and return their JSON reports.

    Each report gains ``warning_lines``: how many WARNING lines about an unavailable Redis the replica
    logged, and ``redis_log``: every line it wrote about its Redis tier. A replica that fails raises
    with its stderr; none is left running. ``step_timeout`` bounds each wait (start-up, then the
    run), so a stuck replica fails the caller instead of hanging. ``cold``: the replicas do not bring
    their tier up before the barrier (their first checks start it). ``nice``: their niceness (e.g.
    19, to share the CPU with other low-priority processes only).
    """
    argvs = []
    for i, messages in enumerate(workloads):
        path = tmp / f"workload-{i}.json"
        path.write_text(json.dumps(messages), encoding="utf-8")
        argv = [sys.executable, "-m", REPLICA_MODULE, "--config", str(config), "--messages", str(path)]
        if nice:
            argv = ["nice", "-n", str(nice), *argv]
        argvs.append([*argv, "--concurrency", str(concurrency), *(["--cold"] if cold else [])])
    async with ProcessFleet(argvs, capture_stderr=True, step_timeout=step_timeout) as fleet:
        await fleet.release()  # every burst starts at the same moment
        reports = []
        for proc in fleet.procs:
            out, err = await asyncio.wait_for(proc.communicate(), step_timeout)
            if proc.returncode != 0:
                raise RuntimeError(f"a replica failed:\n{err.decode(errors='replace')[-3000:]}")
            report = json.loads(out.decode().strip().splitlines()[-1])
            lines = err.decode(errors="replace").splitlines()
            report["warning_lines"] = sum("unavailable" in line for line in lines)
            report["redis_log"] = [line for line in lines if "Redis tier" in line]
            reports.append(report)
        return reports


__all__ = ["REPLICA_MODULE", "run_replicas", "write_replica_config"]
