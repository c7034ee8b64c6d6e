"""What ``explain()`` returns: one turn's LLM calls (with cache hits) and its rail results."""

from __future__ import annotations

from typing import NamedTuple

from guardcache.library.verdict import RailResult
from guardcache.llm.stats import ExplainInfo, LLMCallInfo

REFUSAL = "I'm sorry, I can't respond to that."


class CheckResult(NamedTuple):
    """The verdicts of the rails that ran for some messages (``check_async``); immutable."""

    input: tuple[RailResult, ...] = ()
    output: tuple[RailResult, ...] = ()

    @property
    def allowed(self) -> bool:
        return all(r.allowed for r in (*self.input, *self.output))

    @property
    def blocked_by(self) -> RailResult | None:
        """The first rail that blocked, if any."""
        return next((r for r in (*self.input, *self.output) if not r.allowed), None)


class TurnInfo:
    """One turn: every LLM call made or served from a cache, and each rail's result."""

    __slots__ = ("checks", "explain")

    def __init__(self, explain: ExplainInfo | None = None, checks: CheckResult | None = None) -> None:
        self.explain = ExplainInfo() if explain is None else explain
        self.checks = CheckResult() if checks is None else checks

    def __repr__(self) -> str:
        return f"TurnInfo(explain={self.explain!r}, checks={self.checks!r})"

    @property
    def llm_calls(self) -> list[LLMCallInfo]:
        return list(self.explain.snapshot())

    @property
    def cache_hits(self) -> int:
        return self.explain.cache_hits

    def summary(self) -> str:
        lines = [self.explain.summary()]
        for r in (*self.checks.input, *self.checks.output):
            state = "allowed" if r.allowed else "BLOCKED"
            cats = f" ({', '.join(r.categories)})" if r.categories else ""
            err = f" [error: {r.error}]" if r.error else ""
            lines.append(f"  rail {r.flow}: {state}{cats}{err}")
        return "\n".join(lines)


__all__ = ["REFUSAL", "CheckResult", "TurnInfo"]
