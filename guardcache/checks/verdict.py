"""What a check decides, and what a cache keeps of it.

Values are immutable: one cached verdict is handed to many concurrent callers, and none of them may change
what the others see. Neither holds user text: the verdict is a label and category names, the usage is
token counts, so a cached entry (in process or in Redis) never stores a prompt.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from guardcache.llm.records import LLMCallInfo
from guardcache.llm.types import Usage
from guardcache.tracing import error_class


@dataclass(frozen=True, slots=True)
class Verdict:
    """A safety model's decision about one message."""

    allowed: bool
    categories: tuple[str, ...] = ()
    label: str = ""  # the model's own word for it, e.g. "safe", "unsafe", "off-topic"


class CachedCheck:
    """A verdict together with the usage of the call that produced it (restored on every hit).

    Immutable, and compact: a cache holds one per entry, so its process memory is the cache's
    (``benchmarks/bench_entry_size.py``). Two slots: a head ``(verdict, model, provider)``, which
    :meth:`shared` makes one object for every check with those (there are few), and the four token
    counts packed into one int (32 bits each; a count outside ``[0, 2**32)`` keeps the four in a
    tuple instead, so every value is restored exactly). That is ~90 B a distinct value, against
    ~190 B for the dataclass with a ``Usage`` (six slots) and two int objects it replaced.

    The hit path reads it with :meth:`replay` (the verdict and the call record, in one call);
    :attr:`verdict` and :attr:`usage` are for everything else (the Redis codec, tests).
    """

    __slots__ = ("_head", "_tokens")

    _head: tuple[Verdict, str | None, str | None]
    _tokens: int | tuple[int, int, int, int]

    def __init__(self, verdict: Verdict, usage: Usage) -> None:
        _set(self, "_head", (verdict, usage.model, usage.provider))
        _set(self, "_tokens", _pack(usage))

    @classmethod
    def shared(cls, verdict: Verdict, usage: Usage) -> CachedCheck:
        """The one ``CachedCheck(verdict, usage)`` of the process (interned), and its head too.

        Values are immutable, so sharing them is safe. Interning costs a hash of the fields on the
        miss path (~1 us, against a backend call of milliseconds) and nothing on a hit. The tables
        are bounded (:data:`SHARED_MAX` values each): when one is full it starts over, so at worst
        it keeps ``SHARED_MAX`` values alive that no cache holds any more, and a value made after
        that is shared only with those made after it.
        """
        check = cls(verdict, usage)
        _set(check, "_head", _intern(_HEADS, check._head))
        return _intern(_CHECKS, check)

    @property
    def verdict(self) -> Verdict:
        return self._head[0]

    @property
    def usage(self) -> Usage:
        """The original call's usage, rebuilt (an equal ``Usage``, a new object)."""
        _, model, provider = self._head
        return Usage(*_unpack(self._tokens), model, provider)

    def replay(self, task: str, duration: float, from_cache: bool) -> tuple[Verdict, LLMCallInfo]:
        """The verdict, and the record of the call for ``task``: this value's usage, ``duration``.

        The hit path: what ``LLMCallInfo.from_usage(task, self.usage, ...)`` returns, without
        building the usage, and the record built as the tuple it is (a NamedTuple's ``__new__`` is
        a Python function; ``tests/unit/test_checks_verdict.py`` keeps the fields in step).
        """
        verdict, model, provider = self._head
        t: Any = self._tokens
        if t.__class__ is int:
            return verdict, _new_record(
                LLMCallInfo,
                (
                    task,
                    duration,
                    t & _MASK,
                    t >> 32 & _MASK,
                    t >> 64 & _MASK,
                    t >> 96,
                    from_cache,
                    model,
                    provider,
                    _time() - duration,
                    False,
                ),
            )
        pt, ct, tt, cached = t
        return verdict, _new_record(
            LLMCallInfo,
            (task, duration, pt, ct, tt, cached, from_cache, model, provider, _time() - duration, False),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CachedCheck):
            return NotImplemented
        return self._head == other._head and self._tokens == other._tokens

    def __hash__(self) -> int:
        return hash((self._head, self._tokens))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"CachedCheck is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"CachedCheck is immutable: cannot delete {name!r}")

    def __reduce__(self) -> tuple[type[CachedCheck], tuple[Verdict, Usage]]:
        return CachedCheck, (self.verdict, self.usage)

    def __repr__(self) -> str:
        return f"CachedCheck(verdict={self.verdict!r}, usage={self.usage!r})"


_set = object.__setattr__
_new_record = tuple.__new__
_time = time.time
_MASK = (1 << 32) - 1


def _pack(usage: Usage) -> int | tuple[int, int, int, int]:
    counts = (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens, usage.cached_prompt_tokens)
    if all(n.__class__ is int and 0 <= n <= _MASK for n in counts):
        pt, ct, tt, cached = counts
        return pt | ct << 32 | tt << 64 | cached << 96
    return counts  # kept as they are (huge, negative, not plain ints): exact, only less compact


def _unpack(tokens: int | tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    if isinstance(tokens, tuple):
        return tokens
    return tokens & _MASK, tokens >> 32 & _MASK, tokens >> 64 & _MASK, tokens >> 96


#: How many distinct heads, and how many distinct checks, the process shares (each table).
SHARED_MAX = 4096

_HEADS: dict[tuple[Verdict, str | None, str | None], tuple[Verdict, str | None, str | None]] = {}
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


#: ``RailResult.kind``: what a rail judged. A user's message or the main model's answer text;
MESSAGE = "message"
#: a tool result (a ``role: "tool"`` message: untrusted text the main model is about to read);
TOOL_RESULT = "tool_result"
#: a tool call of the main model (its function name and arguments, before the caller runs it).
TOOL_CALL = "tool_call"
KINDS = (MESSAGE, TOOL_RESULT, TOOL_CALL)


class RailResult(NamedTuple):
    """The outcome of one rail for one turn, as the runtime and ``check_async`` report it.

    ``error`` is set exactly when the rail got **no verdict** (:attr:`no_verdict`): the guard was
    unreachable, slow, misconfigured, declined to judge, answered something that is no verdict, or
    could not be asked about this input. ``allowed`` is then what the rail's rules decided instead
    of a model: ``on_error`` for an outage, a block for everything else. A NamedTuple (immutable,
    and ~4x cheaper to build than a frozen dataclass) because one is made per rail per turn, hits
    included; what is derived from ``error`` is a property, so a verdict costs nothing more.
    ``kind`` is what the rail judged (:data:`KINDS`): the message (the user's, or the answer), a
    tool result or a tool call.
    """

    flow: str
    allowed: bool
    categories: tuple[str, ...] = ()
    from_cache: bool = False
    duration: float = 0.0
    error: str | None = None
    kind: str = MESSAGE

    @property
    def no_verdict(self) -> bool:
        """Whether the rail decided without a verdict (see the class docstring): an allowed rail
        with no verdict was let through by ``on_error: allow``, not judged safe."""
        return self.error is not None

    @property
    def error_kind(self) -> str | None:
        """The failure's class (``BackendTimeoutError``, ``BackendRefusedConfigError``,
        ``BackendDeclinedError``, ``ParseError`` for an answer that is no verdict...), None with a
        verdict: a bounded set of names, fit for a metric label or a client's switch, where
        ``error`` is a message."""
        error = self.error
        return None if error is None else error_class(error)


__all__ = ["KINDS", "MESSAGE", "TOOL_CALL", "TOOL_RESULT", "CachedCheck", "RailResult", "Verdict"]
