"""Kept for ``test_redis_replicas.py`` until it imports the replica fleet from ``guardcache.testing``."""

from guardcache.testing.replicas import REPLICA_MODULE, run_replicas, write_replica_config

__all__ = ["REPLICA_MODULE", "run_replicas", "write_replica_config"]
