"""What a check decides, and what a cache keeps of it.

Values are immutable: one cached verdict is handed to many concurrent callers, and none of them may change
what the others see. Neither holds user text: the verdict is a label and category names, the usage is
token counts, so a cached entry (in process or in Redis) never stores a prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from guardcache.llm.types import Usage


@dataclass(frozen=True, slots=True)
class Verdict:
    """A safety model's decision about one message."""

    allowed: bool
    categories: tuple[str, ...] = ()
    label: str = ""  # the model's own word for it, e.g. "safe", "unsafe", "off-topic"


@dataclass(frozen=True, slots=True)
class CachedCheck:
    """A verdict together with the usage of the call that produced it (restored on every hit)."""

    verdict: Verdict
    usage: Usage


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
