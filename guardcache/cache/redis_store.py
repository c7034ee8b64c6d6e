"""RedisStore: the shared tier's Redis operations, each bounded by ``timeout_ms`` and never raising
for a Redis problem.

Every operation returns a result or an :class:`Unavailable`: ``SKIPPED`` when the circuit is open
(Redis was not asked), ``FAILED`` when Redis was asked and was down, slow (past the budget) or
refusing (e.g. OOM, READONLY). The caller then serves from the in-process cache and the backend; after
a FAILED lease request it also cleans up with ``force=True``, because Redis may have taken the lease
before the reply was lost. Errors are counted, logged through a
:class:`~guardcache.cache.redis_health.ThrottledLog`, and open the
:class:`~guardcache.cache.redis_health.CircuitBreaker`, whose probe runs in the background.

Each operation runs under a :class:`~guardcache.cache.redis_health.StallTolerantTimeout` of
``timeout_ms``: a slow Redis times out on time, but a deadline missed because this process's event
loop was blocked (lazy imports, GC, a starved CPU) is extended, since Redis most likely answered.

redis-py's asyncio clients and connections belong to the event loop that created them, so the store
keeps one client per running loop (weakly keyed: a closed loop's client goes with it). Each client
has a ``BlockingConnectionPool`` of ``pool_size`` connections: ``Redis.from_url`` would build a
non-blocking pool, which raises "Too many connections" on a burst of concurrent checks instead of
queueing them for a connection within the budget. Retries are off (``Retry(NoBackoff(), 0)``): a
retry would spend the request's budget on a Redis that has just failed.
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from guardcache.cache.redis_health import CircuitBreaker, Clock, StallTolerantTimeout, ThrottledLog
from guardcache.cache.redis_keys import KeySpace
from guardcache.cache.redis_stats import log

T = TypeVar("T")

_GRACE = 2  # deadline extensions granted when the event loop (not Redis) was stalled

# A value, or the lease: 1 = acquired by this token, 0 = held by someone else. ARGV[3] is a value the
# caller could not decode: it counts as absent, so a corrupt entry is recomputed under the lease.
_GET_OR_LEASE = """
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[3] then return v end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
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


SKIPPED = Unavailable.SKIPPED
FAILED = Unavailable.FAILED


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """Plain settings of the shared tier (no config objects: ``guardcache.cache`` is standalone).

    ``url`` is excluded from ``repr`` because it may carry a password.
    """

    url: str = field(repr=False)
    ttl_s: float = 86400.0  # entries expire in Redis (SET ... PX)
    key_prefix: str = "guardcache"
    timeout_ms: float = 50.0  # budget of each Redis operation
    pool_size: int = 16  # connections per event loop
    lease_ms: int = 5000  # cross-replica single flight: how long a leader may hold a key
    wait_margin_ms: int = 250  # a waiter gives up after lease_ms + this, and computes itself
    breaker_base_s: float = 0.1  # circuit open time after the first error; doubles per failed probe
    breaker_cap_s: float = 5.0
    stats_flush_interval_s: float = 10.0  # push counter deltas at most this long after a lookup
    stats_flush_events: int = 1000  # ... or after this many lookups, whichever comes first

    def __post_init__(self) -> None:
        positive = ("ttl_s", "timeout_ms", "pool_size", "lease_ms", "breaker_base_s")
        for name in (*positive, "stats_flush_interval_s", "stats_flush_events"):
            if getattr(self, name) <= 0:
                raise ValueError(f"RedisSettings.{name} must be > 0 (got {getattr(self, name)!r})")
        if self.wait_margin_ms < 0 or self.breaker_cap_s < self.breaker_base_s:
            raise ValueError("RedisSettings: need wait_margin_ms >= 0 and breaker_cap_s >= breaker_base_s")
        if not self.url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("RedisSettings.url must be a redis://, rediss:// or unix:// URL")

    @property
    def ttl_ms(self) -> int:
        return max(1, round(self.ttl_s * 1000))

    @property
    def timeout_s(self) -> float:
        return self.timeout_ms / 1000


