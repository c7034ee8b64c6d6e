"""Moving a policy's entries in and out of a :class:`~guardcache.cache.policy.PolicyState`: the
parts every policy shares (the slot table's columns, wall-clock times, which entries a smaller
cache keeps), so each policy writes only how its own order is walked and relinked.

Cold paths only (a snapshot's export, a start's restore): nothing here runs on a get or a put.
"""

from __future__ import annotations

import math
from array import array

from guardcache.cache.policy import PolicyState
from guardcache.cache.slots import Slots, from_wall_time, wall_time


def check_restorable(policy: Slots, state: PolicyState) -> None:
    """``ValueError`` unless ``policy`` is empty and ``state``'s columns are of one length and its
    keys distinct (a state is restored whole or not at all)."""
    if policy.index:
        raise ValueError("a state is restored into an empty cache only")
    n = len(state.keys)
    lengths = {len(state.values), len(state.created), len(state.accessed), len(state.frequency)}
    if lengths != {n} or len(state.segment) != n:
        raise ValueError("a state's columns differ in length")
    if len(set(state.keys)) != n:
        raise ValueError("a state holds a key twice")


def keep_safest(state: PolicyState, maxsize: int) -> list[int]:
    """The indexes of the entries a cache of ``maxsize`` keeps: the last ones (eviction order)."""
    n = len(state.keys)
    return list(range(max(0, n - maxsize), n))


def export_columns(
    policy: Slots,
    slots: list[int],
    frequency: list[int],
    segment: bytes,
    extra: dict[str, int | float | bytes],
) -> PolicyState:
    """A :class:`PolicyState` of ``slots`` (in eviction order), times turned to wall-clock."""
    keys, values, created, accessed = policy.keys, policy.values, policy.created, policy.accessed
    nan = math.nan
    return PolicyState(
        policy=str(getattr(policy, "name", "")),
        maxsize=int(getattr(policy, "maxsize", 0)),
        keys=[keys[i] for i in slots],
        values=[values[i] for i in slots],
        created=array("d", [wall_time(created[i]) for i in slots]),
        accessed=array("d", [nan if (a := accessed[i]) is None else wall_time(a) for i in slots]),
        frequency=frequency,
        segment=segment,
        extra=extra,
    )


def store_entry(policy: Slots, i: int, k: int, state: PolicyState) -> None:
    """Put entry ``k`` of ``state`` in slot ``i`` (key, value, times; the policy links it)."""
    key = state.keys[k]
    policy.keys[i] = key
    policy.values[i] = state.values[k]
    policy.index[key] = i
    policy.created[i] = from_wall_time(state.created[k])
    a = state.accessed[k]
    policy.accessed[i] = None if math.isnan(a) else from_wall_time(a)


__all__ = ["check_restorable", "export_columns", "keep_safest", "store_entry"]
