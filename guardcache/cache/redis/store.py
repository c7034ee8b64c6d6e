"""RedisStore: the shared tier's Redis operations, each bounded by ``timeout_ms`` and never raising
for a Redis problem.

Every operation returns a result or an :class:`Unavailable`: ``SKIPPED`` when the circuit is open
(Redis was not asked), ``FAILED`` when Redis was asked and was down, slow (past the budget) or
refusing (e.g. OOM, READONLY). The caller then serves from the in-process cache and the backend; after
a FAILED lease request it also cleans up with ``force=True``, because Redis may have taken the lease
before the reply was lost. Errors are counted, logged through a
:class:`~guardcache.cache.redis.health.ThrottledLog`, and open the
:class:`~guardcache.cache.redis.health.CircuitBreaker`, whose probe runs in the background.

Every value crosses Redis sealed (see :mod:`~guardcache.cache.redis.auth`): the store names keys with
an HMAC of the cache key and wraps each payload in an authenticated envelope; a read returns a
:class:`Found` only for a value sealed for that key with this store's secret and not expired, else a
:class:`Rejected` (counted in ``auth_failures``, logged at most once per quiet period). Raw bytes
never reach the caller as a value. During a key rotation (``previous_secret``) a read that finds
nothing under the new name also reads the old name in the same round trip.

Each operation runs under a :class:`~guardcache.cache.redis.health.StallTolerantTimeout` of
``timeout_ms``: a slow Redis times out on time, but a deadline missed because this process's event
loop was blocked (lazy imports, GC, a starved CPU) is extended, since Redis most likely answered.

Connection set-up is not an operation's budget. A loop's client comes up in the background (started
by its first operation, or by :meth:`RedisStore.connect` at start-up): every new connection is set up
within ``connect_timeout_ms`` in a task of its own (TCP, TLS, AUTH; with Sentinel, the primary's
address first; see :mod:`~guardcache.cache.redis.connecting`), then the endpoint is checked as the
probe checks it (a cluster: its slot map read, every slot covered, every primary answering). An
operation that arrives before that waits for it within its own budget and is then
``CONNECTING`` (a miss for that check only: no error, no warning, the circuit untouched); one that
arrives while an attempt has failed and the next waits out its backoff is ``CONNECTING`` at once. A
set-up that fails is logged (a WARNING naming the node or the service, throttled) and tried again
with backoff (0.1 s doubling to 5 s) until the tier is up; the circuit breaker only ever opens on
operations of a tier that was up. Once up, a connection the pool adds later is set up the same way:
an operation that ends while waiting for it is a ``CONNECTING`` miss too. Writes that find the tier
not up (or their connection still being set up) are kept, the last ``pending_writes`` of them, and
written once it is; :meth:`RedisStore.drain` (called by the tiered cache's ``aclose``) waits a
bounded time for them on a graceful stop.

redis-py's asyncio clients and connections belong to the event loop that created them, so the store
keeps one client per running loop (weakly keyed: a closed loop's client goes with it), of the
settings' :class:`~guardcache.cache.redis.clients.RedisEndpoint`: a standalone server, a Redis
Cluster or a Sentinel-managed primary (:mod:`~guardcache.cache.redis.clients` has the clients, their
pools of ``pool_size`` connections and why retries are off).

In a cluster every command names keys of one slot: a value and its lease share a hash tag, so the
scripts work there as on one server. The previous secret's name of an entry (a key rotation) has a
tag of its own, so there what one server answers in one round trip (the value, the lease, the old
value) takes two commands sent together, one per slot. A failover or a moving slot is a Redis
problem like any other: the operations it fails are misses (each within ``timeout_ms``), the circuit
opens, and its probe (the set-up's check, with the set-up's budget: it may read the cluster's
topology again) closes it once every primary answers; in a cluster nothing else closes it (an
operation that came back fine speaks for its own slot's primary only). A slot being migrated
(resharding) is not an outage: single key commands follow ``ASK`` to the slot's new node, but a
multi-key script gets ``TRYAGAIN`` while its keys are split between two nodes (Redis Cluster's
rule), so that slot's lookups miss, counted and logged, without opening the circuit, until the slot
has moved; then ``MOVED`` is followed.
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from redis.commands.core import AsyncScript
from redis.exceptions import (
    ClusterError,
    MaxConnectionsError,
    RedisClusterException,
    RedisError,
    TryAgainError,
)

from guardcache.cache.recorder import DISABLED_RECORDER, StatsRecorder
from guardcache.cache.redis.auth import RedisAuth, check_secret
from guardcache.cache.redis.clients import (
    AsyncConnection,
    RedisEndpoint,
    SlotMigrating,
    async_connection,
    redacted,
)
from guardcache.cache.redis.connecting import SetupWait, describe, done_watching, watching
from guardcache.cache.redis.health import Backoff, CircuitBreaker, Clock, StallTolerantTimeout, ThrottledLog
from guardcache.cache.redis.keys import KeySpace
from guardcache.cache.redis.stats import log

T = TypeVar("T")

_GRACE = 2  # deadline extensions granted when the event loop (not Redis) was stalled
_WRITE_BATCH = 100  # pending writes per pipeline
# What a Redis problem raises (a cluster client that reaches no node raises RedisClusterException,
# which is not a RedisError).
_REDIS_FAILURES = (RedisError, RedisClusterException, OSError, TimeoutError)


def _slot_moving(exc: BaseException) -> bool:
    """Whether ``exc`` says one slot is being migrated (resharding), not that Redis is failing:
    Redis Cluster answers TRYAGAIN to a multi-key command (the lease scripts) while the slot's keys
    are split between two nodes, and redis-py gives up ("TTL exhausted", a bare ``ClusterError``)
    when the redirections do not settle. Only that slot's operations fail, until it has moved."""
    return isinstance(exc, TryAgainError | SlotMigrating) or type(exc) is ClusterError


