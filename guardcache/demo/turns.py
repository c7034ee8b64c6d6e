"""Where one turn's time went, read from its record (``rails.explain()``), never guessed.

The cache makes a turn whose checks are all answered from it cost about the main call alone; the
latency tail is the turns where some check had to ask its backend. To show that, the demo sorts every
turn by the path its checks took:

- ``hit``: every check of the turn (input, and output when the turn got that far) was answered from
  its cache (``RailResult.from_cache``). A check that joined another turn's identical call already
  in flight is ``from_cache`` too: this turn made no backend call, but it waited for that one.
- ``input_miss``: some input check went to its backend. The main model waits for the input verdict,
  so these turns pay input check + main call + output check one after another; the speculative
  start (``rails.input.during_main``) overlaps the first two, and helps only these turns.
- ``output_miss``: every input check was a hit but the output check went to its backend (a new
  answer to a known question); the main call starts at once, so the early start changes nothing.

A turn blocked by an input rail has no output check; input rails cancelled by another rail's block
left no result and do not count (the turn's time was decided by the rails that answered).

The main model's work on blocked turns is read from the same record: a main call started early and
cancelled by an input block (``LLMCallInfo.cancelled``), or one that finished before the block came
and was thrown away (its tokens are in its record). So is a refused turn's verdict (``Refusal``):
counts alone never show a user what a refusal looks like. A refusal also says what the refusing rail
judged (the user's message for an input rail, the main model's answer for an output rail): without
it, a refused bicycle question labelled "Guns and Illegal Weapons" reads as a wrong verdict, when
the rail judged an answer cut off at "gun". The record holds no text (by design), so the runner hands
the answer in (:mod:`guardcache.demo.runner` keeps each turn's).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from guardcache.rails.turn import TurnInfo

Path = Literal["hit", "input_miss", "output_miss"]
PATHS: tuple[Path, ...] = ("hit", "input_miss", "output_miss")
MAIN_TASK = "general"
"""The task name of the main model's calls in a turn's record."""


class MainWork(NamedTuple):
    """The main model's calls in one turn that was blocked by an input rail (zero otherwise)."""

    cancelled: int = 0  # started early, cancelled when the input verdict blocked
    cancelled_seconds: float = 0.0  # how long those ran before the cancel
    discarded: int = 0  # started early, finished before the block came: the answer thrown away
    discarded_tokens: int = 0  # what those cost (their usage, as the server reported it)


def check_path(turn: TurnInfo) -> Path:
    """The path of one turn's checks (see the module doc)."""
    checks = turn.checks
    if not all(r.from_cache for r in checks.input):
        return "input_miss"
    if not all(r.from_cache for r in checks.output):
        return "output_miss"
    return "hit"


def input_blocked(turn: TurnInfo) -> bool:
    """An input rail refused the turn (so no main answer was wanted)."""
    return any(not r.allowed for r in turn.checks.input)


def main_work_on_block(turn: TurnInfo) -> MainWork:
    """The main-model work spent on a turn an input rail blocked: nothing unless it started early."""
    if not input_blocked(turn):
        return MainWork()
    cancelled = discarded = tokens = 0
    seconds = 0.0
    for call in turn.llm_calls:
        if call.task != MAIN_TASK:
            continue
        if call.cancelled:
            cancelled += 1
            seconds += call.duration
        else:
            discarded += 1
            tokens += call.total_tokens
    return MainWork(cancelled, seconds, discarded, tokens)


Judged = Literal["user", "main"]
"""Whose text the refusing rail judged: the user's message (an input rail) or the main model's
answer (an output rail)."""


class Refusal(NamedTuple):
    """One refused turn as its user saw it, for the demo to show next to the counts: the message,
    the reply the rails gave instead of an answer, the verdict of the rail that refused it (from
    the turn's record, so what is printed is what happened, not what the workload expected), and
    the text that rail judged."""

    position: int  # the turn's index in the workload (the demo shows the first of each rail)
    text: str
    reply: str
    flow: str
    categories: tuple[str, ...]
    from_cache: bool  # the refusing verdict was a cache hit
    judged: str = ""  # the text the refusing rail judged (``text``, or the main model's answer)
    judged_from: Judged = "user"


def refusal(
    position: int, text: str, reply: str, turn: TurnInfo, answer: str | None = None
) -> Refusal | None:
    """The refusal of a turn whose rails blocked it; None when the turn was allowed. ``answer``: the
    main model's answer in this turn, what an output rail judged (None when there was none)."""
    blocked = turn.checks.blocked_by
    if blocked is None:
        return None
    found = (blocked.flow, blocked.categories, blocked.from_cache)
    if any(r is blocked for r in turn.checks.output):
        return Refusal(position, text, reply, *found, judged=answer or "", judged_from="main")
    return Refusal(position, text, reply, *found, judged=text, judged_from="user")


def main_call_seconds(turn: TurnInfo) -> float | None:
    """How long the turn's main call took, when it ran to its answer (None otherwise)."""
    for call in turn.llm_calls:
        if call.task == MAIN_TASK and not call.cancelled:
            return call.duration
    return None


__all__ = [
    "MAIN_TASK",
    "PATHS",
    "Judged",
    "MainWork",
    "Path",
    "Refusal",
    "check_path",
    "input_blocked",
    "main_call_seconds",
    "main_work_on_block",
    "refusal",
]
