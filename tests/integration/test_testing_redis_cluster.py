"""``guardcache.testing``'s local Redis Cluster and Sentinel set: whole when handed out, a failover on
demand, healed for the next test (the Sentinel set's failover: tests/integration/test_redis_sentinel.py)."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from guardcache.testing import LocalRedisCluster, SentinelSet

pytestmark = pytest.mark.integration


def test_the_cluster_has_three_primaries_each_with_a_replica_and_every_slot(
    redis_cluster: LocalRedisCluster,
) -> None:
    view = redis_cluster.topology()
    primaries = [n for n in view if n.primary]
    assert len(primaries) == 3 and len(view) == 6
    assert sum(b - a + 1 for n in primaries for a, b in n.slots) == 16384
    assert sorted(n.primary_id for n in view if not n.primary) == sorted(n.node_id for n in primaries)
    client = redis_cluster.client()
    keys = [f"gctesting:{{{i}}}" for i in range(60)]
    for key in keys:
        client.set(key, b"x")
    assert {redis_cluster.primary_for(k).port for k in keys} == {p.port for p in redis_cluster.primaries()}
    assert sorted(redis_cluster.keys("gctesting:*")) == sorted(keys)  # SCAN on every primary
    redis_cluster.flushall()
    assert list(redis_cluster.keys("gctesting:*")) == []
    client.close()


def test_a_killed_primary_is_replaced_by_its_replica_and_comes_back_as_one(
    redis_cluster: LocalRedisCluster,
) -> None:
    client = redis_cluster.client()
    client.set("gctesting:{0}", b"kept")  # replicated before the kill (WAIT: the replica has it)
    assert client.wait(1, 2000, target_nodes=client.get_node_from_key("gctesting:{0}")) == 1
    client.close()
    killed = redis_cluster.primary_for("gctesting:{0}")
    slot = key_slot(b"gctesting:{0}")
    redis_cluster.kill(killed)
    promoted = redis_cluster.wait_for_failover(killed)
    assert promoted.port != killed.port and redis_cluster.primary_for("gctesting:{0}") is promoted
    assert redis_cluster.client().get("gctesting:{0}") == b"kept"
    assert not killed.running
    redis_cluster.heal()
    assert killed.running and killed in redis_cluster.replicas()
    assert redis_cluster.primary_for_slot(slot) is promoted


def test_the_fixture_heals_what_an_earlier_test_broke(redis_cluster: LocalRedisCluster) -> None:
    redis_cluster.kill(redis_cluster.replicas()[0])
    redis_cluster.heal()
    assert all(n.running for n in redis_cluster.nodes) and len(redis_cluster.replicas()) == 3


def test_the_sentinel_set_replicates_to_every_replica_and_the_sentinels_agree(
    redis_sentinel: SentinelSet,
) -> None:
    """(Its failover is exercised by tests/integration/test_redis_sentinel.py.)"""
    assert len(redis_sentinel.sentinel_addresses) == 3 and len(redis_sentinel.servers) == 3
    primary = redis_sentinel.primary()
    assert primary.client().info("replication")["role"] == "master"
    client = redis_sentinel.client()
    client.set("gctesting:sentinel", b"kept")
    assert client.wait(2, 2000) == 2  # both replicas have it
    for server in redis_sentinel.servers:
        assert server.client().get("gctesting:sentinel") == b"kept"
    client.delete("gctesting:sentinel")
