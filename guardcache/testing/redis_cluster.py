"""A real local Redis Cluster and a real Sentinel set, for tests and benchmarks of the Redis tier.

    with LocalRedisCluster(tmp_dir) as cluster:   # 3 primaries + 3 replicas, cluster_state:ok
        cluster.urls                              # seed nodes: redis://127.0.0.1:<port>/0 each
        killed = cluster.kill_primary(0)          # SIGKILL one primary ...
        cluster.wait_for_failover(killed)         # ... until its replica serves its slots
        cluster.heal()                            # the killed node rejoins (as a replica)
        cluster.move_slot(slot, to=primary)       # reshard one slot (start_/finish_slot_move: ASK)

    with SentinelSet(tmp_dir) as sentinels:       # 1 primary + 2 replicas + 3 Sentinels
        sentinels.sentinels                       # [("127.0.0.1", port), ...]
        old = sentinels.kill_primary()
        sentinels.wait_for_failover(old)          # a replica promoted, the Sentinels agree
        sentinels.heal()                          # the old primary back, as a replica

Every node is a :class:`~guardcache.testing.redis_server.RedisServer` (no persistence, its own
folder and log, a free loopback port). Failure detection is set short so tests stay fast: a cluster
node is failed after ``node_timeout_ms`` (1000 ms; a replica is promoted ~2-3 s after its primary
dies) and a Sentinel calls a primary down after ``down_after_ms`` (1000 ms; ~2 s to a new primary).
Replicas of the cluster are always eligible for promotion (``cluster-replica-validity-factor 0``),
and a cluster node's bus port is a second free port (``cluster-port``), never ``port + 10000``,
which may not exist. The pytest fixtures ``redis_cluster`` and ``redis_sentinel``
(``pytest_plugin``, module-scoped: starting one takes a few seconds) wrap them.

Needs ``redis-server`` and ``redis-cli`` on PATH and the ``redis`` extra (the helpers read the
nodes' state with redis-py).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from guardcache.testing.redis_server import INSTALL_HINT, RedisServer, RedisServerNotFound, free_port

if TYPE_CHECKING:
    import redis

# A replica's full sync starts at once (diskless, without the default 5 s wait for more replicas).
_FAST_SYNC = ("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")

SERVICE_NAME = "guardcache"
"""The Sentinel service name of :class:`SentinelSet`'s primary."""


def _admin(port: int, timeout: float = 1.0) -> redis.Redis:
    import redis

    return redis.Redis(
        host="127.0.0.1",
        port=port,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        decode_responses=True,
    )


def _ask(port: int, *args: Any) -> Any:
    """One command to one node; None when it does not answer."""
    import redis

    try:
        with _admin(port) as client:
            return client.execute_command(*args)
    except (redis.RedisError, OSError):
        return None


