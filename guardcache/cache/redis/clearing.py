"""A clear that reaches every replica: the shared tier emptied, and every running process told to drop
its in-process (L1) entries of the cleared models, within a second, in every mode.

How: each model's scope has a clear token, ``{prefix}:{scope}:cleared`` (:attr:`KeySpace.cleared_key`).
``guardcache cache clear`` (and ``guardcache serve``'s admin route, for a model with ``store:
redis``) deletes the scope's entries, then writes a new random token there (:func:`clear_shared`).
Every replica reads the token of each of its redis-backed models every :data:`POLL_INTERVAL_S`
(:class:`ClearWatch`, a task of the event loop its checks run in) and, when it differs from the last
one it read, clears that model's L1. The first read of a process is its starting point, not a clear.

Why a polled token rather than Redis pub/sub: a message is delivered only to the connections
subscribed at the moment it is published. A replica whose subscription was being re-made (a
reconnect, a Sentinel failover, a cluster node replaced) misses it and would serve the cleared
verdicts for as long as they stay in its L1: forever, for a popular text. A backstop would be needed
anyway, a polled generation, and polled every 200 ms it alone reaches every replica well within a
second. It also keeps to the tier's rules for free: the read is one more operation of the store
(:meth:`RedisStore.background`: the loop's client, set up off the path within the connect timeout,
skipped while the circuit breaker is open, the background budget), on the connections the tier
already has, in every mode (a cluster routes the key to its slot's primary; Sentinel, to the
primary), with no dedicated connection per process and no subscription to keep alive. A replica
that cannot reach Redis reads the token again once it can, and clears then if it changed. The cost:
one round trip of ~100 bytes per model, per serving loop, five times a second, never on a check's
path (a check reads only its L1).

What a Redis writer can do with it: exactly what a clear does. The token is opaque: only whether it
changed is read (at most :data:`TOKEN_MAX_BYTES`, by a script that never fails on a key of another
type), so a write there can make replicas drop their L1 entries (costing guard calls, as a clear or
a ``DEL`` of the entries would) and nothing else: no key, no value and no verdict is ever taken from
it. Integrity stays with :mod:`~guardcache.cache.redis.auth`; the token needs no secret, as the
command needs none.
"""

from __future__ import annotations

import asyncio
import contextvars
import secrets
import weakref
from collections.abc import Iterable
from typing import Any

import redis

from guardcache.cache.policy_cache import PolicyCache
from guardcache.cache.redis.clients import AdminClient
from guardcache.cache.redis.keys import CLEARED_SUFFIX, KeySpace, prefix_pattern, scope_of
from guardcache.cache.redis.stats import log
from guardcache.cache.redis.store import RedisStore, Unavailable

POLL_INTERVAL_S = 0.2
"""How often each replica reads its clear tokens: a clear reaches it within this (plus a round
trip), well within the second it is allowed."""
TOKEN_MAX_BYTES = 64
"""The most of a token a replica reads: whatever a writer puts there, a poll reads no more."""
SCAN_COUNT = 1000
UNLINK_BATCH = 500

# The token, at most ARGV[1] bytes of it; false when absent; the key's type for a key that is not a
# string (so a writer cannot make the poll fail, which would open the circuit breaker).
_READ_TOKEN = """
local t = redis.call('TYPE', KEYS[1])['ok']
if t == 'none' then return false end
if t == 'string' then return redis.call('GETRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1) end
return t
"""
_UNREAD = object()


def new_token() -> str:
    """A token no earlier clear wrote (128 random bits)."""
    return secrets.token_hex(16)


# -- the command's side (synchronous, on the CLI's admin client) --------------------------------------


def _unlink(node: redis.Redis, keys: list[bytes], one_node: bool) -> int:
    """One batch: one UNLINK on a server; on a cluster's primary one UNLINK per key (a command may
    name keys of one slot only), pipelined: one round trip either way."""
    if one_node:
        return int(node.unlink(*keys))
    with node.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.unlink(key)
        return sum(int(n) for n in pipe.execute())


