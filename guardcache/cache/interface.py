"""The contract every result store honours: the in-process LFU, the Redis tier and the tiered pair.

The names follow NeMo Guardrails' model cache so code that used it finds the same calls here. A store
knows nothing of LLMs, prompts or rails: keys are opaque hashables (guardcache uses fixed-size digests)
and values are opaque objects.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from guardcache.cache.stats import CacheStats

#: Marks "no default given" so that ``None`` can be a real default (and a real cached value).
MISSING: Any = type("_Missing", (), {"__repr__": lambda self: "MISSING"})()

ComputeFn = Callable[[], Awaitable[Any] | Any]


_ABSENT: Any = object()  # the default implementations' own "not stored" marker

#: What :meth:`CacheInterface.get_stats` answers for a store that keeps no counters (NeMo's words).
NO_STATS_MESSAGE = "Statistics tracking is not supported by this cache implementation"


class CacheInterface(ABC):
    """A bounded key -> value store with stats and single-flight loading.

    As in NeMo Guardrails' ``CacheInterface``, a store must implement ``get``, ``put``, ``size``,
    ``clear`` and ``maxsize``; everything else has a default it may override. A store is always
    truthy, also when empty (NeMo's actions test ``if cache:`` before using one): ask
    :meth:`is_empty` or :meth:`size` for the contents.
    """

    @abstractmethod
    def get(self, key: Hashable, default: Any = None) -> Any:
        """Return the value for ``key`` (counting a hit and an access), else ``default`` (a miss)."""

    @abstractmethod
    def put(self, key: Hashable, value: Any) -> None:
        """Store ``value``; an existing key is replaced (an update), a new one may evict another."""

    def contains(self, key: Hashable) -> bool:
        """Whether ``key`` is stored, without counting an access or touching the stats.

        The default asks :meth:`get`, so it does count; stores override it (LFUCache does).
        """
        return self.get(key, _ABSENT) is not _ABSENT

    def hit(self, key: Hashable) -> Any:
        """The stored value for ``key``, counted as a hit, or ``MISSING`` counting nothing.

        The lookup half of :meth:`get_or_compute`, for a caller that can answer a hit without
        awaiting (a check: most of its lookups are hits) and asks :meth:`get_or_compute` on
        ``MISSING``, which then counts the miss: lookups stay hits + misses. The default finds
        nothing, so such a caller always takes :meth:`get_or_compute`; stores override it (LFUCache,
        TieredCache's L1).
        """
        return MISSING

    @abstractmethod
    def size(self) -> int:
        """The number of entries stored now."""

    def is_empty(self) -> bool:
        """Whether nothing is stored."""
        return self.size() == 0

    def __bool__(self) -> bool:
        """Always True: a store is "there" even when empty (``if cache:`` means "caching is on")."""
        return True

    @abstractmethod
    def clear(self) -> None:
        """Remove every entry; they count as evictions."""

    @property
    @abstractmethod
    def maxsize(self) -> int:
        """The most entries the store keeps."""

    def get_stats(self) -> CacheStats:
        """A snapshot of the counters: a value you can keep, compare and subtract.

        The default is for stores that count nothing: ``{"message": NO_STATS_MESSAGE}`` (its
        attributes read 0).
        """
        return CacheStats.unsupported(NO_STATS_MESSAGE)

    def reset_stats(self) -> None:  # noqa: B027 (optional: a no-op by default, as in NeMo)
        """Zero the counters (the entries stay). The default does nothing."""

    def log_stats_now(self) -> None:  # noqa: B027 (optional: a no-op by default, as in NeMo)
        """Write the stats line to the log at once. The default does nothing."""

    def supports_stats_logging(self) -> bool:
        """Whether this store writes the stats line periodically. The default: False."""
        return False

    async def get_or_compute(self, key: Hashable, compute_fn: ComputeFn, default: Any = MISSING) -> Any:
        """The stored value, or the result of ONE ``compute_fn()`` shared by all concurrent askers.

        A result is stored only when the computation succeeds. If it raises, every asker gets the
        exception, or ``default`` when one was given.

        The default implementation is get, compute, put: correct, but concurrent askers of one key
        each compute (no single flight). Stores override it (LFUCache and TieredCache do).
        """
        value = self.get(key, _ABSENT)
        if value is not _ABSENT:
            return value
        try:
            value = compute_fn()
            if inspect.isawaitable(value):
                value = await value
        except Exception:
            if default is MISSING:
                raise
            return default
        self.put(key, value)
        return value

    async def get_or_load(
        self, key: Hashable, compute_fn: ComputeFn, default: Any = MISSING
    ) -> tuple[Any, bool]:
        """Like :meth:`get_or_compute`, also telling whether this call loaded the value:
        ``(value, loaded)``.

        ``loaded`` is True when this call's own ``compute_fn`` ran (it paid for the computation,
        e.g. a backend call, whether or not that succeeded), False when the value was stored or
        another asker's computation produced it. The default wraps ``compute_fn`` and calls
        :meth:`get_or_compute`, so it keeps whatever single flight a store implements there (the
        TieredCache uses it: a value found in Redis is then not loaded, as no backend call ran);
        LFUCache answers from its single flight directly.
        """
        loaded = False

        def tracked() -> Awaitable[Any] | Any:
            nonlocal loaded
            loaded = True
            return compute_fn()

        value = await self.get_or_compute(key, tracked, default)
        return value, loaded


__all__ = ["MISSING", "NO_STATS_MESSAGE", "CacheInterface", "ComputeFn"]
