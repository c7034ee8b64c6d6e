"""Where the shared tier's Redis is and how to reach it: one standalone server, a Redis Cluster, or a
Sentinel-managed primary (:class:`RedisEndpoint`), and the redis-py clients of each mode.

- ``standalone``: ``redis.asyncio.Redis`` on a ``BlockingConnectionPool`` of ``pool_size``
  connections (a burst of concurrent checks queues for a connection within the budget, instead of
  failing with "Too many connections" as ``Redis.from_url``'s pool would). The one path before the
  modes existed, unchanged.
- ``cluster``: ``redis.asyncio.cluster.RedisCluster`` on the seed nodes: it discovers the slots and
  follows them (``MOVED``, ``ASK``, a topology refresh after a node fails). Every command it is given
  names keys of one slot (see :mod:`~guardcache.cache.redis.keys`: a value and its lease share a
  hash tag); what would span slots is split by the store (:attr:`AsyncConnection.one_node`).
- ``sentinel``: ``redis.asyncio.sentinel.Sentinel(...).master_for(service_name)``: each new
  connection asks the Sentinels for the current primary, and a connection to a demoted or dead one
  is dropped (``READONLY`` and connection errors), so the next one reaches the new primary.

Every mode bounds one event loop's operations with :attr:`AsyncConnection.capacity`: at most
``pool_size`` at once (the cluster's and the Sentinel's pools raise when all their connections are
in use instead of queueing), and no more than the client has connections open, so that a burst
takes turns on the open connections (the others wait within their budget) while more are set up in
the background, rather than each operation waiting for a new connection's set-up. Retries are off
in every mode (a retry would spend the request's budget on a Redis that has just failed), but
redirections are not retries: ``MOVED`` and ``ASK`` are followed within the operation's budget.

Connections are set up off the operations' path (:mod:`~guardcache.cache.redis.connecting`): each
client's connection classes are wrapped so that a new connection is made in a task of its own within
the connect timeout, and :meth:`AsyncConnection.set_up` is what makes a client usable at all (a
cluster's slot map read and every slot covered, every primary answering; the primary the Sentinels
name answering; the one server answering), run by the store in the background.

All modes take ``rediss://`` (or ``tls`` with Sentinel) with a CA bundle (``tls_ca_file``), and an
ACL user and password that the caller reads from the environment (never from a config file). The
CLI (``guardcache cache``) builds synchronous clients of the same endpoint (:func:`admin_client`).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelManagedConnection, SentinelManagedSSLConnection
from redis.backoff import NoBackoff
from redis.crc import REDIS_CLUSTER_HASH_SLOTS
from redis.exceptions import RedisClusterException, ResponseError, TryAgainError

from guardcache.cache.redis.connecting import Capacity, SetUps, describe, off_path

Mode = Literal["standalone", "cluster", "sentinel"]
MODES: tuple[Mode, ...] = ("standalone", "cluster", "sentinel")

_SCHEMES = ("redis://", "rediss://", "unix://")


def redacted(url: str) -> str:
    """``url`` without its password, for log lines."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass(frozen=True, slots=True, kw_only=True)