def unlink_matching(client: AdminClient, pattern: str, prefix: str | None = None) -> tuple[int, set[str]]:
    """Delete every key matching ``pattern`` (SCAN + UNLINK in batches, on every primary) but the
    clear tokens (replaced right after, so no replica reads one as absent in between); how many were
    deleted, and the scopes under ``prefix`` they belonged to (the replicas to tell)."""
    deleted = 0
    scopes: set[str] = set()
    token_end = (":" + CLEARED_SUFFIX).encode()
    for node in client.primaries():
        batch: list[bytes] = []
        for key in node.scan_iter(match=pattern, count=SCAN_COUNT):
            if prefix is not None:
                scope = scope_of(key.decode(errors="replace"), prefix)
                if scope is not None:
                    scopes.add(scope)
            if key.endswith(token_end):
                continue
            batch.append(key)
            if len(batch) >= UNLINK_BATCH:
                deleted += _unlink(node, batch, client.one_node)
                batch.clear()
        if batch:
            deleted += _unlink(node, batch, client.one_node)
    return deleted, scopes


def announce(client: AdminClient, prefix: str, scopes: Iterable[str]) -> list[str]:
    """Write a new clear token for each scope (one round trip: pipelined, each key routed to its
    node); the scopes told, sorted."""
    told = sorted(set(scopes))
    token = new_token()
    with client.keyed.pipeline(transaction=False) as pipe:
        for scope in told:
            pipe.set(KeySpace(prefix, scope).cleared_key, token)
        pipe.execute()
    return told


def clear_shared(client: AdminClient, keys: KeySpace, *, everything: bool = False) -> tuple[int, list[str]]:
    """Empty one model's scope (``everything``: every key under its prefix, all models), then tell
    the replicas of every scope emptied to drop their L1 entries; keys deleted, scopes told. In this
    order: a replica that drops its L1 before Redis is empty would fill it again from Redis."""
    pattern = prefix_pattern(keys.prefix) if everything else keys.scope_pattern
    deleted, scopes = unlink_matching(client, pattern, keys.prefix)
    scopes.add(keys.scope)
    return deleted, announce(client, keys.prefix, scopes)


# -- the replicas' side (asyncio, through the tier's store) -------------------------------------------


class ClearWatch:
    """Reads one model's clear token every ``interval`` seconds in each event loop that serves it
    (started by :meth:`ensure`: the tiered cache calls it on an L1 miss, which comes before any entry
    its loop could serve, and on ``connect()``), and clears ``l1`` when the token changed.

    The last token read is the process's, shared by its loops (they share the L1); a watch that
    starts again (a new loop) compares with it, so a clear made meanwhile is not taken for the
    starting point."""

    def __init__(self, store: RedisStore, l1: PolicyCache, *, interval: float = POLL_INTERVAL_S) -> None:
        if interval <= 0:
            raise ValueError(f"the clear watch's interval must be > 0 (got {interval!r})")
        self.store = store
        self.l1 = l1
        self.interval = interval
        self.name = store.keys.cleared_key
        self.clears = 0  # clears applied (tests and logs read it)
        self._seen: Any = _UNREAD
        self._tasks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[None]] = (
            weakref.WeakKeyDictionary()
        )

    def ensure(self) -> None:
        """Watch in the running loop, unless it already does (a dictionary lookup then)."""
        loop = asyncio.get_running_loop()
        task = self._tasks.get(loop)
        if task is None or task.done():
            # A fresh context: the watch belongs to no request (and no tracing span).
            self._tasks[loop] = loop.create_task(
                self._watch(), name="guardcache-redis-clear-watch", context=contextvars.Context()
            )

    async def poll(self) -> bool:
        """Read the token once; whether it changed (and ``l1`` was cleared). Redis unusable: no
        change (it is read again next time)."""

        async def read(client: Any) -> Any:
            return await client.eval(_READ_TOKEN, 1, self.name, TOKEN_MAX_BYTES)

        token = await self.store.background(read)
        if isinstance(token, Unavailable):
            return False
        seen, self._seen = self._seen, token
        if seen is _UNREAD or seen == token:
            return False
        dropped = self.l1.size()
        self.l1.clear()
        self.clears += 1
        log.info(
            "Redis tier %s: cleared (guardcache cache clear): dropped %d in-process entries",
            self.store.keys.base,
            dropped,
        )
        return True

    async def _watch(self) -> None:
        task = asyncio.current_task()
        while True:
            await self.poll()
            if task is not None and task.cancelling():  # a cancel that surfaced as something else
                raise asyncio.CancelledError
            await asyncio.sleep(self.interval)

    async def stop(self) -> None:
        """Stop watching in the running loop (its client is closing)."""
        task = self._tasks.pop(asyncio.get_running_loop(), None)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


__all__ = [
    "POLL_INTERVAL_S",
    "TOKEN_MAX_BYTES",
    "ClearWatch",
    "announce",
    "clear_shared",
    "new_token",
    "unlink_matching",
]
