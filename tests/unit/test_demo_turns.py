"""Sorting a turn by the path its checks took, the main-model work thrown away on a blocked turn,
and what a refusing rail judged, read from the turn's record (what ``rails.explain()`` returns)."""

from __future__ import annotations

from guardcache.checks.verdict import RailResult
from guardcache.demo.report import one_line
from guardcache.demo.turns import (
    MainWork,
    check_path,
    input_blocked,
    main_call_seconds,
    main_work_on_block,
    refusal,
)
from guardcache.llm.records import ExplainInfo, LLMCallInfo
from guardcache.rails.turn import CheckResult, TurnInfo

CS_IN, TOPIC, CS_OUT = "content safety check input", "topic safety check input", "content safety check output"


def rail(flow: str, *, cached: bool, allowed: bool = True) -> RailResult:
    return RailResult(flow, allowed, from_cache=cached)


def call(task: str, *, seconds: float = 0.1, tokens: int = 0, cancelled: bool = False) -> LLMCallInfo:
    return LLMCallInfo(task, seconds, tokens, 0, tokens, 0, False, cancelled=cancelled)


def turn(
    inputs: tuple[RailResult, ...], outputs: tuple[RailResult, ...] = (), *calls: LLMCallInfo
) -> TurnInfo:
    return TurnInfo(ExplainInfo(list(calls)), CheckResult(inputs, outputs))


def test_a_turn_is_a_hit_only_when_every_check_it_ran_came_from_cache() -> None:
    both_cached = (rail(CS_IN, cached=True), rail(TOPIC, cached=True))
    assert check_path(turn(both_cached, (rail(CS_OUT, cached=True),))) == "hit"
    # blocked at input by a cached verdict: no output check ran, still a hit
    assert check_path(turn((rail(CS_IN, cached=True, allowed=False),))) == "hit"
    assert check_path(turn(both_cached, (rail(CS_OUT, cached=False),))) == "output_miss"
    one_missed = (rail(CS_IN, cached=True), rail(TOPIC, cached=False))
    assert check_path(turn(one_missed, (rail(CS_OUT, cached=False),))) == "input_miss"
    assert check_path(turn(one_missed, (rail(CS_OUT, cached=True),))) == "input_miss"


def test_main_work_counts_only_on_turns_an_input_rail_blocked() -> None:
    allowed = turn((rail(CS_IN, cached=False),), (rail(CS_OUT, cached=False),), call("general", tokens=50))
    assert not input_blocked(allowed) and main_work_on_block(allowed) == MainWork()
    assert main_call_seconds(allowed) == 0.1
    # blocked by the output rail: the answer was wanted when the main model ran, not thrown away early
    out_blocked = turn((rail(CS_IN, cached=True),), (rail(CS_OUT, cached=False, allowed=False),))
    assert main_work_on_block(out_blocked) == MainWork()

    cancelled = turn(
        (rail(CS_IN, cached=False, allowed=False),),
        (),
        call("content_safety_check_input $model=content_safety", tokens=300),
        call("general", seconds=0.04, cancelled=True),
    )
    assert main_work_on_block(cancelled) == MainWork(cancelled=1, cancelled_seconds=0.04)
    assert main_call_seconds(cancelled) is None

    finished_first = turn((rail(CS_IN, cached=False, allowed=False),), (), call("general", tokens=70))
    assert main_work_on_block(finished_first) == MainWork(discarded=1, discarded_tokens=70)


def test_a_refusal_carries_the_text_its_rail_judged() -> None:
    # An input rail judged the user's message; an output rail the main model's answer, which the
    # record does not hold (no text is kept in it): the demo hands it in.
    answer = "You said: After a muddy ride my bicycle chain squeaks; how do I clean off the gun"
    by_input = turn((rail(CS_IN, cached=False, allowed=False),))
    shown = refusal(3, "How do I build a bomb?", "no", by_input, answer=None)
    assert shown is not None and (shown.judged_from, shown.judged) == ("user", "How do I build a bomb?")
    by_output = turn((rail(CS_IN, cached=True),), (rail(CS_OUT, cached=False, allowed=False),))
    shown = refusal(4, "After a muddy ride ...", "no", by_output, answer=answer)
    assert shown is not None and (shown.judged_from, shown.judged) == ("main", answer)
    assert refusal(5, "hi", "hello", turn((rail(CS_IN, cached=True),))) is None


def test_a_judged_text_is_cut_to_one_line_keeping_both_ends() -> None:
    assert one_line("a  short\n text") == "a short text"
    long = "You said: " + "word " * 30 + "gun"
    cut = one_line(long, 40)
    assert len(cut) == 40 and "\n" not in cut
    assert cut.startswith("You said: word") and cut.endswith("word gun") and " ... " in cut
