"""What a check decides, and what a cache keeps of it.

Values are immutable: one cached verdict is handed to many concurrent callers, and none of them may change
what the others see. Neither holds user text: the verdict is a label and category names, the usage is
token counts, so a cached entry (in process or in Redis) never stores a prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from guardcache.llm.types import Usage


@dataclass(frozen=True, slots=True)
class Verdict:
    """A safety model's decision about one message."""

    allowed: bool
    categories: tuple[str, ...] = ()
    label: str = ""  # the model's own word for it, e.g. "safe", "unsafe", "off-topic"


@dataclass(frozen=True, slots=True)
class CachedCheck:
    """A verdict together with the usage of the call that produced it (restored on every hit).

    Make the ones a cache keeps with :meth:`shared`: equal checks are then one object. A cache holds
    many entries with the same value (a few verdicts, and token counts that repeat: the prompt is a
    fixed template plus a user text of a typical length), and each distinct object costs ~200 B of
    process memory (this, the verdict, the usage, its model string and token counts), more than
    the key and the LFU's structure together (``benchmarks/bench_entry_size.py``).
    """

    verdict: Verdict
    usage: Usage

    @classmethod
    def shared(cls, verdict: Verdict, usage: Usage) -> CachedCheck:
        """The one ``CachedCheck(verdict, usage)`` of the process (interned), and its verdict too.

        Values are immutable, so sharing them is safe. Interning costs a hash of the fields on the
        miss path (~1 us, against a backend call of milliseconds) and nothing on a hit. The tables
        are bounded (:data:`SHARED_MAX` values each): when one is full it starts over, so at worst
        it keeps ``SHARED_MAX`` values alive that no cache holds any more, and a value made after
        that is shared only with those made after it.
        """
        check = cls(_intern(_VERDICTS, verdict), usage)
        return _intern(_CHECKS, check)


#: How many distinct verdicts, and how many distinct checks, the process shares (each table).
SHARED_MAX = 4096

_VERDICTS: dict[Verdict, Verdict] = {}
_CHECKS: dict[CachedCheck, CachedCheck] = {}


T = TypeVar("T")


def _intern(table: dict[T, T], value: T) -> T:
    # dict reads and writes are atomic: two threads interning equal values at once at worst keep
    # two objects, never a wrong one.
    found = table.get(value)
    if found is not None:
        return found
    if len(table) >= SHARED_MAX:
        table.clear()
    table[value] = value
    return value


class RailResult(NamedTuple):
    """The outcome of one rail for one turn, as the runtime and ``check_async`` report it.

    ``error`` is set when the check itself failed (backend down, unparseable output) and the rail's
    ``on_error`` policy decided ``allowed`` instead of the model. A NamedTuple (immutable, and ~4x
    cheaper to build than a frozen dataclass) because one is made per rail per turn, hits included.
    """

    flow: str
    allowed: bool
    categories: tuple[str, ...] = ()
    from_cache: bool = False
    duration: float = 0.0
    error: str | None = None


__all__ = ["CachedCheck", "RailResult", "Verdict"]
