"""Per-request records of LLM calls, for ``rails.explain()``.

Why a ContextVar: a request fans out into parallel rails (asyncio tasks) and sometimes worker
threads (``asyncio.to_thread``); both copy the current context, so every call they make records into
the ExplainInfo of the request that spawned them, without passing it through every signature.
Concurrent requests each set their own, so they never see each other's records.

The scope is opened by the runtime (:func:`request_scope` or :func:`new_request`), records are added
by whoever knows the task name (a check, the runtime's main-LLM call) with
:func:`record_call`; the LLM client itself records nothing.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import NamedTuple

from guardcache import tracing
from guardcache.llm.types import Usage


class LLMCallInfo(NamedTuple):
    """One LLM call made for a request, or one served from a cache in its place.

    A NamedTuple rather than a frozen dataclass: one is made for every check, cache hits included,
    and building a 10-field frozen dataclass costs ~2.5 us (a ``object.__setattr__`` per field)
    against ~0.4 us for this, which is just as immutable.

    Attributes:
        task: what the call was for, e.g. ``"content_safety_check_input $model=content_safety"``
            or ``"general"`` for the main LLM.
        duration: seconds (``time.monotonic()`` based); on a cache hit, the measured lookup time —
            the latency the request actually paid, not the original call's.
        prompt_tokens, completion_tokens, total_tokens, cached_prompt_tokens: the usage of the call;
            on a cache hit, the usage of the original call the verdict came from.
        from_cache: True when no backend call was made.
        model, provider: as in :class:`~guardcache.llm.types.Usage`.
        started_at: wall-clock start (``time.time()``), to order calls in a report; 0.0 when the
            record was built by hand without one (:meth:`from_usage` always sets it).
        cancelled: the call was started and then abandoned (a main-model call started before the
            input verdict, which blocked): ``duration`` is what it ran, its tokens are unknown (0).
    """

    task: str
    duration: float
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_prompt_tokens: int
    from_cache: bool
    model: str | None = None
    provider: str | None = None
    started_at: float = 0.0
    cancelled: bool = False

    @classmethod
    def from_usage(
        cls,
        task: str,
        usage: Usage,
        *,
        duration: float,
        from_cache: bool,
        started_at: float | None = None,
    ) -> LLMCallInfo:
        """Build a record from a call's usage.

        Without ``started_at`` the record is assumed to be made right after the call ended, so
        the start is ``time.time() - duration``.
        """
        return cls(
            task,
            duration,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens,
            usage.cached_prompt_tokens,
            from_cache,
            usage.model,
            usage.provider,
            started_at if started_at is not None else time.time() - duration,
        )


class ExplainInfo:
    """What one request's LLM calls cost. Mutable: the request's tasks append to it while it runs.

    Tasks and worker threads of one request may record concurrently with no lock of ours:
    ``list.append`` and ``tuple(list)`` are atomic in CPython, with the GIL and on free-threaded
    builds alike (which lock each list internally). The totals are computed from a snapshot, so
    they are safe to read while calls are still being recorded.
    """

    __slots__ = ("llm_calls",)

    def __init__(self, llm_calls: list[LLMCallInfo] | None = None) -> None:
        self.llm_calls: list[LLMCallInfo] = [] if llm_calls is None else llm_calls

    def add(self, info: LLMCallInfo) -> None:
        """Append one record."""
        self.llm_calls.append(info)

    def snapshot(self) -> tuple[LLMCallInfo, ...]:
        """The records so far, as an immutable tuple."""
        return tuple(self.llm_calls)

    def __repr__(self) -> str:
        return f"ExplainInfo(llm_calls={self.llm_calls!r})"

    @property
    def cache_hits(self) -> int:
        """Calls served from a cache (``from_cache=True``)."""
        return sum(1 for call in self.snapshot() if call.from_cache)

    @property
    def total_prompt_tokens(self) -> int:
        return sum(call.prompt_tokens for call in self.snapshot())

    @property
    def total_completion_tokens(self) -> int:
        return sum(call.completion_tokens for call in self.snapshot())

    @property
    def total_tokens(self) -> int:
        return sum(call.total_tokens for call in self.snapshot())

    @property
    def total_cached_prompt_tokens(self) -> int:
        return sum(call.cached_prompt_tokens for call in self.snapshot())

    @property
    def total_duration(self) -> float:
        """The SUM of call durations; parallel rails overlap, so this can exceed wall time."""
        return sum(call.duration for call in self.snapshot())

    def summary(self) -> str:
        """A short human text: one line of totals, then one line per call in start order."""
        calls = sorted(self.snapshot(), key=lambda call: call.started_at)
        hits = sum(1 for call in calls if call.from_cache)
        head = (
            f"{len(calls)} LLM call{'' if len(calls) == 1 else 's'} ({hits} from cache), "
            f"{sum(c.total_tokens for c in calls)} tokens "
            f"({sum(c.prompt_tokens for c in calls)} prompt, "
            f"{sum(c.completion_tokens for c in calls)} completion), "
            f"{sum(c.duration for c in calls):.3f} s"
        )
        lines = [head]
        for call in calls:
            cached = f", {call.cached_prompt_tokens} cached" if call.cached_prompt_tokens else ""
            source = " [cache]" if call.from_cache else " [cancelled]" if call.cancelled else ""
            lines.append(
                f"  - {call.task}: {call.duration:.3f} s, {call.total_tokens} tokens "
                f"({call.prompt_tokens} prompt + {call.completion_tokens} completion{cached})"
                f"{source}"
            )
        return "\n".join(lines)


_CURRENT: ContextVar[ExplainInfo | None] = ContextVar("guardcache_llm_explain", default=None)


def new_request() -> ExplainInfo:
    """Start recording a new request in the current context and return its ExplainInfo.

    The variable stays set for the rest of the current context (a task, or the thread's top level);
    prefer :func:`request_scope` where a ``with`` block fits, which restores the previous value.
    """
    info = ExplainInfo()
    _CURRENT.set(info)
    return info


def current() -> ExplainInfo | None:
    """The ExplainInfo of the request running in this context, or None outside any request."""
    return _CURRENT.get()


def record_call(info: LLMCallInfo) -> None:
    """Add a record to the current request; a no-op outside a request (e.g. a bare library call)."""
    explain = _CURRENT.get()
    if explain is not None:
        explain.llm_calls.append(info)  # ExplainInfo.add, without its frame (every check records)


class request_scope:  # lower case: used like the function it replaced, ``with request_scope() as info``
    """Record the calls made inside the block into a fresh ExplainInfo; restore the previous one.

    A class rather than a ``@contextmanager`` generator: it is entered once per request on the hot
    path, and this costs a third as much.
    """

    __slots__ = ("_span", "_token", "info")

    def __init__(self) -> None:
        self.info = ExplainInfo()

    def __enter__(self) -> ExplainInfo:
        self._token = _CURRENT.set(self.info)
        self._span = tracing.start_turn()  # the turn's span: None (one lookup) when tracing is off
        return self.info

    def __exit__(self, *exc: object) -> None:
        _CURRENT.reset(self._token)
        if self._span is not None:
            tracing.end_turn(self._span, self.info, exc[1] if isinstance(exc[1], BaseException) else None)


__all__ = [
    "ExplainInfo",
    "LLMCallInfo",
    "current",
    "new_request",
    "record_call",
    "request_scope",
]