def redacted(url: str) -> str:
    """``url`` without its password, for log lines."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class _LoopClient:
    """A client of one event loop and its registered scripts."""

    __slots__ = ("client", "get_or_lease", "release", "set_and_release")

    def __init__(self, client: Redis) -> None:
        self.client = client
        self.get_or_lease: AsyncScript = client.register_script(_GET_OR_LEASE)
        self.set_and_release: AsyncScript = client.register_script(_SET_AND_RELEASE)
        self.release: AsyncScript = client.register_script(_RELEASE)


class RedisStore:
    """Bytes in, bytes out, under one :class:`KeySpace`; see the module doc for failure handling."""

    def __init__(self, settings: RedisSettings, keys: KeySpace, *, clock: Clock = time.monotonic) -> None:
        self.settings = settings
        self.keys = keys
        self._timeout = settings.timeout_s
        self._ttl_ms = settings.ttl_ms
        self._lease_ms = str(settings.lease_ms)
        self.breaker = CircuitBreaker(base=settings.breaker_base_s, cap=settings.breaker_cap_s, clock=clock)
        self._warn = ThrottledLog(log, clock=clock)
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        self._errors = 0
        self._probes: set[asyncio.Task[None]] = set()
        self._where = f"{redacted(settings.url)} ({keys.base}*)"

    # -- plumbing ---------------------------------------------------------------------------------

    def _make_client(self) -> Redis:
        # redis-py's own timeouts are only a backstop, set past the longest a StallTolerantTimeout
        # can run (budget x (1 + grace), plus a few loop iterations): redis-py cannot tell a slow
        # Redis from a stalled event loop, and would fail operations Redis already answered.
        s = self.settings
        backstop = s.timeout_s * (2 + _GRACE)
        pool = BlockingConnectionPool.from_url(
            s.url,
            max_connections=s.pool_size,
            timeout=backstop,  # waiting for a free connection
            socket_timeout=backstop,
            socket_connect_timeout=backstop,
            retry=Retry(NoBackoff(), 0),
        )
        return Redis.from_pool(pool)

    def _client(self) -> _LoopClient:
        loop = asyncio.get_running_loop()
        state = self._clients.get(loop)
        if state is None:
            with self._lock:
                state = self._clients.get(loop)
                if state is None:
                    state = self._clients[loop] = _LoopClient(self._make_client())
        return state

    async def _run(
        self,
        op: Callable[[_LoopClient], Awaitable[T]],
        *,
        budget: float | None = None,
        force: bool = False,
    ) -> T | Unavailable:
        """``op`` within the budget: SKIPPED while the circuit is open (unless ``force``), FAILED
        (counted, logged, circuit opened) on any error."""
        if not force and not self.breaker.allow():
            if self.breaker.probe_due():
                self._start_probe()
            return SKIPPED
        try:
            async with StallTolerantTimeout(budget or self._timeout, grace=_GRACE):
                result = await op(self._client())
        except (RedisError, OSError, TimeoutError) as exc:
            self._failed(exc)
            return FAILED
        if not self.breaker.closed:  # an operation begun before the circuit opened came back fine
            self._recovered()
        return result

    def _failed(self, exc: BaseException, *, probe: bool = False) -> None:
        with self._lock:
            self._errors += 1
        self.breaker.record_failure(probe=probe)
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        self._warn.warning(
            f"Redis tier {self._where} unavailable ({detail}); serving from the in-process cache "
            f"and the backend, next probe in {self.breaker.retry_in() * 1000:.0f} ms"
        )

    def _recovered(self) -> None:
        self.breaker.record_success()
        self._warn.recovered(f"Redis tier {self._where} is reachable again")

    def _start_probe(self) -> None:
        task = asyncio.get_running_loop().create_task(self._probe(), name="guardcache-redis-probe")
        self._probes.add(task)
        task.add_done_callback(self._probes.discard)

    async def _probe(self) -> None:
        """One PING off the request path: closes the circuit, or reopens it for a longer backoff."""
        try:
            async with StallTolerantTimeout(self._timeout, grace=_GRACE):
                await self._client().client.ping()
        except (RedisError, OSError, TimeoutError) as exc:
            self._failed(exc, probe=True)
        except BaseException:
            self.breaker.record_failure(probe=True)  # never leave the breaker "probing" forever
            raise
        else:
            self._recovered()

    # -- operations -------------------------------------------------------------------------------

    async def ping(self) -> bool:
        """One PING through this loop's pool (connecting it); whether Redis answered."""

        async def op(c: _LoopClient) -> bool:
            return bool(await c.client.ping())

        return await self._run(op) is True

    async def get(self, key: Any) -> bytes | Unavailable | None:
        """The stored bytes, None when absent."""

        async def op(c: _LoopClient) -> bytes | None:
            value = await c.client.get(self.keys.value_key(key))
            return value if isinstance(value, bytes) or value is None else str(value).encode()

        return await self._run(op)

    async def get_or_lease(self, key: Any, token: str, ignore: bytes = b"") -> bytes | Lease | Unavailable:
        """In one round trip: the value (unless it equals ``ignore``), else try to take the lease."""

        async def op(c: _LoopClient) -> bytes | Lease:
            reply = await c.get_or_lease(
                keys=[self.keys.value_key(key), self.keys.lease_key(key)],
                args=[token, self._lease_ms, ignore],
            )
            if isinstance(reply, bytes):
                return reply
            return Lease.ACQUIRED if reply == 1 else Lease.HELD

        return await self._run(op)

    async def set(self, key: Any, value: bytes) -> bool:
        """``SET key value PX ttl``; whether it was stored."""

        async def op(c: _LoopClient) -> bool:
            return bool(await c.client.set(self.keys.value_key(key), value, px=self._ttl_ms))

        return await self._run(op) is True

    async def set_and_release(self, key: Any, value: bytes, token: str, *, force: bool = False) -> bool:
        """Store the value and drop our lease (if still ours) in one round trip; ``force``: even
        with the circuit open (cleanup after a lease request whose reply was lost)."""

        async def op(c: _LoopClient) -> bool:
            await c.set_and_release(
                keys=[self.keys.value_key(key), self.keys.lease_key(key)],
                args=[value, self._ttl_ms, token],
            )
            return True

        return await self._run(op, force=force) is True

    async def release(self, key: Any, token: str, *, force: bool = False) -> bool:
        """Drop our lease (compare-and-delete: never someone else's); whether it was deleted."""

        async def op(c: _LoopClient) -> bool:
            return bool(await c.release(keys=[self.keys.lease_key(key)], args=[token]))

        return await self._run(op, force=force) is True

    async def delete(self, key: Any) -> bool:
        """Remove the value; whether it existed."""

        async def op(c: _LoopClient) -> bool:
            return bool(await c.client.unlink(self.keys.value_key(key)))

        return await self._run(op) is True

    async def add_counters(self, deltas: Mapping[str, int]) -> dict[Any, Any] | Unavailable:
        """HINCRBY each nonzero delta into the scope's stats hash, then read it back: one pipeline.

        Not on a request's path, so it gets a longer budget (at least 1 s)."""

        async def op(c: _LoopClient) -> dict[Any, Any]:
            async with c.client.pipeline(transaction=False) as pipe:
                for name, n in deltas.items():
                    if n:
                        pipe.hincrby(self.keys.stats_key, name, n)
                pipe.hgetall(self.keys.stats_key)
                replies = await pipe.execute()
            totals: dict[Any, Any] = replies[-1]
            return totals

        return await self._run(op, budget=max(1.0, self._timeout))

    # -- state ------------------------------------------------------------------------------------

    @property
    def errors(self) -> int:
        """Failed Redis operations so far (probes included)."""
        return self._errors

    @property
    def warnings_logged(self) -> int:
        return self._warn.emitted

    def reset_counters(self) -> None:
        with self._lock:
            self._errors = 0

    async def aclose(self) -> None:
        """Close the running loop's client (other loops' clients close with their loops)."""
        state = self._clients.pop(asyncio.get_running_loop(), None)
        if state is not None:
            await state.client.aclose()


__all__ = ["FAILED", "SKIPPED", "Lease", "RedisSettings", "RedisStore", "Unavailable", "redacted"]
