"""TieredCache: the in-process LFU (L1) in front of a shared Redis tier (L2), with single flight in
the process AND across replicas.

A load (``get_or_compute``) goes L1 -> Redis -> backend:

1. The L1's own single flight wraps the whole path, so concurrent askers in this process share one
   Redis lookup, one lease and one backend call; a value from Redis or the backend fills L1.
2. One Lua round trip returns the Redis value, or takes the key's lease
   (``SET {key}:lease <token> NX PX lease_ms``) when the value is absent.
3. The lease holder computes, then writes the value (``SET key value PX ttl``) and deletes its lease
   if it still owns it, in one script. A failed or cancelled computation releases the lease (compare-
   and-delete) so a waiter can try; failures are never stored anywhere. Settling a lease bypasses
   the circuit breaker (in the background while it is open): after a blip, a lease left behind
   would make every other replica wait for it.
4. Others poll with exponential backoff (2 ms .. 50 ms) until the value appears (an L2 hit) or the
   lease is free again (they take it over: a crashed leader costs at most ``lease_ms``). No one waits
   longer than ``lease_ms + wait_margin_ms``: after that the waiter computes without the lease.

Values cross Redis only through the codec (versioned bytes, never pickle), sealed by the store with
the operator's secret (:mod:`~guardcache.cache.redis.auth`): a value that fails authentication
(anyone who can write Redis could have planted it) or that the codec cannot read is a miss,
recomputed under the lease and overwritten. A load gives up on Redis after
``_MAX_REJECTED`` such values (a writer swapping values as fast as we read them) and computes. During
a key rotation a value found under the previous secret's name is served and re-written under the new
name, keeping its original expiry. When Redis is unusable (down, slow, refusing, circuit open) a load
computes at once: no request fails or waits because of Redis. While the tier is still connecting (a
process's first checks, see :mod:`~guardcache.cache.redis.store`) a load waits for it at most its
operation's budget, then computes; what it computes is written once the tier is up.

The synchronous ``get``/``put``/``contains``/``delete``/``clear`` touch L1 only: they cannot await a
network call, and blocking on one inside an event loop would stall every request of the loop. Use
``aget``/``aput``/``adelete`` for the full path.
"""

from __future__ import annotations

import asyncio
import inspect
import secrets
import threading
import time
import weakref
from collections.abc import Coroutine, Hashable
from typing import Any, Protocol

from guardcache.cache.interface import MISSING, CacheInterface, ComputeFn
from guardcache.cache.policy_cache import PolicyCache
from guardcache.cache.recorder import StatsRecorder
from guardcache.cache.redis.clearing import ClearWatch
from guardcache.cache.redis.health import Clock
from guardcache.cache.redis.stats import GLOBAL_FIELDS, GlobalTierStats, TierStats, log
from guardcache.cache.redis.store import CONNECTING, FAILED, Found, Lease, RedisStore, Rejected, Unavailable
from guardcache.cache.stats import CacheStats, StatsReporter, default_reporter

_POLL_FIRST_S = 0.002
_POLL_MAX_S = 0.05
_MAX_REJECTED = 3  # unusable values (forged or undecodable) one load reads before it stops asking


def _remaining_s(found: Found) -> float:
    """Seconds a verdict read from Redis has left to live: its sealed expiry (now + min(cache.ttl,
    redis.ttl) when it was judged) less now. Read from the envelope the store already authenticated:
    no PTTL, no second command, no byte more per value (wall clocks, as the store's own expiry
    check: keep the hosts' clocks in sync)."""
    return found.expires_at_ms / 1000 - time.time()


class Codec(Protocol):
    """Turns cached values into bytes for Redis and back. ``decode`` returns None for anything it
    cannot read (another version, corruption): the tier treats that as a miss."""

    def encode(self, value: Any, /) -> bytes: ...

    def decode(self, data: bytes, /) -> Any | None: ...