class RedisEndpoint:
    """Where the tier's Redis is, and how to log in (plain values: no config objects).

    ``urls``: standalone, the one server; cluster, the seed nodes (one is enough: the others are
    discovered). ``sentinels`` (host, port) and ``service_name``: the Sentinels and the name they
    monitor the primary by; ``db`` and ``tls`` only there (the other modes say both in the URL).
    ``username``/``password`` (the ACL user) apply to every node; ``sentinel_username`` /
    ``sentinel_password`` to the Sentinels, when they have their own. None of them, nor a URL (which
    may hold a password), is in ``repr``; :meth:`describe` is the redacted text for logs.
    """

    mode: Mode = "standalone"
    urls: tuple[str, ...] = field(default=(), repr=False)
    sentinels: tuple[tuple[str, int], ...] = ()
    service_name: str = ""
    db: int = 0
    tls: bool = False
    tls_ca_file: str | None = None
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    sentinel_username: str | None = field(default=None, repr=False)
    sentinel_password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"Redis mode must be one of {', '.join(MODES)} (got {self.mode!r})")
        for url in self.urls:
            if not url.startswith(_SCHEMES):
                raise ValueError("a Redis URL must start with redis://, rediss:// or unix://")
        if self.mode == "standalone" and len(self.urls) != 1:
            raise ValueError(f"a standalone Redis has one URL (got {len(self.urls)})")
        if self.mode == "cluster":
            if not self.urls:
                raise ValueError("a Redis Cluster needs at least one seed node URL")
            if any(u.startswith("unix://") for u in self.urls):
                raise ValueError("a Redis Cluster is reached over TCP (redis:// or rediss://), not unix://")
            if len({u.startswith("rediss://") for u in self.urls}) > 1:
                raise ValueError("every seed node needs the same scheme (all redis:// or all rediss://)")
        if self.mode == "sentinel":
            if self.urls:
                raise ValueError("with Sentinel the Sentinels name the primary: give no URL")
            if not self.sentinels or not self.service_name:
                raise ValueError("Sentinel needs sentinels (host, port) and a service_name")
        elif self.sentinels or self.service_name or self.db or self.tls:
            raise ValueError("sentinels, service_name, db and tls are for mode sentinel only")
        if self.tls_ca_file is not None and not self.uses_tls:
            raise ValueError("tls_ca_file is for TLS: use rediss:// URLs (or tls with Sentinel)")

    @classmethod
    def of_url(cls, url: str) -> RedisEndpoint:
        """One standalone server."""
        return cls(urls=(url,))

    @property
    def url(self) -> str:
        """The first URL (the server, or the first seed node); ``""`` with Sentinel."""
        return self.urls[0] if self.urls else ""

    @property
    def uses_tls(self) -> bool:
        return self.tls if self.mode == "sentinel" else self.url.startswith("rediss://")

    def describe(self) -> str:
        """Where, for log lines and the CLI: no password."""
        if self.mode == "standalone":
            return redacted(self.url)
        if self.mode == "cluster":
            more = f" (+{len(self.urls) - 1} seed nodes)" if len(self.urls) > 1 else ""
            return f"cluster {redacted(self.url)}{more}"
        where = ",".join(f"{host}:{port}" for host, port in self.sentinels)
        return f"sentinel {self.service_name}@{where}" + ("/tls" if self.tls else "") + f" db {self.db}"

    # -- connection options -----------------------------------------------------------------------

    def _login(self) -> dict[str, Any]:
        """Credentials and TLS options every node's connections take (only the ones set: a plain
        connection refuses TLS options)."""
        options: dict[str, Any] = {}
        if self.username is not None:
            options["username"] = self.username
        if self.password is not None:
            options["password"] = self.password
        if self.uses_tls and self.tls_ca_file is not None:
            options["ssl_ca_certs"] = self.tls_ca_file
        return options

    def _sentinel_login(self, timeout: float) -> dict[str, Any]:
        """What a connection to a Sentinel takes (its own timeouts: redis-py does not pass on the
        data nodes' options; the Sentinels are asked only while a connection is set up)."""
        options: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
        if self.sentinel_username is not None:
            options["username"] = self.sentinel_username
        if self.sentinel_password is not None:
            options["password"] = self.sentinel_password
        if self.tls:
            options["ssl"] = True
            if self.tls_ca_file is not None:
                options["ssl_ca_certs"] = self.tls_ca_file
        return options

    def _seeds(self) -> list[tuple[str, int]]:
        seeds = []
        for url in self.urls:
            parts = urlsplit(url)
            seeds.append((parts.hostname or "localhost", parts.port or 6379))
        return seeds

    def _seed_login(self) -> dict[str, Any]:
        """A cluster's credentials: the endpoint's, else the first seed URL's."""
        parts = urlsplit(self.url)
        options: dict[str, Any] = {}
        if parts.username:
            options["username"] = parts.username
        if parts.password is not None:
            options["password"] = parts.password
        return {**options, **self._login()}


# -- the tier's clients (asyncio, one set per event loop) -------------------------------------------


class ClusterNotCovered(RedisClusterException):
    """A cluster whose slot map leaves slots without a primary, or whose primaries do not see it ok:
    not usable yet."""


class SlotMigrating(ResponseError):
    """``TRYAGAIN``: a multi-key command on a slot being migrated, its keys split between the two
    nodes. Raised as is, not retried: redis-py retries ``TRYAGAIN`` up to 16 times with 50 ms
    sleeps, far past an operation's budget, and the slot stays split until the move is done."""


