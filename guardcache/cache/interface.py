"""The contract every result store honours: the in-process LFU, the Redis tier and the tiered pair.

The names follow NeMo Guardrails' model cache so code that used it finds the same calls here. A store
knows nothing of LLMs, prompts or rails: keys are opaque hashables (guardcache uses fixed-size digests)
and values are opaque objects.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from guardcache.cache.stats import CacheStats

#: Marks "no default given" so that ``None`` can be a real default (and a real cached value).
MISSING: Any = type("_Missing", (), {"__repr__": lambda self: "MISSING"})()

ComputeFn = Callable[[], Awaitable[Any] | Any]


class CacheInterface(ABC):
    """A bounded key -> value store with stats and single-flight loading."""

    @abstractmethod
    def get(self, key: Hashable, default: Any = None) -> Any:
        """Return the value for ``key`` (counting a hit and an access), else ``default`` (a miss)."""

    @abstractmethod
    def put(self, key: Hashable, value: Any) -> None:
        """Store ``value``; an existing key is replaced (an update), a new one may evict another."""

    @abstractmethod
    def contains(self, key: Hashable) -> bool:
        """Whether ``key`` is stored, without counting an access or touching the stats."""

    @abstractmethod
    def size(self) -> int:
        """The number of entries stored now."""

    def is_empty(self) -> bool:
        """Whether nothing is stored."""
        return self.size() == 0

    @abstractmethod
    def clear(self) -> None:
        """Remove every entry; they count as evictions."""

    @property
    @abstractmethod
    def maxsize(self) -> int:
        """The most entries the store keeps."""

    @abstractmethod
    def get_stats(self) -> CacheStats:
        """A snapshot of the counters: a value you can keep, compare and subtract."""

    @abstractmethod
    def reset_stats(self) -> None:
        """Zero the counters (the entries stay)."""

    @abstractmethod
    def log_stats_now(self) -> None:
        """Write the stats line to the log at once."""

    @abstractmethod
    def supports_stats_logging(self) -> bool:
        """Whether this store writes the stats line periodically."""

    @abstractmethod
    async def get_or_compute(self, key: Hashable, compute_fn: ComputeFn, default: Any = MISSING) -> Any:
        """The stored value, or the result of ONE ``compute_fn()`` shared by all concurrent askers.

        A result is stored only when the computation succeeds. If it raises, every asker gets the
        exception, or ``default`` when one was given.
        """


__all__ = ["MISSING", "CacheInterface", "ComputeFn"]
