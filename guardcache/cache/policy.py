"""The seam between a cache and its eviction policy: what a policy is, what it must provide.

A policy decides which entries stay and in what order they go. Everything else a cache does is
written once, in :class:`~guardcache.cache.policy_cache.PolicyCache`, around any policy: the lock,
single flight, stats (the recorder and the puts it derives), the stats line and its schedule, and
introspection (``entry()``, ``created_at``/``accessed_at``, ``delete``, ``clear``). So a second
policy is one module (a class honouring :class:`EvictionPolicy`) plus a name in the registry
(:mod:`guardcache.cache.registry`) and in the config's ``cache.policy`` choices. The split follows
cachetools (each policy a small class over one mapping) and Caffeine (the policy apart from its
``StatsCounter`` and its ``Policy`` introspection).

Why the policy supplies ``get`` and ``put`` itself, as closures (:class:`HotPaths`), instead of
``on_hit``/``on_insert`` callbacks a generic ``get`` would call: they are the product's hot path, and
each Python call more per hit costs ~6% of an LFU get hit (CPython 3.11: two empty calls added to
each hit, +13%), on top of what closures save over methods (~14%, see
:mod:`~guardcache.cache.lfu_core`). A policy's hot paths count what only they see (hits, misses,
evictions, updates) in closure cells and hand them back through ``counts()``; the cache derives puts
from them and the table (every entry stored is still there, or was evicted, deleted or cleared).

What a policy owes the cache (all of it under the cache's lock, which the hot paths take themselves):

- its entries in the :class:`~guardcache.cache.slots.Slots` table it extends (``index`` maps a key to
  its slot; ``values``, ``created``, ``accessed`` by slot), with ``removed`` counting deletions;
- ``hot``: ``get(key, default)`` counting a hit and an access, or a miss; ``put(key, value)`` storing
  (an update is an access), evicting to stay within ``maxsize``, or refusing the new entry at once
  (an admission policy may: that counts as a put and an eviction);
- ``touch(slot)``: an access that did not come through ``hot.get`` (the single flight's hits);
  ``touch(slot, now)`` with the clock already read (an expiring lookup's hits);
- ``remove(key)``: delete, not an eviction; ``reset()``: drop every entry (the cache counts them);
- ``frequency(slot)``: what the policy knows of the entry's popularity, for ``entry()``;
- ``eviction_order()``: keys from the next victim to the safest, for tests and debugging;
- ``export_state()`` / ``restore_state(state)``: its entries and order as a :class:`PolicyState`
  (what a snapshot file holds, :mod:`~guardcache.cache.snapshot`), and back into an empty policy,
  so a restarted process evicts in the order the stopped one would have. Cold paths: the hot paths
  are not touched, and a restore counts no hit, miss or eviction.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Callable, Hashable
from typing import Any, ClassVar, NamedTuple, Protocol

GetPath = Callable[[Hashable, Any], Any]
"""A cache's ``get(key, default=None)``."""

ExpiringGet = Callable[[float, Callable[[], float], Callable[[Hashable], None]], GetPath]
"""``expiring(ttl, clock, expire)``: a policy's ``get`` for a cache with a ``ttl`` (see
:mod:`~guardcache.cache.expiry`), counting in the same cells as its ``get``."""


class HotPaths(NamedTuple):
    """A cache's ``get(key, default=None)`` and ``put(key, value)``, and ``counts()``: the totals
    they counted since they were made, ``(hits, misses, evictions, updates)``; read it holding the
    lock. ``expiring``: the policy's own ``get`` with the ttl check inlined, when it has one (else
    :mod:`~guardcache.cache.expiry` builds one on ``touch``)."""

    get: GetPath
    put: Callable[[Hashable, Any], None]
    counts: Callable[[], tuple[int, int, int, int]]
    expiring: ExpiringGet | None = None


class PolicyState(NamedTuple):
    """A policy's entries and order, as plain columns (one item an entry, in eviction order: the
    next victim first), plus what the policy keeps beside its entries (``extra``).

    Why columns in eviction order rather than the policy's own arrays: a state must restore into a
    cache of another ``maxsize`` (the config changed), keeping the safest entries (the last ones);
    and the file format (:mod:`~guardcache.cache.snapshot_format`) writes each column in one piece.
    Times are wall-clock (``time.time()``) so they survive the process; ``accessed`` is NaN for an
    entry not read since it was stored. ``segment`` is the policy's queue of each entry (LFU: 0),
    ``frequency`` its count (LFU: accesses; TinyLFU: the aged count). ``extra`` holds ints, floats
    and bytes only (TinyLFU: the sketch, the queues' limits, the climber), so no format needs to
    know a policy's types.
    """

    policy: str
    maxsize: int
    keys: list[Hashable]
    values: list[Any]
    created: array[float]
    accessed: array[float]
    frequency: list[int]
    segment: bytes
    extra: dict[str, int | float | bytes]


class EvictionPolicy(Protocol):
    """One cache's entries and the order they leave in (see the module doc for the contract)."""

    #: Shown in front of the stats line: ``<name> Cache Statistics - Size: ...``.
    name: ClassVar[str]
    maxsize: int
    hot: HotPaths
    index: dict[Hashable, int]
    values: list[Any]
    #: By slot, on :data:`~guardcache.cache.slots.clock`: when the value was stored, and when it was
    #: last read (None: not since it was stored).
    created: array[float]
    accessed: list[float | None]
    removed: int
    #: By slot, when the entry expires; kept (not None) only by a cache with a ttl.
    deadline: list[float] | None

    def keep_deadlines(self) -> list[float]:
        """Start keeping ``deadline`` (:class:`~guardcache.cache.slots.Slots` does it for every
        policy built on it)."""
        ...

    def touch(self, i: int, now: float | None = None) -> None:
        """Count an access of slot ``i`` (a hit that did not go through ``hot.get``); ``now``: the
        clock already read (on :data:`~guardcache.cache.slots.clock`'s scale), as an expiring
        lookup has it (:mod:`~guardcache.cache.expiry`)."""
        ...

    def remove(self, key: Hashable) -> bool:
        """Delete ``key`` (not an eviction); whether it was there."""
        ...

    def reset(self) -> None:
        """Drop every entry, keeping the hot paths' containers (and counters)."""
        ...

    def frequency(self, i: int) -> int:
        """The popularity the policy keeps for slot ``i`` (``CacheEntry.frequency``)."""
        ...

    def eviction_order(self) -> list[Hashable]:
        """Keys from the next victim to the safest (O(n))."""
        ...

    def export_state(self) -> PolicyState:
        """The entries in eviction order and the policy's own state (under the cache's lock)."""
        ...

    def restore_state(self, state: PolicyState) -> int:
        """Fill this empty policy from ``state`` (of the same policy; the safest ``maxsize`` of its
        entries when it holds more); how many entries it now holds. ``ValueError`` if the policy is
        not empty or ``state`` is inconsistent (nothing is changed then)."""
        ...

    def __len__(self) -> int: ...


#: Builds a policy for a cache of ``maxsize`` entries guarded by ``lock`` (its hot paths take it).
PolicyFactory = Callable[[int, threading.RLock], EvictionPolicy]


__all__ = ["EvictionPolicy", "ExpiringGet", "GetPath", "HotPaths", "PolicyFactory", "PolicyState"]