def _tryagain_fails_fast(base: type[Any]) -> type[Any]:
    """``base`` whose ``TRYAGAIN`` answers raise :class:`SlotMigrating` (a plain ``ResponseError``
    to redis-py's cluster client, which it raises at once)."""

    class FailFast(base):  # type: ignore[misc]
        async def read_response(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return await super().read_response(*args, **kwargs)
            except TryAgainError as exc:
                raise SlotMigrating(str(exc)) from exc

    FailFast.__name__ = FailFast.__qualname__ = base.__name__
    return FailFast


def _slot_ranges(slots: set[int], most: int = 3) -> str:
    """``0-99, 200, 5000-5460`` (the first ``most`` ranges, then ``...``)."""
    ranges: list[str] = []
    start = prev = -2
    for slot in sorted(slots):
        if slot != prev + 1:
            if start >= 0:
                ranges.append(f"{start}-{prev}" if prev > start else str(start))
            start = slot
        prev = slot
    if start >= 0:
        ranges.append(f"{start}-{prev}" if prev > start else str(start))
    return ", ".join(ranges[:most]) + (", ..." if len(ranges) > most else "")


class _LastInFirstOut(collections.deque):  # type: ignore[type-arg]
    """A cluster node's free connections, handed out last released first. redis-py sends the
    ``ASKING`` before a command redirected by ``ASK`` on a connection it then releases, and takes the
    oldest free one for the command: with more than one free, the command went without its
    ``ASKING``, was sent back, and a read of a slot being migrated never got its answer. Taking the
    last released one back also keeps the fewest connections warm."""

    def popleft(self) -> Any:
        return self.pop()


def _last_in_first_out(cluster: RedisCluster) -> None:
    for node in cluster.nodes_manager.nodes_cache.values():
        if not isinstance(node._free, _LastInFirstOut):
            node._free = _LastInFirstOut(node._free, maxlen=node._free.maxlen)


class AsyncConnection:
    """One event loop's client of an endpoint.

    ``client`` takes keyed commands and scripts (routed to the key's node in a cluster);
    ``one_node``: whether a command may name keys of different slots (not in a cluster);
    ``capacity``: bounds concurrent operations by ``pool_size`` and by the connections open (see
    :class:`~guardcache.cache.redis.connecting.Capacity`); ``setups``: its connections' set-ups (made
    off the operations' path, see :mod:`~guardcache.cache.redis.connecting`).
    """

    __slots__ = ("capacity", "client", "endpoint", "one_node", "sentinel", "setups")

    def __init__(
        self,
        endpoint: RedisEndpoint,
        client: Redis | RedisCluster,
        *,
        setups: SetUps,
        pool_size: int,
        sentinel: Sentinel | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.client = client
        self.setups = setups
        self.one_node = endpoint.mode != "cluster"
        self.sentinel = sentinel
        self.capacity = Capacity(pool_size, self._grow)

    async def _grow(self, n: int) -> None:
        """``n`` connections taken from the pool (a cluster: from every primary's) all at once, its
        idle ones first and new ones made for the rest, held until every one is set up (off the
        operations' path), then given back: afterwards the pool has at least ``n`` open."""
        client = self.client
        done: list[Any]
        if isinstance(client, RedisCluster):
            taken: list[tuple[ClusterNode, Any]] = []
            _last_in_first_out(client)
            try:
                for node in client.get_primaries():
                    for _ in range(n):
                        taken.append((node, node.acquire_connection()))
                connects = (c.connect() for _, c in taken)
                done = await asyncio.gather(*connects, return_exceptions=True)
            finally:
                for node, connection in taken:
                    node.release(connection)
        else:
            pool = client.connection_pool
            gets = (pool.get_connection() for _ in range(n))  # type: ignore[no-untyped-call]
            done = await asyncio.gather(*gets, return_exceptions=True)
            for connection in done:
                if not isinstance(connection, BaseException):
                    await pool.release(connection)
        failed = next((e for e in done if isinstance(e, BaseException)), None)
        if failed is not None:
            raise failed

    async def set_up(self) -> None:
        """Raise unless the endpoint can serve the tier: standalone and Sentinel, a PING of the
        (current) primary, which sets up a connection (with Sentinel, after asking the Sentinels
        where the primary is); cluster, the slot map read (again, when a node failed since), every
        slot covered by a primary, and every primary answering that it sees the cluster ok (a
        primary that died and was not yet replaced fails it). The store runs it off the
        operations' path: to come up, and as the circuit breaker's probe."""
        client = self.client
        if isinstance(client, RedisCluster):
            await client.initialize()
            _last_in_first_out(client)
            covered = client.nodes_manager.slots_cache.keys()
            if len(covered) < REDIS_CLUSTER_HASH_SLOTS:
                missing = set(range(REDIS_CLUSTER_HASH_SLOTS)) - set(covered)
                await client.aclose()  # read the slot map again next time (aclose marks it stale)
                raise ClusterNotCovered(
                    f"the cluster serves {REDIS_CLUSTER_HASH_SLOTS - len(missing)} of "
                    f"{REDIS_CLUSTER_HASH_SLOTS} slots: no primary for slots {_slot_ranges(missing)}"
                )
            # every primary answers, and sees the cluster ok (a node that has just been given its
            # slots, or that lost sight of a primary, answers CLUSTERDOWN to keyed commands)
            infos: dict[str, Any] = await client.cluster_info(target_nodes=RedisCluster.PRIMARIES)
            if "cluster_state" in infos:  # one primary: its answer itself
                default = client.get_default_node()
                infos = {default.name if default is not None else "the primary": infos}
            down = sorted(name for name, info in infos.items() if info.get("cluster_state") != "ok")
            if down:
                await client.aclose()
                raise ClusterNotCovered(f"cluster_state is not ok on {', '.join(down)}")
        else:
            await client.ping()

    probe = set_up

    async def unreachable_seeds(self, limit_s: float) -> dict[str, str]:
        """A cluster's seed nodes that do not answer a PING within ``limit_s`` (address -> what went
        wrong), each asked on a connection of its own. The client reads the slots from the first
        seed that answers (in random order), so a dead seed may never be noticed otherwise; the
        store asks once, after the tier first came up, to name it in a WARNING."""
        if self.one_node or len(self.endpoint.urls) < 2:
            return {}
        login = self.endpoint._seed_login()

        async def ping(host: str, port: int) -> str | None:
            client = Redis(
                host=host,
                port=port,
                ssl=self.endpoint.uses_tls,
                socket_connect_timeout=limit_s,
                socket_timeout=limit_s,
                retry=Retry(NoBackoff(), 0),
                **login,
            )
            try:
                async with asyncio.timeout(2 * limit_s):
                    await client.ping()
            except (redis.RedisError, OSError, TimeoutError) as exc:
                return describe(exc)
            finally:
                await client.aclose()
            return None

        seeds = self.endpoint._seeds()
        answers = await asyncio.gather(*(ping(host, port) for host, port in seeds))
        return {f"{host}:{port}": why for (host, port), why in zip(seeds, answers, strict=True) if why}

    def stale(self) -> bool:
        """Whether the client must read its topology again before its next command (a cluster
        client after a node failed or the cluster was reshaped): the store does it off the
        operations' path instead of letting the next command do it within its budget."""
        # redis-py's RedisCluster marks this itself and reads the slot map on its next command.
        return bool(getattr(self.client, "_initialize", False)) if not self.one_node else False

    async def aclose(self) -> None:
        await self.capacity.aclose()
        await self.setups.cancel()
        await self.client.aclose()
        if self.sentinel is not None:
            await self.sentinel.aclose()


def async_connection(
    endpoint: RedisEndpoint, *, pool_size: int, timeout: float, connect_timeout: float
) -> AsyncConnection:
    """A client of ``endpoint`` for the running event loop: at most ``pool_size`` operations at once,
    and no more than connections open (a cluster keeps up to twice ``pool_size`` connections per
    node: a rotating lookup holds two),
    redis-py's own timeouts at ``timeout`` (the caller's backstop), no retries; each connection set
    up off the operations' path within ``connect_timeout`` (with Sentinel twice that: the Sentinels
    are asked first)."""
    if endpoint.mode == "standalone":
        setups = SetUps(connect_timeout)
        pool = BlockingConnectionPool.from_url(
            endpoint.url,
            max_connections=pool_size,
            timeout=timeout,  # waiting for a free connection
            socket_timeout=timeout,
            socket_connect_timeout=connect_timeout,
            retry=Retry(NoBackoff(), 0),
            **endpoint._login(),
        )
        pool.connection_class = off_path(pool.connection_class, setups)
        return AsyncConnection(endpoint, Redis.from_pool(pool), setups=setups, pool_size=pool_size)
    if endpoint.mode == "cluster":
        setups = SetUps(connect_timeout)
        cluster = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in endpoint._seeds()],
            # Per node; pool_size operations run at once, and a lookup during a key rotation holds
            # two connections (its two slots may live on one node).
            max_connections=2 * pool_size,
            retry=Retry(NoBackoff(), 0),
            # Keep serving the slots that are covered while a primary is down (those that are not
            # fail fast, as misses) instead of refusing the whole cluster.
            require_full_coverage=False,
            ssl=endpoint.uses_tls,
            socket_timeout=timeout,
            socket_connect_timeout=connect_timeout,
            **endpoint._seed_login(),
        )
        # RedisCluster takes no connection class: its nodes are made with the one in its connection
        # options (the nodes it discovers) and the seed nodes were made with it already.
        wrapped = off_path(_tryagain_fails_fast(cluster.connection_kwargs["connection_class"]), setups)
        cluster.connection_kwargs["connection_class"] = wrapped
        for node in cluster.startup_nodes:
            node.connection_class = wrapped  # type: ignore[assignment]
        return AsyncConnection(endpoint, cluster, setups=setups, pool_size=pool_size)
    setups = SetUps(2 * connect_timeout)
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        endpoint.sentinels,
        sentinel_kwargs=endpoint._sentinel_login(connect_timeout),
        socket_timeout=timeout,
        socket_connect_timeout=connect_timeout,
    )
    managed = SentinelManagedSSLConnection if endpoint.tls else SentinelManagedConnection
    primary = sentinel.master_for(
        endpoint.service_name,
        redis_class=Redis,
        connection_class=off_path(managed, setups),
        max_connections=pool_size,
        db=endpoint.db,
        retry=Retry(NoBackoff(), 0),
        ssl=endpoint.tls,
        **endpoint._login(),
    )
    return AsyncConnection(endpoint, primary, setups=setups, pool_size=pool_size, sentinel=sentinel)