class TieredCache(CacheInterface):
    """An in-process cache (:class:`PolicyCache`: LFU or TinyLFU) backed by a :class:`RedisStore`;
    see the module doc for the policy."""

    def __init__(
        self,
        l1: PolicyCache,
        store: RedisStore,
        codec: Codec,
        *,
        stats_logging_interval: float | None = None,
        reporter: StatsReporter | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.l1 = l1
        self.store = store
        self.codec = codec
        self.stats_logging_interval = stats_logging_interval
        self._clock = clock
        s = store.settings
        self._max_wait = (s.lease_ms + s.wait_margin_ms) / 1000
        #: The L1's recorder: the tier counts its L2 outcomes there, and so does the store (errors,
        #: authentication failures), so one snapshot holds every counter of this model's cache.
        self.recorder: StatsRecorder = l1.recorder
        store.recorder = l1.recorder
        self._global: GlobalTierStats | None = None
        # Stats flushing: totals already added to the shared hash, and when to add the next deltas.
        self._flush_lock = threading.Lock()
        self._flushed: dict[str, int] = {}
        self._generation = 0
        self._flush_interval = s.stats_flush_interval_s
        self._flush_events = s.stats_flush_events
        self._next_flush = clock() + self._flush_interval
        self._events = 0
        self._flushing = False
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Drops the L1 when ``guardcache cache clear`` empties this model's scope (clearing.py).
        self.clearing = ClearWatch(store, l1)
        self._reporter: StatsReporter | None = None
        self._report_handle: int | None = None
        if stats_logging_interval is not None:
            self._reporter = reporter or default_reporter()
            self._report_handle = self._reporter.register(self, stats_logging_interval)
            weakref.finalize(self, self._reporter.unregister, self._report_handle)

    # -- the async path -------------------------------------------------------------------------

    async def get_or_compute(self, key: Hashable, compute_fn: ComputeFn, default: Any = MISSING) -> Any:
        try:
            return await self.l1.get_or_compute(key, lambda: self._load(key, compute_fn), default)
        finally:
            self._looked_up()

    def hit(self, key: Hashable) -> Any:
        """An L1 hit (counted, as :meth:`get_or_compute` counts one), or ``MISSING`` counting
        nothing: the caller then asks :meth:`get_or_compute` (L1, then Redis, then the backend).
        Called on the event loop, like :meth:`get_or_compute` (a due stats flush starts a task)."""
        value = self.l1.hit(key)
        if value is not MISSING:
            self._looked_up()
        return value

    def _looked_up(self) -> None:
        """One lookup more since the last stats flush; a flush starts when enough of them, or
        enough time, have gone by."""
        self._events += 1  # approximate under threads; it only triggers flushes
        if self._events >= self._flush_events or self._clock() >= self._next_flush:
            self._schedule_flush()

    async def _load(self, key: Hashable, compute_fn: ComputeFn) -> Any:
        """L2 then backend, for one L1 miss (already coalesced in this process by the L1)."""
        self.clearing.ensure()  # before this loop's first entry: a clear reaches what it serves
        rec = self.recorder
        token = secrets.token_hex(8)
        ignore = b""  # a value we rejected: absent for the script, so we recompute and overwrite it
        rejected = 0
        waiting_since: float | None = None
        delay = _POLL_FIRST_S
        while True:
            try:
                found = await self.store.get_or_lease(key, token, ignore)
            except asyncio.CancelledError:
                # Cancelled with the reply in flight: Redis may have granted us the lease. Release
                # it (compare-and-delete on our token: a no-op if it was never ours), or every
                # other replica would wait up to lease_ms for a computation nobody is running.
                await self._settle(key, token, None)
                raise
            if isinstance(found, Found):
                value = self._decode(found.payload)
                if value is not None:
                    rec.record_l2_hit(previous=found.previous)
                    if found.previous and found.lease is Lease.ACQUIRED:  # re-write it, new name
                        await self._settle(key, token, found.payload, found.expires_at_ms)
                    if self.l1.ttl is not None:  # judged earlier: L1 keeps it for what is left
                        self.l1.expire_load_after(key, _remaining_s(found))
                    return value
                rec.record_l2_corrupt()
                # Unreadable under the current name: reject it like a forgery. Under the previous
                # name (rotating): as if absent, the reply's lease outcome decides.
                found = Rejected(found.raw) if found.lease is None else found.lease
            if isinstance(found, Rejected):  # failed authentication (counted by the store), or corrupt
                rejected += 1
                if rejected >= _MAX_REJECTED:
                    rec.record_l2_miss()
                    return await self._compute_and_store(key, compute_fn)
                ignore = found.raw
                continue
            if found is Lease.ACQUIRED:
                rec.record_l2_miss()
                if waiting_since is not None:
                    rec.record_lease_takeover()
                return await self._lead(key, compute_fn, token)
            if isinstance(found, Unavailable):
                rec.record_l2_unavailable()
                # FAILED: the reply was lost, but Redis may have given us the lease: clean up. So
                # may CONNECTING (a command sent before another waited for its connection); while
                # the tier is not up, the cleanup just keeps the value for when it is.
                lost = token if found is FAILED or found is CONNECTING else None
                return await self._compute_and_store(key, compute_fn, lost)
            now = self._clock()  # Lease.HELD: another replica is computing
            if waiting_since is None:
                waiting_since = now
                rec.record_lease_wait()
            elif now - waiting_since >= self._max_wait:
                rec.record_l2_miss()
                rec.record_lease_timeout()
                return await self._compute_and_store(key, compute_fn)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _POLL_MAX_S)

    async def _compute(self, compute_fn: ComputeFn) -> Any:
        self.recorder.record_computation()
        result = compute_fn()
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _lead(self, key: Hashable, compute_fn: ComputeFn, token: str) -> Any:
        """We hold the lease: compute, write, release; on failure just release (never cached)."""
        try:
            value = await self._compute(compute_fn)
        except BaseException:
            await self._settle(key, token, None)
            raise
        await self._settle(key, token, self._encode(value))
        return value

    async def _compute_and_store(
        self, key: Hashable, compute_fn: ComputeFn, lost_lease: str | None = None
    ) -> Any:
        """Compute without (knowingly) holding the lease; the write is best effort (free when the
        circuit is open). ``lost_lease``: the token of a lease request whose reply was lost, which
        Redis may have granted: it is settled like a lease we hold."""
        try:
            value = await self._compute(compute_fn)
        except BaseException:
            if lost_lease is not None:
                await self._settle(key, lost_lease, None)
            raise
        data = self._encode(value)
        if lost_lease is not None:
            await self._settle(key, lost_lease, data)
        elif data is not None:
            await self.store.set(key, data)
        return value

    async def _settle(
        self, key: Hashable, token: str, data: bytes | None, expires_at_ms: int | None = None
    ) -> None:
        """Write the value (if any; until ``expires_at_ms`` when given, else for the TTL) and
        release the lease, even with the circuit open (``force``):
        after a blip a lease left behind would make every other replica wait up to ``lease_ms``.
        Inline while the circuit is closed (the normal path: one round trip); in the background
        while it is open, so a failing Redis never delays the request. Shielded: a cancelled
        leader still frees the key."""
        if data is None:
            work = self.store.release(key, token, force=True)
        else:
            work = self.store.set_and_release(key, data, token, force=True, expires_at_ms=expires_at_ms)
        if self.store.breaker.closed:
            await asyncio.shield(work)
        else:
            self._background(work)

    def _background(self, work: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _decode(self, data: bytes) -> Any | None:
        try:
            return self.codec.decode(data)
        except Exception:  # a codec bug must not fail the request: it is a miss
            log.debug("codec could not decode a cached value", exc_info=True)
            return None

    def _encode(self, value: Any) -> bytes | None:
        try:
            return self.codec.encode(value)
        except Exception:
            log.warning("codec could not encode a %s; not written to Redis", type(value).__name__)
            return None

    async def aget(self, key: Hashable, default: Any = None) -> Any:
        """L1, then Redis (a hit fills L1), else ``default``. No backend, no lease. Rotating, a value
        found under the previous secret's name is re-written under the new one."""
        value = self.l1.get(key, MISSING)
        if value is not MISSING:
            return value
        found = await self.store.get(key)
        if isinstance(found, Unavailable):
            self.recorder.record_l2_unavailable()
        elif isinstance(found, Found):
            value = self._decode(found.payload)
            if value is not None:
                self.recorder.record_l2_hit(previous=found.previous)
                self.l1.put_expiring(key, value, _remaining_s(found))
                if found.previous:
                    await self.store.set(key, found.payload, expires_at_ms=found.expires_at_ms)
                return value
            self.recorder.record_l2_corrupt()
            self.recorder.record_l2_miss()
        else:  # absent, or failed authentication (counted by the store)
            self.recorder.record_l2_miss()
        return default

    async def aput(self, key: Hashable, value: Any) -> None:
        """Store in L1 and in Redis (best effort)."""
        self.l1.put(key, value)
        data = self._encode(value)
        if data is not None:
            await self.store.set(key, data)

    async def adelete(self, key: Hashable) -> bool:
        """Remove from L1 and Redis; whether either had it."""
        in_l1 = self.l1.delete(key)
        in_l2 = await self.store.delete(key)
        return in_l1 or in_l2

    # -- the sync face: L1 only (see the module doc) ---------------------------------------------

    def get(self, key: Hashable, default: Any = None) -> Any:
        """L1 only."""
        return self.l1.get(key, default)

    def put(self, key: Hashable, value: Any) -> None:
        """L1 only (use :meth:`aput` to write Redis too)."""
        self.l1.put(key, value)

    def contains(self, key: Hashable) -> bool:
        """L1 only."""
        return self.l1.contains(key)

    __contains__ = contains

    def delete(self, key: Hashable) -> bool:
        """L1 only (use :meth:`adelete` to remove from Redis too)."""
        return self.l1.delete(key)

    def size(self) -> int:
        """Entries in L1."""
        return self.l1.size()

    def clear(self) -> None:
        """Empty L1. Redis is shared by other replicas: clear it with ``guardcache cache clear``."""
        self.l1.clear()

    @property
    def maxsize(self) -> int:
        return self.l1.maxsize

    def in_flight(self) -> int:
        return self.l1.in_flight()

    # -- stats ----------------------------------------------------------------------------------

    def get_stats(self) -> CacheStats:
        """The standard ``LFU Cache Statistics`` view of this model's cache (the L1's; its loads are
        whole L2-then-backend paths)."""
        return self.l1.get_stats()

    def tier_stats(self) -> TierStats:
        """Where lookups were answered (L1, Redis, backend), Redis' health and the global view: one
        snapshot of the recorder, so the numbers agree with each other and with :meth:`get_stats`."""
        return TierStats.of(
            self.recorder.snapshot(),
            warnings_logged=self.store.warnings_logged,
            circuit_open=not self.store.breaker.closed,
            connecting=self.store.connecting,
            global_stats=self._global,
        )

    def reset_stats(self) -> None:
        """Zero the counters (L1 and tier: one recorder). Deltas not yet flushed to the shared hash
        are dropped."""
        with self._flush_lock:
            self.l1.reset_stats()
            self._flushed = {}
            self._generation += 1

    def log_stats_now(self) -> None:
        """The LFU line (logger ``guardcache.cache.lfu``), then the tier line
        (``guardcache.cache.redis``) with the global hit rate as of the last flush."""
        self.l1.log_stats_now()
        log.info(self.tier_stats().format_line())

    def supports_stats_logging(self) -> bool:
        return self.l1.track_stats and self.stats_logging_interval is not None

    def _totals(self) -> dict[str, int]:
        snapshot = self.recorder.snapshot()
        return {name: getattr(snapshot, name) for name in GLOBAL_FIELDS}

    async def flush_stats(self) -> GlobalTierStats | None:
        """Add this replica's counter deltas to the shared hash and read the totals back (one
        pipeline). Runs by itself every ``stats_flush_interval_s`` or ``stats_flush_events`` lookups;
        call it to get a fresh global view. Returns the last known global view (None: never read)."""
        with self._flush_lock:
            generation = self._generation
            totals = self._totals()
            deltas = {name: totals[name] - self._flushed.get(name, 0) for name in GLOBAL_FIELDS}
            self._flushed = totals  # optimistic; given back below if the write fails
            self._events = 0
            self._next_flush = self._clock() + self._flush_interval
        reply = await self.store.add_counters(deltas)
        if isinstance(reply, Unavailable):
            with self._flush_lock:
                if generation == self._generation:
                    self._flushed = {k: v - deltas[k] for k, v in self._flushed.items()}
            return self._global
        self._global = GlobalTierStats.from_hash(reply)
        return self._global

    def _schedule_flush(self) -> None:
        if self._flushing:
            return
        self._flushing = True
        self._events = 0
        self._next_flush = self._clock() + self._flush_interval
        self._background(self._flush_in_background())

    async def _flush_in_background(self) -> None:
        try:
            await self.flush_stats()
        finally:
            self._flushing = False

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop periodic stats logging (entries stay readable)."""
        if self._reporter is not None and self._report_handle is not None:
            self._reporter.unregister(self._report_handle)
            self._report_handle = None
        self.l1.close()

    async def connect(self) -> bool:
        """Bring this event loop's Redis client up now (connections set up, a cluster's slots read;
        at most about twice ``connect_timeout_ms``), e.g. at start-up, so the first requests find
        the tier up; whether it is. Optional: the first lookup starts it anyway (and misses if it
        is not up within its budget)."""
        self.clearing.ensure()
        return await self.store.connect()

    async def aclose(self, *, flush: bool = True) -> None:
        """Write the verdicts computed while the tier was still connecting (waiting, when
        ``flush``, for a set-up in progress; bounded: about twice ``connect_timeout_ms`` plus a
        second), flush the stats deltas (unless ``flush=False``, e.g. when a sync API closes the
        short-lived loop of each call), then close this loop's Redis client."""
        await self.clearing.stop()
        await self.store.drain(wait_for_setup=flush)
        if flush:
            await self.flush_stats()
        await self.store.aclose()

    def __repr__(self) -> str:
        return f"TieredCache(l1={self.l1!r}, redis={self.store.keys.base}*)"


__all__ = ["Codec", "TieredCache"]
