"""What ``explain()`` returns: one turn's LLM calls (with cache hits) and its rail results."""

from __future__ import annotations

from typing import NamedTuple

from guardcache.checks.verdict import RailResult
from guardcache.llm.records import ExplainInfo, LLMCallInfo

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

    def print_llm_calls_summary(self) -> None:
        """Print the turn's LLM calls as NeMo Guardrails' ``ExplainInfo`` does (same wording), with
        cache hits marked, so code and notebooks written for NeMo keep working."""
        calls = sorted(self.explain.snapshot(), key=lambda call: call.started_at)
        if not calls:
            print("No LLM calls were made.")
            return
        total = sum(c.duration for c in calls)
        tokens = sum(c.total_tokens for c in calls)
        lines = [f"Summary: {len(calls)} LLM call(s) took {total:.2f} seconds and used {tokens} tokens.", ""]
        for i, call in enumerate(calls, 1):
            cached = " (from cache)" if call.from_cache else ""
            lines.append(
                f"{i}. Task `{call.task}` took {call.duration:.2f} seconds and used "
                f"{call.total_tokens} tokens{cached}."
            )
        print("\n".join(lines))

    def summary(self) -> str:
        lines = [self.explain.summary()]
        for r in (*self.checks.input, *self.checks.output):
            state = "allowed" if r.allowed else "BLOCKED"
            cats = f" ({', '.join(r.categories)})" if r.categories else ""
            err = f" [error: {r.error}]" if r.error else ""
            lines.append(f"  rail {r.flow}: {state}{cats}{err}")
        return "\n".join(lines)


__all__ = ["REFUSAL", "CheckResult", "TurnInfo"]
