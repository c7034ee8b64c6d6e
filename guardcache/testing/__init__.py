"""Helpers for testing apps built on guardcache (and guardcache's own tests and benchmarks).

- ``emulated(config)``: every model of a ``RailsConfig`` served by its own NIM emulator on loopback
  (``async with emulated(config, time_scale=0) as (config, servers)``);
- ``EchoChatModel``: a fake LangChain main model that echoes the last message;
- ``RedisServer``: a real ``redis-server`` on a free loopback port (``free_port``);
  ``LocalRedisCluster`` and ``SentinelSet``: a real local Redis Cluster (3 primaries + 3 replicas)
  and a Sentinel-managed primary with replicas, with failovers on demand;
- ``ProcessFleet``: child processes released together at a barrier; ``run_replicas`` /
  ``write_replica_config``: replica processes (``python -m guardcache.testing.replica``) that meet
  only in Redis and at the backend;
- ``guardcache.testing.pytest_plugin``: pytest fixtures (``emulator``, ``emulator_factory``,
  ``redis_server``, ``redis_url``, ``redis_cluster``, ``redis_sentinel``, ``echo_llm``); it is not
  imported here, so this package does not need pytest.

Needs the ``server`` extra (the emulator): ``pip install 'guardcache[testing]'``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from guardcache.emulator import emulated
    from guardcache.testing.fleet import ProcessFleet
    from guardcache.testing.main_model import EchoChatModel
    from guardcache.testing.redis_cluster import LocalRedisCluster, SentinelSet
    from guardcache.testing.redis_server import INSTALL_HINT, RedisServer, RedisServerNotFound, free_port
    from guardcache.testing.replicas import REPLICA_MODULE, run_replicas, write_replica_config

# Imported on first use: a replica process (``python -m guardcache.testing.replica``) imports this
# package first, and would otherwise pay for the emulator and LangChain (the fake main model), about
# a second of CPU per start, which it never uses.
_WHERE = {
    "emulated": "guardcache.emulator",
    "ProcessFleet": "guardcache.testing.fleet",
    "EchoChatModel": "guardcache.testing.main_model",
    "LocalRedisCluster": "guardcache.testing.redis_cluster",
    "SentinelSet": "guardcache.testing.redis_cluster",
    "INSTALL_HINT": "guardcache.testing.redis_server",
    "RedisServer": "guardcache.testing.redis_server",
    "RedisServerNotFound": "guardcache.testing.redis_server",
    "free_port": "guardcache.testing.redis_server",
    "REPLICA_MODULE": "guardcache.testing.replicas",
    "run_replicas": "guardcache.testing.replicas",
    "write_replica_config": "guardcache.testing.replicas",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "INSTALL_HINT",
    "REPLICA_MODULE",
    "EchoChatModel",
    "LocalRedisCluster",
    "ProcessFleet",
    "RedisServer",
    "RedisServerNotFound",
    "SentinelSet",
    "emulated",
    "free_port",
    "run_replicas",
    "write_replica_config",
]