def _wait(what: str, ready: Callable[[], bool], timeout: float, detail: Callable[[], str] = str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {timeout} s; {detail()}")
        time.sleep(0.05)


@dataclass(frozen=True)
class ClusterNode:
    """One line of ``CLUSTER NODES``, as the node asked sees it."""

    node_id: str
    port: int
    primary: bool
    failed: bool  # flagged fail (or pfail) by the node asked
    primary_id: str | None  # a replica's primary
    slots: tuple[tuple[int, int], ...]

    @classmethod
    def parse(cls, line: str) -> ClusterNode:
        fields = line.split()
        address = fields[1].split("@")[0]
        flags = fields[2].split(",")
        slots = []
        for part in fields[8:]:
            if part.startswith("["):  # a slot being migrated or imported
                continue
            start, _, end = part.partition("-")
            slots.append((int(start), int(end or start)))
        return cls(
            node_id=fields[0],
            port=int(address.rsplit(":", 1)[1]),
            primary="master" in flags,
            failed="fail" in flags or "fail?" in flags,
            primary_id=None if fields[3] == "-" else fields[3],
            slots=tuple(slots),
        )


class LocalRedisCluster:
    """``primaries`` x (1 + ``replicas``) ``redis-server --cluster-enabled yes`` on 127.0.0.1, joined
    with ``redis-cli --cluster create``; see the module doc."""

    def __init__(
        self, workdir: Path, *, primaries: int = 3, replicas: int = 1, node_timeout_ms: int = 1000
    ) -> None:
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RedisServerNotFound(INSTALL_HINT.replace("redis-server is", "redis-cli is"))
        self.cli = cli
        self.workdir = Path(workdir)
        self.primaries_wanted = primaries
        self.replicas_wanted = replicas
        self.node_timeout_ms = node_timeout_ms
        self.nodes: list[RedisServer] = []
        self._served_when_killed: dict[int, tuple[tuple[int, int], ...]] = {}  # port -> its slots

    # -- start and stop -----------------------------------------------------------------------------

    def _node(self, i: int) -> RedisServer:
        folder = self.workdir / f"node{i}"
        folder.mkdir(parents=True, exist_ok=True)
        return RedisServer(folder, args=self._args(folder, free_port()))

    def _args(self, folder: Path, bus_port: int) -> list[str]:
        return [
            "--cluster-enabled", "yes",
            "--cluster-config-file", str(folder / "nodes.conf"),
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--cluster-port", str(bus_port),
            "--cluster-replica-validity-factor", "0",
            *_FAST_SYNC,
        ]  # fmt: skip

    def start(self, timeout: float = 60.0) -> None:
        """Start the nodes, create the cluster and wait until every node sees it whole."""
        try:
            for i in range((1 + self.replicas_wanted) * self.primaries_wanted):
                node = self._node(i)
                for attempt in range(3):  # another process may take a port between choice and bind
                    try:
                        node.start()
                        break
                    except RuntimeError:
                        if attempt == 2:
                            raise
                        node.port = free_port()
                        node.args = self._args(node.workdir, free_port())
                self.nodes.append(node)
            cmd = [
                self.cli, "--cluster", "create",
                *(f"127.0.0.1:{n.port}" for n in self.nodes),
                "--cluster-replicas", str(self.replicas_wanted), "--cluster-yes",
            ]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed:\n{done.stdout[-2000:]}{done.stderr}")
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Kill every node."""
        for node in self.nodes:
            node.kill()

    def __enter__(self) -> LocalRedisCluster:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- where to connect ---------------------------------------------------------------------------

    @property
    def urls(self) -> list[str]:
        """Every node's URL (seed nodes for a cluster client)."""
        return [n.url for n in self.nodes]

    @property
    def url(self) -> str:
        """One node's URL: enough for a cluster client to discover the rest."""
        return self.nodes[0].url

    def client(self) -> redis.RedisCluster:
        """A synchronous redis-py cluster client for a test's own setup and assertions."""
        import redis
        from redis.cluster import ClusterNode as Seed

        seeds = [Seed("127.0.0.1", n.port) for n in self.nodes if n.running]  # type: ignore[no-untyped-call]
        return redis.RedisCluster(startup_nodes=seeds, socket_timeout=5)

    # -- state --------------------------------------------------------------------------------------

    def running(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.running]

    def _by_port(self, port: int) -> RedisServer:
        return next(n for n in self.nodes if n.port == port)

    def topology(self, via: RedisServer | None = None) -> list[ClusterNode]:
        """``CLUSTER NODES`` as ``via`` (default: the first running node) sees it."""
        asker = via or self.running()[0]
        text = _ask(asker.port, "CLUSTER", "NODES") or ""
        return [ClusterNode.parse(line) for line in text.splitlines() if line.strip()]

    def primaries(self) -> list[RedisServer]:
        """The nodes serving slots now, by their first slot."""
        serving = sorted((n for n in self.topology() if n.primary and n.slots), key=lambda n: n.slots[0])
        return [self._by_port(n.port) for n in serving]

    def replicas(self) -> list[RedisServer]:
        return [self._by_port(n.port) for n in self.topology() if not n.primary]

    def primary_for(self, key: str | bytes) -> RedisServer:
        """The node serving ``key``'s slot now."""
        from redis.crc import key_slot

        return self.primary_for_slot(key_slot(key.encode() if isinstance(key, str) else key))

    def primary_for_slot(self, slot: int) -> RedisServer:
        """The node serving ``slot`` now."""
        for node in self.topology():
            if node.primary and any(a <= slot <= b for a, b in node.slots):
                return self._by_port(node.port)
        raise LookupError(f"no primary serves slot {slot}")

    def _whole(self) -> bool:
        """Every running node: cluster_state ok, every slot served by a running primary that no one
        flags failed, the wanted number of replicas attached and in sync."""
        running = self.running()
        ports = {n.port for n in running}
        for node in running:
            info = _ask(node.port, "CLUSTER", "INFO") or ""
            if "cluster_state:ok" not in info:
                return False
            view = self.topology(node)
            if {n.port for n in view if not n.failed} < ports:
                return False
            served = sum(b - a + 1 for n in view if n.primary and n.port in ports for a, b in n.slots)
            if served != 16384:
                return False
        view = self.topology()
        replicas = [n for n in view if not n.primary and n.port in ports]
        if len(replicas) < len(running) - self.primaries_wanted:
            return False
        for replica in replicas:
            status = _ask(replica.port, "INFO", "replication") or {}
            if status.get("master_link_status") != "up":
                return False
        return True

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until the cluster is whole (see :meth:`_whole`) with the nodes running now."""
        _wait("the Redis Cluster was not whole", self._whole, timeout, lambda: repr(self.topology()))

    # -- failures -----------------------------------------------------------------------------------

    def kill(self, node: RedisServer) -> RedisServer:
        """SIGKILL one node (its cluster config stays, so :meth:`restart` rejoins it)."""
        served = [n.slots for n in self.topology() if n.port == node.port and n.primary]
        self._served_when_killed[node.port] = served[0] if served else ()
        node.kill()
        return node

    def kill_primary(self, index: int = 0) -> RedisServer:
        """SIGKILL the ``index``-th primary (by first slot); returns it."""
        return self.kill(self.primaries()[index])

    def wait_for_failover(self, killed: RedisServer, timeout: float = 30.0) -> RedisServer:
        """Until a replica of ``killed`` serves its slots and the running nodes see the cluster ok;
        returns the new primary."""

        def promoted() -> bool:
            running = self.running()
            if not running:
                return False
            for node in running:
                if "cluster_state:ok" not in (_ask(node.port, "CLUSTER", "INFO") or ""):
                    return False
            view = self.topology()
            served = sum(b - a + 1 for n in view if n.primary and n.port != killed.port for a, b in n.slots)
            return served == 16384

        _wait("no replica took over", promoted, timeout, lambda: repr(self.topology()))
        lost = self._served_when_killed.get(killed.port, ())
        if not lost:
            raise ValueError(f"node {killed.port} served no slots when it was killed: nothing to take over")
        return self.primary_for_slot(lost[0][0])

    def restart(self, node: RedisServer, timeout: float = 30.0) -> None:
        """Start a killed node again on its port; it rejoins (as a replica if it was replaced)."""
        if not node.running:
            node.start()
        self.wait_ready(timeout)

    def heal(self, timeout: float = 30.0) -> None:
        """Restart every killed node and wait until the cluster is whole."""
        for node in self.nodes:
            if not node.running:
                node.start()
        self.wait_ready(timeout)

    # -- moving a slot (resharding) -----------------------------------------------------------------

    def _node_id(self, node: RedisServer) -> str:
        return next(n.node_id for n in self.topology() if n.port == node.port)

    def start_slot_move(self, slot: int, to: RedisServer) -> RedisServer:
        """Begin moving ``slot`` to the primary ``to`` and migrate its keys (``MIGRATE``): until
        :meth:`finish_slot_move`, its old owner answers ``ASK`` for them. Returns the old owner."""
        source = self.primary_for_slot(slot)
        if source.port == to.port:
            raise ValueError(f"slot {slot} is already served by {to.port}")
        _ask(to.port, "CLUSTER", "SETSLOT", slot, "IMPORTING", self._node_id(source))
        _ask(source.port, "CLUSTER", "SETSLOT", slot, "MIGRATING", self._node_id(to))
        while keys := _ask(source.port, "CLUSTER", "GETKEYSINSLOT", slot, 100):
            _ask(source.port, "MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "KEYS", *keys)
        return source

    def finish_slot_move(self, slot: int, to: RedisServer, timeout: float = 30.0) -> None:
        """Give ``slot`` to ``to`` on every primary: its old owner now answers ``MOVED``."""
        owner = self._node_id(to)
        for node in self.primaries():
            _ask(node.port, "CLUSTER", "SETSLOT", slot, "NODE", owner)
        self.wait_ready(timeout)

    def move_slot(self, slot: int, to: RedisServer) -> RedisServer:
        """Move ``slot`` and its keys to the primary ``to`` (a reshard of one slot); returns its old
        owner."""
        source = self.start_slot_move(slot, to)
        self.finish_slot_move(slot, to)
        return source

    def flushall(self) -> None:
        """Empty every primary."""
        for node in self.primaries():
            _ask(node.port, "FLUSHALL")

    def keys(self, pattern: str = "*") -> Iterator[str]:
        """Every key matching ``pattern`` on every primary (SCAN)."""
        for node in self.primaries():
            with _admin(node.port, timeout=5) as client:
                yield from client.scan_iter(match=pattern, count=1000)


class SentinelSet:
    """A primary, ``replicas`` replicas and ``sentinels`` Sentinels watching them as
    :data:`SERVICE_NAME`; see the module doc."""

    def __init__(
        self,
        workdir: Path,
        *,
        replicas: int = 2,
        sentinels: int = 3,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 3000,
        service_name: str = SERVICE_NAME,
    ) -> None:
        self.workdir = Path(workdir)
        self.replicas_wanted = replicas
        self.sentinels_wanted = sentinels
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.service_name = service_name
        self.servers: list[RedisServer] = []  # data nodes, the first one the initial primary
        self.watchers: list[RedisServer] = []  # the Sentinels

    def _server(self, i: int, replica_of: int | None) -> RedisServer:
        folder = self.workdir / f"redis{i}"
        folder.mkdir(parents=True, exist_ok=True)
        args = [] if replica_of is None else ["--replicaof", "127.0.0.1", str(replica_of)]
        return RedisServer(folder, args=[*_FAST_SYNC, *args])

    def _sentinel(self, i: int, primary_port: int) -> RedisServer:
        folder = self.workdir / f"sentinel{i}"
        folder.mkdir(parents=True, exist_ok=True)
        conf = folder / "sentinel.conf"  # Sentinel rewrites it: a file of its own
        quorum = self.sentinels_wanted // 2 + 1
        name = self.service_name
        conf.write_text(
            f"sentinel monitor {name} 127.0.0.1 {primary_port} {quorum}\n"
            f"sentinel down-after-milliseconds {name} {self.down_after_ms}\n"
            f"sentinel failover-timeout {name} {self.failover_timeout_ms}\n"
            f"sentinel parallel-syncs {name} {max(1, self.replicas_wanted)}\n",
            encoding="utf-8",
        )
        return RedisServer(folder, config_file=conf, args=["--sentinel"])

    def start(self, timeout: float = 60.0) -> None:
        """Start the primary, its replicas, then the Sentinels; wait until every Sentinel knows the
        others and the replicas (a failover needs both)."""
        try:
            primary = self._server(0, None)
            primary.start_on_free_port()
            self.servers.append(primary)
            for i in range(1, self.replicas_wanted + 1):
                server = self._server(i, primary.port)
                server.start_on_free_port()
                self.servers.append(server)
            for i in range(self.sentinels_wanted):
                sentinel = self._sentinel(i, primary.port)
                sentinel.start_on_free_port()
                self.watchers.append(sentinel)
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for server in (*self.watchers, *self.servers):
            server.kill()

    def __enter__(self) -> SentinelSet:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- where to connect ---------------------------------------------------------------------------

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        """The Sentinels' addresses."""
        return [("127.0.0.1", s.port) for s in self.watchers]

    @property
    def sentinel_addresses(self) -> list[str]:
        """The Sentinels as ``host:port`` (the config's ``sentinels:`` list)."""
        return [f"{host}:{port}" for host, port in self.sentinels]

    def _state(self, sentinel: RedisServer) -> dict[str, str]:
        """``SENTINEL MASTER <service>`` of one Sentinel ({} when it does not answer)."""
        state = _ask(sentinel.port, "SENTINEL", "MASTER", self.service_name)
        if isinstance(state, list):
            return dict(zip(state[::2], state[1::2], strict=True))
        return dict(state) if state else {}

    def primary_port(self) -> int | None:
        """The primary's port as the Sentinels agree on it now, done switching (None: they do not
        agree yet). Both views count: during a failover ``GET-MASTER-ADDR-BY-NAME`` already names
        the promoted replica while ``SENTINEL MASTER`` (what clients such as redis-py ask) still
        names the old primary until the switch is over."""
        answers = set()
        for sentinel in self.watchers:
            if not sentinel.running:
                continue
            reply = _ask(sentinel.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service_name)
            answers.add(int(reply[1]) if reply else None)
            state = self._state(sentinel)
            answers.add(int(state["port"]) if "port" in state else None)
            if "failover_in_progress" in state.get("flags", ""):
                answers.add(None)
        return answers.pop() if len(answers) == 1 else None

    def primary(self) -> RedisServer:
        port = self.primary_port()
        return next(s for s in self.servers if s.port == port)

    def client(self) -> redis.Redis:
        """A synchronous client of the current primary."""
        return self.primary().client()

    # -- state --------------------------------------------------------------------------------------

    def _role(self, server: RedisServer) -> str | None:
        reply = _ask(server.port, "ROLE")
        return reply[0] if reply else None

    def _whole(self) -> bool:
        port = self.primary_port()
        if port is None:
            return False
        primary = next((s for s in self.servers if s.port == port), None)
        if primary is None or not primary.running or self._role(primary) != "master":
            return False
        running = [s for s in self.servers if s.running]
        for server in running:
            if server is primary:
                continue
            status = _ask(server.port, "INFO", "replication") or {}
            if status.get("master_port") != port or status.get("master_link_status") != "up":
                return False
        for sentinel in self.watchers:
            fields = self._state(sentinel)
            if not fields:
                return False
            if int(fields.get("num-other-sentinels", 0)) < self.sentinels_wanted - 1:
                return False
            if int(fields.get("num-slaves", 0)) < len(running) - 1:
                return False
            if "s_down" in fields.get("flags", "") or "o_down" in fields.get("flags", ""):
                return False
        return True

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until the Sentinels agree on a running primary that every running replica follows."""
        _wait(
            "the Sentinel set was not ready", self._whole, timeout, lambda: f"primary: {self.primary_port()}"
        )

    # -- failures -----------------------------------------------------------------------------------

    def kill_primary(self) -> RedisServer:
        """SIGKILL the current primary; returns it."""
        primary = self.primary()
        primary.kill()
        return primary

    def wait_for_failover(self, killed: RedisServer, timeout: float = 30.0) -> RedisServer:
        """Until the Sentinels agree on a new primary (not ``killed``) that says it is one; returns
        it."""

        def promoted() -> bool:
            port = self.primary_port()
            if port is None or port == killed.port:
                return False
            return self._role(next(s for s in self.servers if s.port == port)) == "master"

        _wait("the Sentinels did not promote a replica", promoted, timeout, lambda: f"{self.primary_port()}")
        return self.primary()

    def heal(self, timeout: float = 30.0) -> None:
        """Start every killed server again as a replica of the current primary (what Sentinel would
        make it, without the window in which it comes back as an empty primary), and wait. Right
        after a failover the Sentinels may not agree yet on the primary (a loaded machine stretches
        that): wait for them first."""
        _wait("the Sentinels did not agree on a primary", lambda: self.primary_port() is not None, timeout)
        primary = self.primary()
        for server in self.servers:
            if not server.running:
                server.args = [*_FAST_SYNC, "--replicaof", "127.0.0.1", str(primary.port)]
                server.start()
        self.wait_ready(timeout)

    def flushall(self) -> None:
        _ask(self.primary().port, "FLUSHALL")


__all__ = ["SERVICE_NAME", "ClusterNode", "LocalRedisCluster", "SentinelSet"]
