"""The entry table every eviction policy stores its entries in: keys, values and timestamps by slot.

Why one table for all policies: what an entry *is* (its value, when it was stored, when it was last
read) must not depend on the policy that decides how long it stays. :class:`PolicyCache` reads
entries, timestamps, deletes and clears through this table alone, so ``entry()``, ``delete()`` and
``clear()`` are written once; a policy adds only the per-slot arrays of its own order (frequency
groups, queues) and keeps them in step with the slots it hands out.

Entries live in parallel arrays indexed by a slot number (struct of arrays), not in one object per
entry: ~140 bytes an entry instead of ~210 for node objects, nothing for the garbage collector to
track, and an evicted slot is reused by the put that evicted it. The first ``sentinels`` slots are
the policy's list heads and hold no entry. The containers are mutated in place, never replaced, so
the hot paths' closures over them stay valid across ``clear()``.

Timestamps are taken on the monotonic clock (~30 ns cheaper a call than ``time.time()``, and on both
hot paths) and turned into wall-clock time when read, from one anchor taken at import, so a step of
the system clock after a put does not reorder anything.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Hashable, MutableSequence
from typing import Any

#: The clock of ``created``/``accessed`` (a policy's hot paths bind it).
clock = time.monotonic
_WALL_OFFSET = time.time() - time.monotonic()


def wall_time(stamp: float) -> float:
    """The wall-clock (``time.time()``) equivalent of a timestamp taken with :data:`clock`."""
    return stamp + _WALL_OFFSET


def from_wall_time(wall: float) -> float:
    """The :data:`clock` reading of a wall-clock time (a snapshot's times, restored)."""
    return wall - _WALL_OFFSET


class Slots:
    """The entries of one cache, by slot. Every method expects the caller to hold the cache's lock.

    A policy subclasses it and lists its own per-slot arrays in :meth:`columns`, so that
    :meth:`reset` and :meth:`grow` keep every array the same length.
    """

    def __init__(self, sentinels: int = 1) -> None:
        self.sentinels = sentinels
        self.index: dict[Hashable, int] = {}
        self.keys: list[Any] = [None] * sentinels
        self.values: list[Any] = [None] * sentinels
        self.created = array("d", [0.0] * sentinels)
        # None until the first access after the put: a float object (24 B) is only kept for entries
        # that were read again, and a list store is ~50 ns cheaper than an array store on a hit.
        self.accessed: list[float | None] = [None] * sentinels
        self.free: list[int] = []
        self.removed = 0  # entries deleted (not evicted) since creation, for the derived puts count
        #: By slot, when the entry expires (``created`` + the cache's ttl), kept only by a cache
        #: with a ttl (:meth:`keep_deadlines`): a list, so a hit reads it with a specialized
        #: subscript and no float made (``created`` is an array for memory: reading it made one,
        #: ~40 ns a hit); 32 bytes an entry, paid by those caches alone.
        self.deadline: list[float] | None = None

    def keep_deadlines(self) -> list[float]:
        """Start keeping :attr:`deadline` (on an empty table: the cache sets each entry's)."""
        if self.deadline is None:
            self.deadline = [0.0] * len(self.keys)
        return self.deadline

    def columns(self) -> tuple[MutableSequence[Any], ...]:
        """Every per-slot array; a policy returns these plus its own."""
        base = (self.keys, self.values, self.created, self.accessed)
        return base if self.deadline is None else (*base, self.deadline)

    def grow(self) -> int:
        """A new slot at the end of every column (the policy sets its own columns' values)."""
        i = len(self.keys)
        self.keys.append(None)
        self.values.append(None)
        self.created.append(0.0)
        self.accessed.append(None)
        for column in self.columns()[4:]:
            column.append(0)
        return i

    def release(self, i: int) -> None:
        """Free slot ``i`` after its entry was unlinked and taken out of ``index`` (not an eviction)."""
        self.keys[i] = self.values[i] = None
        self.free.append(i)
        self.removed += 1

    def reset_slots(self) -> None:
        """Empty every column in place down to the sentinels (closures keep the same objects)."""
        self.index.clear()
        for column in self.columns():
            del column[self.sentinels :]
        self.free.clear()

    def __len__(self) -> int:
        return len(self.index)


__all__ = ["Slots", "clock", "from_wall_time", "wall_time"]