# A value, or the lease: 1 = acquired by this token, 0 = held by someone else. ARGV[3] is a value the
# caller rejected (failed authentication, or undecodable): it counts as absent, so the entry is
# recomputed under the lease and overwritten. KEYS[3], only during a key rotation, is the same entry's
# name under the previous secret: when the value is absent, {lease flag, old value} if one exists.
# (Three keys of two slots: one server only; in a cluster the old name is read by a GET of its own.)
_GET_OR_LEASE = """
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[3] then return v end
local leased = 0
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then leased = 1 end
if KEYS[3] then
  local old = redis.call('GET', KEYS[3])
  if old then return {leased, old} end
end
return leased
"""
# Write the value, then drop the lease only if it is still ours (it may have expired and been taken).
_SET_AND_RELEASE = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if redis.call('GET', KEYS[2]) == ARGV[3] then redis.call('DEL', KEYS[2]) end
return 1
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class Lease(enum.Enum):
    """What a load found when the value was absent."""

    ACQUIRED = "acquired"  # this caller computes, then writes the value and releases the lease
    HELD = "held"  # another caller (replica) computes: wait for its value


class Unavailable(enum.Enum):
    """Redis could not be used for this operation."""

    SKIPPED = "skipped"  # the circuit is open: Redis was not asked (costs nothing)
    FAILED = "failed"  # Redis was asked and did not answer in time, or refused
    # The tier is not up yet (its client is being set up, or waits to try again), or the operation
    # ended while its connection was still being set up: a miss for this operation, not a failure.
    CONNECTING = "connecting"


SKIPPED = Unavailable.SKIPPED
FAILED = Unavailable.FAILED
CONNECTING = Unavailable.CONNECTING


@dataclass(frozen=True, slots=True)
class Found:
    """A value that passed authentication: sealed for this key, with this store's secret (or, when
    ``previous``, the previous secret during a rotation), and not expired."""

    payload: bytes  # what the caller stored: the codec's bytes
    raw: bytes = field(repr=False)  # the envelope as Redis holds it (to ignore it if undecodable)
    expires_at_ms: int  # authenticated expiry (wall clock, ms): a re-write keeps it
    previous: bool = False  # read under the previous secret's name: re-write it under the new one
    lease: Lease | None = None  # previous values only: the new name's lease, taken in the same trip


@dataclass(frozen=True, slots=True)
class Rejected:
    """A value under this key that failed authentication: a miss (already counted and logged)."""

    raw: bytes = field(repr=False)  # what Redis holds, for ``get_or_lease(ignore=...)``


