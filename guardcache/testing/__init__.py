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

from guardcache.emulator import emulated
from guardcache.testing.fleet import ProcessFleet
from guardcache.testing.main_model import EchoChatModel
from guardcache.testing.redis_cluster import LocalRedisCluster, SentinelSet
from guardcache.testing.redis_server import INSTALL_HINT, RedisServer, RedisServerNotFound, free_port
from guardcache.testing.replicas import REPLICA_MODULE, run_replicas, write_replica_config

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