# -- the CLI's clients (synchronous) ------------------------------------------------------------------


class AdminClient:
    """A synchronous view of an endpoint for ``guardcache cache``: ``keyed`` runs commands on a key
    (routed to its node), :meth:`primaries` lists the servers holding data (every primary of a
    cluster) for SCAN and UNLINK; ``one_node`` as in :class:`AsyncConnection`."""

    def __init__(
        self, endpoint: RedisEndpoint, keyed: redis.Redis | redis.RedisCluster, closers: Sequence[Any]
    ) -> None:
        self.endpoint = endpoint
        self.keyed = keyed
        self.one_node = endpoint.mode != "cluster"
        self._closers = list(closers)

    def primaries(self) -> list[redis.Redis]:
        keyed = self.keyed
        if isinstance(keyed, redis.RedisCluster):
            primaries = keyed.get_primaries()  # type: ignore[no-untyped-call]
            return [keyed.get_redis_connection(node) for node in primaries]
        return [keyed]

    def close(self) -> None:
        for closer in self._closers:
            closer.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def admin_client(endpoint: RedisEndpoint, *, timeout: float) -> AdminClient:
    """A synchronous client of ``endpoint`` (a cluster's reads the topology at once, the others
    connect on first use)."""
    if endpoint.mode == "standalone":
        client = redis.Redis.from_url(
            endpoint.url, socket_timeout=timeout, socket_connect_timeout=timeout, **endpoint._login()
        )
        return AdminClient(endpoint, client, [client])
    if endpoint.mode == "cluster":
        from redis.cluster import ClusterNode as SyncNode

        cluster = redis.RedisCluster(
            startup_nodes=[SyncNode(host, port) for host, port in endpoint._seeds()],  # type: ignore[no-untyped-call]
            require_full_coverage=False,
            ssl=endpoint.uses_tls,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            **endpoint._seed_login(),
        )
        return AdminClient(endpoint, cluster, [cluster])
    from redis.sentinel import Sentinel as SyncSentinel

    sentinel = SyncSentinel(  # type: ignore[no-untyped-call]
        endpoint.sentinels,
        sentinel_kwargs=endpoint._sentinel_login(timeout),
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
    )
    primary = sentinel.master_for(  # type: ignore[no-untyped-call]
        endpoint.service_name, db=endpoint.db, ssl=endpoint.tls, **endpoint._login()
    )
    return AdminClient(endpoint, primary, [primary, *sentinel.sentinels])


__all__ = [
    "MODES",
    "AdminClient",
    "AsyncConnection",
    "ClusterNotCovered",
    "Mode",
    "RedisEndpoint",
    "SlotMigrating",
    "admin_client",
    "async_connection",
    "redacted",
]
