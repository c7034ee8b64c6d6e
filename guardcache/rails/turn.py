"""What ``explain()`` returns: one turn's LLM calls (with cache hits) and its rail results."""

from __future__ import annotations

from typing import NamedTuple

from guardcache.checks.verdict import MESSAGE, RailResult
from guardcache.llm.records import ExplainInfo, LLMCallInfo

REFUSAL = "I'm sorry, I can't respond to that."


#: ``CheckResult.reason`` of a turn blocked by a rail's verdict (the guard judged the text).
VERDICT = "verdict"
#: ``CheckResult.reason`` of a turn blocked by a rail that got no verdict (nothing judged the text).
NO_VERDICT = "no_verdict"

#: ``CheckResult.outcome`` values: every rail answered and allowed; a verdict blocked; a rail with
#: no verdict blocked; no rail blocked but at least one passed without a verdict (``on_error: allow``).
ALLOWED = "allowed"
BLOCKED_VERDICT = "blocked_verdict"
BLOCKED_NO_VERDICT = "blocked_no_verdict"
PASSED_NO_VERDICT = "passed_no_verdict"
OUTCOMES = (ALLOWED, BLOCKED_VERDICT, BLOCKED_NO_VERDICT, PASSED_NO_VERDICT)


class CheckResult(NamedTuple):
    """The verdicts of the rails that ran for some messages (``check_async``); immutable.

    Why :attr:`no_verdict`, :attr:`reason` and :attr:`outcome`: ``allowed`` alone makes an outage
    under ``on_error: allow`` look like a safe verdict and a guard that could not answer look like
    an unsafe one. They are derived from the rails' results (properties, nothing stored), and cost
    a loop over the results without allocating when every rail answered.
    """

    input: tuple[RailResult, ...] = ()
    output: tuple[RailResult, ...] = ()

    @property
    def allowed(self) -> bool:
        return all(r.allowed for r in (*self.input, *self.output))

    @property
    def blocked_by(self) -> RailResult | None:
        """The first rail that blocked, if any."""
        return next((r for r in (*self.input, *self.output) if not r.allowed), None)

    @property
    def no_verdict(self) -> tuple[str, ...]:
        """The flows that got no verdict (``RailResult.no_verdict``), input rails first, each once
        (a streamed answer checked in windows runs a rail per window), in the order they ran;
        ``()`` when every rail answered."""
        for r in self.input:  # two plain loops: the hot path (every rail answered) makes nothing
            if r.error is not None:
                return _flows_without_verdict(self)
        for r in self.output:
            if r.error is not None:
                return _flows_without_verdict(self)
        return ()

    @property
    def reason(self) -> str | None:
        """Why the rails blocked: ``"verdict"`` (a guard judged the text not allowed) or
        ``"no_verdict"`` (the blocking rail got no verdict: nothing judged the text); None when
        nothing blocked."""
        for r in self.input:
            if not r.allowed:
                return VERDICT if r.error is None else NO_VERDICT
        for r in self.output:
            if not r.allowed:
                return VERDICT if r.error is None else NO_VERDICT
        return None

    @property
    def outcome(self) -> str:
        """One of :data:`OUTCOMES`: ``allowed`` (every rail answered, none blocked),
        ``blocked_verdict``, ``blocked_no_verdict`` (the blocking rail's, as :attr:`reason`), or
        ``passed_no_verdict`` (nothing blocked, and a rail was let through by ``on_error: allow``
        without a verdict)."""
        no_verdict = False
        for r in self.input:
            if not r.allowed:
                return BLOCKED_VERDICT if r.error is None else BLOCKED_NO_VERDICT
            if r.error is not None:
                no_verdict = True
        for r in self.output:
            if not r.allowed:
                return BLOCKED_VERDICT if r.error is None else BLOCKED_NO_VERDICT
            if r.error is not None:
                no_verdict = True
        return PASSED_NO_VERDICT if no_verdict else ALLOWED


class ShadowResult(NamedTuple):
    """A shadow rail's judgement of a sampled turn, beside what the live rails decided
    (``guardcache.rails.shadow``). It decided nothing: the turn was answered before it ran.

    ``live`` and ``shadow`` are :data:`SHADOW_LABELS`: ``allowed``, ``blocked`` (a verdict),
    ``error`` (no verdict: an outage, an unreadable answer, a text the guard cannot judge); ``live``
    may also be ``none`` (no live rail judged that text). ``compared_with`` names what ``live`` is:
    the live rail of the same flow when it ran, else the direction's rails together.
    ``result`` is the shadow rail's own result (categories, ``from_cache``, ``error``).
    """

    flow: str
    direction: str
    live: str
    shadow: str
    compared_with: str
    result: RailResult

    @property
    def agrees(self) -> bool:
        """Whether the shadow rail decided as the live rails did."""
        return self.live == self.shadow


#: The values of ``ShadowResult.live`` / ``.shadow`` (and the labels of ``guardcache_shadow_total``).
SHADOW_LABELS = ("allowed", "blocked", "error", "none")


def _flows_without_verdict(checks: CheckResult) -> tuple[str, ...]:
    flows: dict[str, None] = {}
    for r in (*checks.input, *checks.output):
        if r.error is not None:
            flows[r.flow] = None
    return tuple(flows)


class TurnInfo:
    """One turn: every LLM call made or served from a cache, and each rail's result.

    ``shadow``: the results of the shadow rails that judged this turn (a sampled turn), added as
    each finishes, after the turn was answered: empty until then, and for turns not sampled."""

    __slots__ = ("checks", "explain", "shadow")

    def __init__(self, explain: ExplainInfo | None = None, checks: CheckResult | None = None) -> None:
        self.explain = ExplainInfo() if explain is None else explain
        self.checks = CheckResult() if checks is None else checks
        self.shadow: tuple[ShadowResult, ...] = ()

    def __repr__(self) -> str:
        shadow = f", shadow={self.shadow!r}" if self.shadow else ""
        return f"TurnInfo(explain={self.explain!r}, checks={self.checks!r}{shadow})"

    @property
    def no_verdict(self) -> tuple[str, ...]:
        """The flows that got no verdict this turn (``checks.no_verdict``); ``()`` if none."""
        return self.checks.no_verdict

    @property
    def reason(self) -> str | None:
        """Why the turn was blocked, ``"verdict"`` or ``"no_verdict"`` (``checks.reason``); None if
        it was not."""
        return self.checks.reason

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
            err = f" [no verdict: {r.error}]" if r.error is not None else ""
            kind = f" ({r.kind.replace('_', ' ')})" if r.kind != MESSAGE else ""
            lines.append(f"  rail {r.flow}{kind}: {state}{cats}{err}")
        if self.checks.outcome != ALLOWED:
            lines.append(f"  outcome: {self.checks.outcome}")
        for s in self.shadow:
            err = f" [no verdict: {s.result.error}]" if s.result.error is not None else ""
            lines.append(f"  shadow rail {s.flow}: {s.shadow} (live: {s.live}, {s.compared_with}){err}")
        return "\n".join(lines)


__all__ = [
    "ALLOWED",
    "BLOCKED_NO_VERDICT",
    "BLOCKED_VERDICT",
    "NO_VERDICT",
    "OUTCOMES",
    "PASSED_NO_VERDICT",
    "REFUSAL",
    "SHADOW_LABELS",
    "VERDICT",
    "CheckResult",
    "ShadowResult",
    "TurnInfo",
]