def _now_ms() -> int:
    """Wall-clock milliseconds: expiries are compared across hosts (keep their clocks in sync)."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class RedisSettings:
    """Plain settings of the shared tier (no config objects: ``guardcache.cache`` is standalone).

    Where Redis is: ``url`` (one standalone server), or ``endpoint`` (any mode: a cluster's seed
    nodes, Sentinels, credentials, TLS); after construction both are set (``url``: the endpoint's
    first URL, ``""`` with Sentinel). ``url`` is excluded from ``repr`` because it may carry a
    password, ``secret`` and ``previous_secret`` because they authenticate every entry. ``secret``
    (at least 16 bytes) names keys and tags values; ``previous_secret``, during a key rotation only,
    is also accepted on read (entries found under it are re-written under ``secret``). There is no
    unauthenticated mode: a shared tier anyone with Redis access could fill with verdicts is worse
    than no shared tier.
    """

    url: str = field(default="", repr=False)
    endpoint: RedisEndpoint | None = None
    secret: bytes = field(repr=False)
    ttl_s: float = 86400.0  # entries expire in Redis (SET ... PX)
    key_prefix: str = "guardcache"
    timeout_ms: float = 50.0  # budget of each Redis operation (on an open connection)
    # Setting up each connection (TCP, TLS, AUTH; with Sentinel twice this: the Sentinels are asked
    # first) and reading a cluster's slot map: off the operations' path, never within timeout_ms.
    connect_timeout_ms: float = 1000.0
    pending_writes: int = 1000  # writes kept (the last ones) while the tier is not up yet
    pool_size: int = 16  # connections per event loop
    lease_ms: int = 5000  # cross-replica single flight: how long a leader may hold a key
    wait_margin_ms: int = 250  # a waiter gives up after lease_ms + this, and computes itself
    breaker_base_s: float = 0.1  # circuit open time after the first error; doubles per failed probe
    breaker_cap_s: float = 5.0
    stats_flush_interval_s: float = 10.0  # push counter deltas at most this long after a lookup
    stats_flush_events: int = 1000  # ... or after this many lookups, whichever comes first
    previous_secret: bytes | None = field(default=None, repr=False)  # during a key rotation only

    def __post_init__(self) -> None:
        positive = ("ttl_s", "timeout_ms", "connect_timeout_ms", "pool_size", "lease_ms", "breaker_base_s")
        for name in (*positive, "stats_flush_interval_s", "stats_flush_events"):
            if getattr(self, name) <= 0:
                raise ValueError(f"RedisSettings.{name} must be > 0 (got {getattr(self, name)!r})")
        if self.pending_writes < 0:
            raise ValueError(f"RedisSettings.pending_writes must be >= 0 (got {self.pending_writes!r})")
        if self.wait_margin_ms < 0 or self.breaker_cap_s < self.breaker_base_s:
            raise ValueError("RedisSettings: need wait_margin_ms >= 0 and breaker_cap_s >= breaker_base_s")
        if self.endpoint is None:
            if not self.url.startswith(("redis://", "rediss://", "unix://")):
                raise ValueError("RedisSettings.url must be a redis://, rediss:// or unix:// URL")
            object.__setattr__(self, "endpoint", RedisEndpoint.of_url(self.url))
        elif self.url and self.url != self.endpoint.url:
            raise ValueError("RedisSettings: give url (one standalone server) or endpoint, not both")
        else:
            object.__setattr__(self, "url", self.endpoint.url)
        check_secret(self.secret, "secret")
        if self.previous_secret is not None:
            check_secret(self.previous_secret, "previous secret")
            if self.previous_secret == self.secret:
                raise ValueError(
                    "the previous Redis secret equals the current one: drop it, or give the old one"
                )

    @property
    def where(self) -> RedisEndpoint:
        """The endpoint (set by construction)."""
        assert self.endpoint is not None
        return self.endpoint

    @property
    def ttl_ms(self) -> int:
        return max(1, round(self.ttl_s * 1000))

    @property
    def timeout_s(self) -> float:
        return self.timeout_ms / 1000

    @property
    def connect_timeout_s(self) -> float:
        return self.connect_timeout_ms / 1000


class _LoopClient:
    """A client of one event loop, its registered scripts (``one_node`` and ``capacity``: see
    :class:`~guardcache.cache.redis.clients.AsyncConnection`) and its set-up: ``up`` once it has
    come up; ``attempt`` resolves (to whether it came up) when the set-up attempt in progress ends
    (None between attempts); ``pending``: Redis key -> (payload, expiry) written once it is up."""

    __slots__ = (
        "attempt",
        "capacity",
        "client",
        "connection",
        "connector",
        "get_or_lease",
        "one_node",
        "pending",
        "release",
        "set_and_release",
        "up",
        "writer",
    )

    def __init__(self, connection: AsyncConnection) -> None:
        self.connection = connection
        self.client = client = connection.client
        self.capacity = connection.capacity
        self.one_node = connection.one_node
        self.get_or_lease: AsyncScript = client.register_script(_GET_OR_LEASE)
        self.set_and_release: AsyncScript = client.register_script(_SET_AND_RELEASE)
        self.release: AsyncScript = client.register_script(_RELEASE)
        self.up = False
        self.attempt: asyncio.Future[bool] | None = None
        self.connector: asyncio.Task[None] | None = None
        self.writer: asyncio.Task[None] | None = None
        self.pending: OrderedDict[str, tuple[bytes, int]] = OrderedDict()


class RedisStore:
    """Bytes in, bytes out, under one :class:`KeySpace`; see the module doc for failure handling."""

    def __init__(self, settings: RedisSettings, keys: KeySpace, *, clock: Clock = time.monotonic) -> None:
        self.settings = settings
        self.keys = keys
        self._auth = RedisAuth(settings.secret, keys.base)
        self._previous = (
            RedisAuth(settings.previous_secret, keys.base) if settings.previous_secret is not None else None
        )
        #: Where failed operations and authentication failures are counted; a TieredCache sets its
        #: own (its L1's), so that one snapshot holds them with the tier's other counters.
        self.recorder: StatsRecorder = DISABLED_RECORDER
        self._auth_warn = ThrottledLog(log, clock=clock)
        self._timeout = settings.timeout_s
        self._ttl_ms = settings.ttl_ms
        self._lease_ms = str(settings.lease_ms)
        self.breaker = CircuitBreaker(base=settings.breaker_base_s, cap=settings.breaker_cap_s, clock=clock)
        self._warn = ThrottledLog(log, clock=clock)
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        self._probes: set[asyncio.Task[None]] = set()
        self._endpoint = settings.where
        self._where = f"{self._endpoint.describe()} ({keys.base}*)"
        cluster = self._endpoint.mode == "cluster"
        connect = settings.connect_timeout_s
        # A set-up attempt, and the probe (the same check): connections set up (each within the
        # connect timeout: a cluster's seed node first, then every primary), then a round trip.
        self._setup_budget = 2 * connect + self._timeout
        self._probe_budget = self._setup_budget
        # Work off the requests' path (the stats flush, pending writes) may wait for a connection.
        self._background_budget = max(1.0, self._timeout) + connect
        self._pending_max = settings.pending_writes
        self._setup_backoff = Backoff(settings.breaker_base_s, settings.breaker_cap_s)
        self._setup_retry_at = 0.0  # no set-up attempt before this (clock); after a failed one
        self._setup_failing = False  # an attempt failed since the tier was last up
        self._clock = clock
        self._seeds_checked = False  # a cluster's seed nodes are asked once, after it first came up
        self._tasks: set[asyncio.Task[None]] = set()
        self.writes_dropped = 0  # pending writes given up (over the bound, or never written)
        # On one server, an operation that began before the circuit opened and came back fine shows
        # that Redis answers again. In a cluster it shows only that its own slot's primary does:
        # there only the probe (every primary) closes the circuit, so a dead shard does not reopen
        # it for every other operation.
        self._ops_close_circuit = not cluster
        if self._previous is not None:
            log.info(
                "Redis tier %s: key rotation on: entries sealed with the previous secret are read and "
                "re-written with the current one",
                self._where,
            )

    # -- plumbing ---------------------------------------------------------------------------------

    def _make_client(self) -> AsyncConnection:
        # redis-py's own timeouts are only a backstop, set past the longest a StallTolerantTimeout
        # can run (budget x (1 + grace), plus a few loop iterations): redis-py cannot tell a slow
        # Redis from a stalled event loop, and would fail operations Redis already answered.
        s = self.settings
        backstop = max(s.timeout_s, self._probe_budget) * (2 + _GRACE)
        return async_connection(
            self._endpoint, pool_size=s.pool_size, timeout=backstop, connect_timeout=s.connect_timeout_s
        )

    def _client(self) -> _LoopClient:
        loop = asyncio.get_running_loop()
        state = self._clients.get(loop)
        if state is None:
            with self._lock:
                state = self._clients.get(loop)
                if state is None:
                    state = self._clients[loop] = _LoopClient(self._make_client())
                    state.capacity.on_failure = self._growing_failed
        return state

    def _growing_failed(self, exc: BaseException) -> None:
        """A connection more for a tier that is up could not be set up: Redis fails (a full pool
        is no failure of Redis)."""
        if isinstance(exc, _REDIS_FAILURES) and not isinstance(exc, MaxConnectionsError):
            self._failed(exc)

    async def _run(
        self,
        op: Callable[[_LoopClient], Awaitable[T]],
        *,
        budget: float | None = None,
        force: bool = False,
        wait: bool = True,
    ) -> T | Unavailable:
        """``op`` within the budget: CONNECTING while this loop's client is not up (after waiting
        for its set-up within the budget when ``wait``, or when the op ended while a connection it
        needed was still being set up), SKIPPED while the circuit is open (unless ``force``),
        FAILED (counted, logged, circuit opened) on any error of a tier that was up.

        A cancelled operation ends cancelled, whatever the error it surfaced as: redis-py's
        clean-up on a cancellation can raise a ``ConnectionError`` or a ``TimeoutError`` in its
        place (its reads run under ``asyncio.timeout``, and it disconnects on the way out). Taken
        for a failure, that swallowed the cancellation: the caller went on (a clear watch polled
        on forever in a loop being shut down) and the circuit opened for nothing. Whether a cancel
        was requested is the task's own count (``cancelling()``), read against its value here."""
        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0
        if not force and not self.breaker.allow():
            if self.breaker.probe_due():
                self._start_probe()
            return SKIPPED
        state = self._client()
        attempt = None
        if not state.up or state.connection.stale():
            attempt = self._start_setup(state)
            if attempt is None or not wait:
                return CONNECTING
        setup = SetupWait()
        setups = state.connection.setups
        mark = -1 if setups.running else setups.started  # to tell whether set-ups overlapped this op
        token = watching(setup)
        turn = False
        try:
            async with StallTolerantTimeout(budget or self._timeout, grace=_GRACE):
                if attempt is not None:  # the client is being set up: wait for it, within the budget
                    setup.pending += 1
                    if not await asyncio.shield(attempt):
                        return CONNECTING
                    setup.pending -= 1
                async with state.capacity:  # a free connection, or a turn on one: within the budget
                    turn = True
                    result = await op(state)
        except _REDIS_FAILURES as exc:
            if task is not None and task.cancelling() > cancels:
                raise asyncio.CancelledError from exc  # cancelled: not a failure (see above)
            if setup.still_connecting or (
                # The budget ran out in an op that waited for its client to come up, or for a turn
                # while connections were being set up (its own, or more for the pool): the time
                # went to setting up, not to Redis failing to answer. (A Redis that hangs fails
                # those set-ups within the connect timeout, and the circuit opens then.)
                type(exc) is TimeoutError
                and setup.failed is None
                and (
                    attempt is not None
                    or (not turn and (mark < 0 or setups.started != mark or setups.running))
                )
            ):
                return CONNECTING  # a set-up outlasted the budget: this op's miss, Redis did not fail
            if _slot_moving(exc):
                self._slot_moving(exc)
            else:
                self._failed(exc)
            return FAILED
        finally:
            done_watching(token)
        if not self.breaker.closed and self._ops_close_circuit:
            self._recovered()  # an operation begun before the circuit opened came back fine
        return result

    def _failed(self, exc: BaseException, *, probe: bool = False) -> None:
        self.recorder.record_l2_error()
        self.breaker.record_failure(probe=probe)
        self._warn.warning(
            f"Redis tier {self._where} unavailable ({describe(exc)}); serving from the in-process cache "
            f"and the backend, next probe in {self.breaker.retry_in() * 1000:.0f} ms"
        )

    def _slot_moving(self, exc: BaseException) -> None:
        """An operation on a slot being migrated: a miss (counted, logged), the circuit stays as it
        is, since every other slot answers."""
        self.recorder.record_l2_error()
        self._warn.warning(
            f"Redis tier {self._where}: a slot is being migrated ({type(exc).__name__}: {exc}); its "
            "lookups are served from the in-process cache and the backend until it has moved"
        )

    def _recovered(self) -> None:
        self.breaker.record_success()
        self._warn.recovered(f"Redis tier {self._where} is reachable again")

    def _start_probe(self) -> None:
        task = asyncio.get_running_loop().create_task(self._probe(), name="guardcache-redis-probe")
        self._probes.add(task)
        task.add_done_callback(self._probes.discard)

    async def _probe(self) -> None:
        """The endpoint checked off the request path, connections set up under the connect timeout
        (a cluster: the topology, then every primary): closes the circuit, or reopens it for a
        longer backoff."""
        try:
            async with StallTolerantTimeout(self._probe_budget, grace=_GRACE):
                state = self._client()
                await state.connection.probe()  # no turn needed: it sets up what it uses
        except _REDIS_FAILURES as exc:
            self._failed(exc, probe=True)
        except BaseException:
            self.breaker.record_failure(probe=True)  # never leave the breaker "probing" forever
            raise
        else:
            self._recovered()
            if not state.up:  # a loop whose client had not come up: the probe brought it up
                state.up = True
                if state.capacity.open == 0:
                    state.capacity.opened()
                if state.pending:
                    self._start_writer(state)

    # -- set-up (off the operations' path) --------------------------------------------------------

    def _start_setup(self, state: _LoopClient) -> asyncio.Future[bool] | None:
        """Make sure this loop's client is coming up; the attempt in progress (None while the next
        one waits out a backoff)."""
        if state.connector is None or state.connector.done():
            state.up = False
            loop = asyncio.get_running_loop()
            if self._clock() >= self._setup_retry_at:
                state.attempt = loop.create_future()  # now, so that the caller can wait for it
            state.connector = loop.create_task(self._connect(state), name="guardcache-redis-setup")
        return state.attempt

    async def _connect(self, state: _LoopClient) -> None:
        """Attempts, with backoff between them, until this loop's client is up."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                delay = self._setup_retry_at - self._clock()
                if delay > 0:
                    await asyncio.sleep(delay)  # ops meanwhile are CONNECTING at once (no attempt)
                attempt = state.attempt
                if attempt is None or attempt.done():
                    attempt = state.attempt = loop.create_future()
                up = False
                try:
                    up = await self._attempt(state)
                finally:
                    state.attempt = None
                    if not attempt.done():
                        attempt.set_result(up)
                if up:
                    return
        finally:
            state.connector = None

    async def _attempt(self, state: _LoopClient) -> bool:
        """One set-up attempt: whether the client came up (a failure is counted and logged)."""
        try:
            async with StallTolerantTimeout(self._setup_budget, grace=_GRACE):
                await state.connection.set_up()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a Redis problem (or a redis-py bug): not up, try again later
            self.recorder.record_l2_error()
            retry = self._setup_backoff.next()
            self._setup_retry_at = self._clock() + retry
            self._setup_failing = True
            if type(exc) is TimeoutError:
                exc = TimeoutError(f"not set up within {self._setup_budget * 1000:.0f} ms")
            self._warn.warning(
                f"Redis tier {self._where} not connected ({describe(exc)}); serving from the in-process "
                f"cache and the backend, next attempt in {retry * 1000:.0f} ms"
            )
            return False
        state.up = True
        if state.capacity.open == 0:
            state.capacity.opened()  # the connection (a cluster: one per primary) the set-up opened
        self._setup_backoff.reset()
        self._setup_retry_at = 0.0
        if not self._seeds_checked:
            self._seeds_checked = True
            self._background(self._check_seeds(state.connection))
        if self._setup_failing:
            self._setup_failing = False
            self._warn.recovered(f"Redis tier {self._where} is connected")
        if not self.breaker.closed:
            self._recovered()  # the set-up checked what the probe checks
        if state.pending:
            self._start_writer(state)
        return True

    async def _check_seeds(self, connection: AsyncConnection) -> None:
        """Name the seed nodes that did not answer (the tier is up through another one)."""
        unreachable = await connection.unreachable_seeds(self.settings.connect_timeout_s)
        if unreachable:
            nodes = "; ".join(f"{node} ({why})" for node, why in unreachable.items())
            self._warn.warning(
                f"Redis tier {self._where} is up, but seed node(s) did not answer: {nodes}; a replica "
                "started while the others are down too cannot reach the cluster"
            )

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- writes kept while the tier is not up -----------------------------------------------------

    def _keep(self, state: _LoopClient, name: str, payload: bytes, expires_at_ms: int | None) -> None:
        """Keep a write for when the tier is up: the last ``pending_writes`` (one per key)."""
        if self._pending_max <= 0:
            self.writes_dropped += 1
            return
        pending = state.pending
        pending[name] = (payload, expires_at_ms if expires_at_ms is not None else _now_ms() + self._ttl_ms)
        pending.move_to_end(name)
        while len(pending) > self._pending_max:
            pending.popitem(last=False)
            self.writes_dropped += 1
        if state.up:  # kept because its connection was still being set up: write it soon
            self._start_writer(state)

    def _start_writer(self, state: _LoopClient) -> None:
        if state.writer is None or state.writer.done():
            state.writer = asyncio.get_running_loop().create_task(
                self._write_pending(state), name="guardcache-redis-pending-writes"
            )

    async def _write_pending(self, state: _LoopClient) -> None:
        """Write the kept values, in pipelines of ``_WRITE_BATCH``, while the tier is up."""
        try:
            while state.pending and state.up:
                batch: list[tuple[str, tuple[bytes, int]]] = []
                while state.pending and len(batch) < _WRITE_BATCH:
                    batch.append(state.pending.popitem(last=False))
                now = _now_ms()
                batch = [(name, value) for name, value in batch if value[1] > now]  # not expired

                async def op(c: _LoopClient, batch: list[tuple[str, tuple[bytes, int]]] = batch) -> bool:
                    async with c.client.pipeline(transaction=False) as pipe:
                        for name, (payload, expires_at_ms) in batch:
                            data, px = self._seal(name, payload, expires_at_ms)
                            pipe.set(name, data, px=px)
                        await pipe.execute()
                    return True

                done = await self._run(op, budget=self._background_budget) if batch else True
                if done is CONNECTING:  # not up again, or a connection still being set up: later
                    for name, value in reversed(batch):
                        if name not in state.pending:
                            state.pending[name] = value
                            state.pending.move_to_end(name, last=False)
                    return
                if done is not True:
                    self.writes_dropped += len(batch)  # the failure is counted and logged
                    return
        finally:
            state.writer = None

    async def drain(self, *, wait_for_setup: bool = True) -> int:
        """Write what is kept for this loop's client, within a bounded time: a set-up in progress
        is waited for (when ``wait_for_setup``; at most one attempt's budget), then the writes get
        the background budget. Called on a graceful stop; returns how many writes were given up."""
        state = self._clients.get(asyncio.get_running_loop())
        if state is None or not state.pending:
            return 0
        deadline = self._clock() + self._setup_budget + self._background_budget
        if not state.up and wait_for_setup and state.attempt is not None:
            await self._wait(state.attempt, deadline - self._clock())
        if state.up and state.pending:
            self._start_writer(state)
        writer = state.writer
        if writer is not None:
            await self._wait(writer, deadline - self._clock())
        left = len(state.pending)
        if left:
            self.writes_dropped += left
            state.pending.clear()
            log.info(
                "Redis tier %s: %d verdicts computed while it was not connected were not written",
                self._where,
                left,
            )
        return left

    @staticmethod
    async def _wait(work: asyncio.Future[Any], within: float) -> None:
        if within <= 0:
            return
        try:
            async with StallTolerantTimeout(within, grace=_GRACE):
                await asyncio.shield(work)
        except (TimeoutError, *_REDIS_FAILURES):
            pass

    async def connect(self) -> bool:
        """Bring this loop's client up now and open its pool (``pool_size`` connections; a cluster:
        to each primary), e.g. at start-up, so that the first checks find the tier up and a burst
        finds a connection each; at most about twice the connect timeout for each; whether it is
        up. Optional: the first operation starts the set-up anyway, and the pool grows as
        operations queue for connections."""
        state = self._client()
        if not state.up or state.connection.stale():
            attempt = self._start_setup(state)
            if attempt is not None:
                await self._wait(attempt, self._setup_budget + self._timeout)
        if state.up:
            await self._wait(asyncio.ensure_future(state.capacity.fill()), self._setup_budget + self._timeout)
        return state.up

    @property
    def connecting(self) -> bool:
        """Whether a loop's client is not up (being set up, or waiting to try again)."""
        return any(not state.up for state in list(self._clients.values()))

    def pending_writes(self) -> int:
        """Writes kept for the running loop's client until it is up."""
        state = self._clients.get(asyncio.get_running_loop())
        return 0 if state is None else len(state.pending)

    # -- names and envelopes ----------------------------------------------------------------------

    def value_key(self, key: Any) -> str:
        """The Redis key of ``key``'s value: its name is an HMAC under the secret."""
        return self.keys.value_key(self._auth.key_digest(key))

    def lease_key(self, key: Any) -> str:
        """The Redis key of ``key``'s lease (same name, same cluster slot as the value)."""
        return self.keys.lease_key(self._auth.key_digest(key))

    def previous_value_key(self, key: Any) -> str | None:
        """The value's key under the previous secret while rotating, else None."""
        if self._previous is None:
            return None
        return self.keys.value_key(self._previous.key_digest(key))

    def _seal(self, name: str, payload: bytes, expires_at_ms: int | None) -> tuple[bytes, int]:
        """The envelope and its PX: now + ttl, or what is left until ``expires_at_ms``."""
        now = _now_ms()
        if expires_at_ms is None:
            expires_at_ms = now + self._ttl_ms
        return self._auth.seal(name, payload, expires_at_ms), max(1, expires_at_ms - now)

    def _open(
        self, name: str, raw: Any, *, previous: bool = False, lease: Lease | None = None
    ) -> Found | Rejected:
        """Authenticate what Redis returned for ``name`` (not nil)."""
        data = raw if isinstance(raw, bytes) else str(raw).encode()
        auth = self._previous if previous else self._auth
        opened = auth.open(name, data, _now_ms()) if auth is not None else None
        if opened is None:
            self._rejected()
            return Rejected(data)
        payload, expires_at_ms = opened
        return Found(payload, data, expires_at_ms, previous, lease)

    def _rejected(self) -> None:
        self.recorder.record_l2_auth_failure()
        # Never the key's text (there is none: keys are digests) nor the value: only where.
        self._auth_warn.warning(
            f"Redis tier {self._where}: a value failed authentication (forged, tampered, moved from "
            "another key, sealed with another secret, or kept past its expiry); served as a miss "
            "and overwritten"
        )

    # -- operations -------------------------------------------------------------------------------

    async def ping(self) -> bool:
        """The probe's check through this loop's client (in a cluster, every primary, after reading
        the topology), once it is up; whether Redis answered."""

        async def op(c: _LoopClient) -> bool:
            await c.connection.probe()
            return True

        return await self._run(op, budget=self._probe_budget) is True

    async def get(self, key: Any) -> Found | Rejected | Unavailable | None:
        """The authenticated value, None when absent (or, rotating, absent under both names)."""
        name = self.value_key(key)
        old = self.previous_value_key(key)

        async def op(c: _LoopClient) -> Found | Rejected | None:
            if old is None:
                current = await c.client.get(name)
                return None if current is None else self._open(name, current)
            if c.one_node:
                current, previous = await c.client.mget(name, old)
            else:  # two slots: one GET each, sent together
                current, previous = await asyncio.gather(c.client.get(name), c.client.get(old))
            if current is not None:
                return self._open(name, current)
            found = None if previous is None else self._open(old, previous, previous=True)
            return found if isinstance(found, Found) else None

        return await self._run(op)

    async def get_or_lease(
        self, key: Any, token: str, ignore: bytes = b""
    ) -> Found | Rejected | Lease | Unavailable:
        """In one round trip: the value (unless it is ``ignore``), else try to take the lease.

        Rotating, an absent value also reads the previous name: a valid value there comes back as a
        ``Found`` with ``previous`` set and ``lease`` telling whether this call took the new lease
        (then the caller must write or release it, as for ``Lease.ACQUIRED``)."""
        digest = self._auth.key_digest(key)
        name, lease = self.keys.value_key(digest), self.keys.lease_key(digest)
        old = self.previous_value_key(key)
        keys = [name, lease] if old is None else [name, lease, old]
        args: list[str | bytes] = [token, self._lease_ms, ignore]

        async def op(c: _LoopClient) -> Found | Rejected | Lease:
            reply: Any
            if old is not None and not c.one_node:
                # Two slots: the script on the new name's slot, a GET of the old name, sent together.
                reply, old_value = await asyncio.gather(
                    c.get_or_lease(keys=keys[:2], args=args), c.client.get(old)
                )
                if not isinstance(reply, bytes) and old_value is not None:
                    reply = [reply, old_value]  # as the one-server script answers: [lease flag, old value]
            else:
                reply = await c.get_or_lease(keys=keys, args=args)
            if isinstance(reply, bytes):
                return self._open(name, reply)
            if isinstance(reply, list) and old is not None:  # rotating: [lease flag, old value]
                flag = Lease.ACQUIRED if reply[0] == 1 else Lease.HELD
                previous = self._open(old, reply[1], previous=True, lease=flag)
                return previous if isinstance(previous, Found) else flag
            return Lease.ACQUIRED if reply == 1 else Lease.HELD

        return await self._run(op)

    async def set(self, key: Any, payload: bytes, *, expires_at_ms: int | None = None) -> bool:
        """Seal ``payload`` for the key and ``SET ... PX`` until its expiry (now + ttl unless
        given: a rotation re-write keeps the original expiry); whether it was stored."""
        name = self.value_key(key)

        async def op(c: _LoopClient) -> bool:
            data, px = self._seal(name, payload, expires_at_ms)
            return bool(await c.client.set(name, data, px=px))

        # Like a read, a write waits for a set-up in progress within its budget; if the tier is not
        # up by then (or its connection is still being set up), it is kept and written once it is.
        done = await self._run(op)
        if done is CONNECTING:
            self._keep(self._client(), name, payload, expires_at_ms)
        return done is True

    async def set_and_release(
        self,
        key: Any,
        payload: bytes,
        token: str,
        *,
        force: bool = False,
        expires_at_ms: int | None = None,
    ) -> bool:
        """Store the sealed value and drop our lease (if still ours) in one round trip; ``force``:
        even with the circuit open (cleanup after a lease request whose reply was lost)."""
        digest = self._auth.key_digest(key)
        name, lease = self.keys.value_key(digest), self.keys.lease_key(digest)

        async def op(c: _LoopClient) -> bool:
            data, px = self._seal(name, payload, expires_at_ms)
            await c.set_and_release(keys=[name, lease], args=[data, px, token])
            return True

        done = await self._run(op, force=force, wait=False)
        if done is CONNECTING:  # the value is kept; a lease, if we hold one, expires by itself
            self._keep(self._client(), name, payload, expires_at_ms)
        return done is True

    async def release(self, key: Any, token: str, *, force: bool = False) -> bool:
        """Drop our lease (compare-and-delete: never someone else's); whether it was deleted."""

        async def op(c: _LoopClient) -> bool:
            return bool(await c.release(keys=[self.lease_key(key)], args=[token]))

        return await self._run(op, force=force, wait=False) is True

    async def delete(self, key: Any) -> bool:
        """Remove the value (rotating: under both names, or a read would bring it back); whether it
        existed."""
        names = [self.value_key(key)]
        old = self.previous_value_key(key)
        if old is not None:
            names.append(old)

        async def op(c: _LoopClient) -> bool:
            if c.one_node or len(names) == 1:
                return bool(await c.client.unlink(*names))
            return any(await asyncio.gather(*(c.client.unlink(n) for n in names)))  # two slots

        return await self._run(op) is True

    async def add_counters(self, deltas: Mapping[str, int]) -> dict[Any, Any] | Unavailable:
        """HINCRBY each nonzero delta into the scope's stats hash, then read it back: one pipeline.

        Not on a request's path, so it gets a longer budget (at least 1 s, plus the connect
        timeout: it may wait for the tier to come up)."""

        async def op(c: _LoopClient) -> dict[Any, Any]:
            async with c.client.pipeline(transaction=False) as pipe:
                for name, n in deltas.items():
                    if n:
                        pipe.hincrby(self.keys.stats_key, name, n)
                pipe.hgetall(self.keys.stats_key)
                replies = await pipe.execute()
            totals: dict[Any, Any] = replies[-1]
            return totals

        return await self._run(op, budget=self._background_budget)

    async def background(self, op: Callable[[Any], Awaitable[T]]) -> T | Unavailable:
        """``op`` on this loop's redis-py client with the budget of work off the requests' path,
        under every rule of the other operations (set-up, breaker, counting): the tier's upkeep
        that lives in modules of its own (the clear watch, :mod:`~guardcache.cache.redis.clearing`)."""

        async def on_client(c: _LoopClient) -> T:
            return await op(c.client)

        return await self._run(on_client, budget=self._background_budget)

    # -- state ------------------------------------------------------------------------------------

    @property
    def warnings_logged(self) -> int:
        return self._warn.emitted + self._auth_warn.emitted

    async def aclose(self) -> None:
        """Close the running loop's client (other loops' clients close with their loops); what is
        still kept for it is dropped (call :meth:`drain` first to write it)."""
        loop = asyncio.get_running_loop()
        for mine in [t for t in self._tasks if t.get_loop() is loop and not t.done()]:
            mine.cancel()
            await asyncio.gather(mine, return_exceptions=True)
        state = self._clients.pop(loop, None)
        if state is not None:
            state.up = False
            self.writes_dropped += len(state.pending)
            state.pending.clear()
            for task in (state.connector, state.writer):
                if task is not None and not task.done():
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
            await state.connection.aclose()


__all__ = [
    "CONNECTING",
    "FAILED",
    "SKIPPED",
    "Found",
    "Lease",
    "RedisSettings",
    "RedisStore",
    "Rejected",
    "Unavailable",
    "redacted",
]
