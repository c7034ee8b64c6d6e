"""Shadow rails: a guard tried out on live traffic without deciding anything.

``rails.input.shadow_flows`` / ``rails.output.shadow_flows`` name rails that judge a sample of the
turns (``rails.shadow.sample``) once they are answered, so that an operator can see how a new guard
(another model, another prompt) would have judged real traffic before promoting it (moving the flow
to ``flows``; docs/operations.md). What makes that safe to run in production:

- **Off the critical path.** A sampled turn's judgements start as a task of their own when the turn
  is over (``GuardedTurn.run`` has its result; ``guardcache serve`` starts it once the response is
  sent). Nobody awaits that task, so it adds no latency; it runs in a fresh context, so it records
  nothing into the turn's ``explain()`` calls and cannot fire the turn's early main-model start.
- **It decides nothing.** Its verdicts are only compared with the live ones and reported
  (``TurnInfo.shadow``, :class:`ShadowStats`); a shadow "unsafe" blocks nothing.
- **Bounded.** At most ``rails.shadow.max_concurrency`` samples are under way; a sampled turn past
  that is dropped and counted (``dropped["limit"]``), never queued, so a slow or hanging shadow guard
  costs a bounded number of tasks and connections. Each call is bounded by its model's own
  ``parameters.timeout``. Closing the rails waits ``rails.shadow.close_timeout`` for the samples
  under way, then cancels the rest (``dropped["closed"]``).
- **Its own cache namespace.** A shadow check's verdicts are cached under its namespace with a
  shadow mark added (:func:`shadow_namespace`), so a shadow verdict is never served to a live rail,
  nor a live one to the shadow, even for the same flow on the same model, in memory and in Redis.

Agreement: each shadow rail's decision (``allowed``, ``blocked``, ``error``) is paired with the live
one (:func:`live_label`: the live rail of the same flow in that direction when it ran, else the
direction's rails together, ``none`` when no live rail judged that text) and counted per pair
(``guardcache_shadow_total{rail,live,shadow}`` in ``guardcache serve``'s ``/metrics``).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import random
import threading
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from guardcache.cache import Namespace
from guardcache.checks.verdict import MESSAGE, RailResult
from guardcache.config import RailGroup, RailsConfig
from guardcache.config.shadow import ShadowSettings
from guardcache.flows import KNOWN_FLOWS
from guardcache.rails.builder import Runtime, build_check
from guardcache.rails.rail import Rail
from guardcache.rails.turn import CheckResult, ShadowResult, TurnInfo

log = logging.getLogger(__name__)

SHADOW_MARK = ("~shadow", "true")
"""The parameter :func:`shadow_namespace` adds: a name no generation parameter has (``~``)."""

LIMIT = "limit"
CLOSED = "closed"
DROP_REASONS = (LIMIT, CLOSED)
"""Why a sampled turn was not judged: the concurrency limit was reached, or the rails closed first."""


class Rng(Protocol):
    """What sampling needs of a random source (``random.Random`` fits; a test passes a seeded one)."""

    def random(self) -> float: ...


def shadow_namespace(namespace: Namespace) -> Namespace:
    """``namespace`` with the shadow mark: every other field kept as it is (``dataclasses.replace``
    recomputes the digest), so the shadow's keys differ from any live check's and still change with
    everything a live key changes with (model, template, parameters, version)."""
    return dataclasses.replace(namespace, params=(*namespace.params, SHADOW_MARK))


class ShadowRail(NamedTuple):
    """One shadow rail and what its judgement is compared with."""

    rail: Rail
    direction: str  # "input" | "output"
    counterparts: frozenset[str]  # the live rails (flow texts) of the same flow in that direction


class ShadowStats(NamedTuple):
    """A snapshot of the counts (what ``/metrics`` reads at scrape time)."""

    sampled: int  # sampled turns whose judgements started
    dropped: Mapping[str, int]  # sampled turns not judged (or not to the end), by DROP_REASONS
    in_flight: int  # samples under way
    agreement: Mapping[tuple[str, str, str], int]  # (shadow flow, live, shadow) -> judgements


class ShadowRails:
    """A config's shadow rails, their sampling and their counts; one per :class:`TurnRunner`.

    Thread-safe counts (one ``LLMRails`` may serve several event loops: the blocking API runs a
    loop per call); the tasks are kept per loop and closed by that loop's :meth:`aclose`.
    """

    def __init__(self, rails: Sequence[ShadowRail], settings: ShadowSettings, rng: Rng | None = None) -> None:
        self.rails = tuple(rails)
        self.settings = settings
        self.inputs = tuple(r for r in self.rails if r.direction == "input")
        self.outputs = tuple(r for r in self.rails if r.direction == "output")
        self._rng: Rng = rng if rng is not None else random.Random()
        self._lock = threading.Lock()
        self._sampled = 0
        self._dropped = dict.fromkeys(DROP_REASONS, 0)
        self._agreement: dict[tuple[str, str, str], int] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    def build(cls, config: RailsConfig, runtime: Runtime, rng: Rng | None = None) -> ShadowRails | None:
        """The shadow rails of ``config`` on the runtime's clients and caches, or None without any
        (a config without shadow flows pays nothing per turn)."""
        rails: list[ShadowRail] = []
        for direction, group, live in (
            ("input", config.rails.input, runtime.input_rails),
            ("output", config.rails.output, runtime.output_rails),
        ):
            rails += _shadow_rails(config, group, runtime, direction, live)
        if not rails:
            return None
        return cls(rails, config.rails.shadow, rng)

    # -- sampling --------------------------------------------------------------------------------

    def offer(self, variables: Mapping[str, Any], answer: str | None, turn: TurnInfo) -> bool:
        """Judge this finished turn in the background if it is sampled; True when a sample started.

        ``variables``: the turn's (``user_input``, ``history``); ``answer``: the main model's whole
        answer (None when there is none: the input rails blocked, or it did not finish), judged by
        the output shadow rails; ``turn``: its record, whose ``shadow`` the results are added to.
        Never raises and never waits: past the concurrency limit the sample is dropped."""
        if self._rng.random() >= self.settings.sample:
            return False
        jobs: list[tuple[ShadowRail, Mapping[str, Any]]] = [(r, variables) for r in self.inputs]
        if answer is not None and self.outputs:
            judged = {**variables, "bot_response": answer}
            jobs += [(r, judged) for r in self.outputs]
        if not jobs:
            return False
        with self._lock:
            if len(self._tasks) >= self.settings.max_concurrency:
                self._dropped[LIMIT] += 1
                return False
            self._sampled += 1
            # A fresh context: the turn's records, tracing span and early-start signal stay its own.
            task = asyncio.get_running_loop().create_task(
                self._judge(jobs, turn.checks, turn), context=contextvars.Context()
            )
            self._tasks.add(task)
        task.add_done_callback(self._done)
        return True

    def _done(self, task: asyncio.Task[None]) -> None:
        with self._lock:
            self._tasks.discard(task)

    async def _judge(
        self, jobs: Sequence[tuple[ShadowRail, Mapping[str, Any]]], live: CheckResult, turn: TurnInfo
    ) -> None:
        try:
            await asyncio.gather(*(self._one(shadow, variables, live, turn) for shadow, variables in jobs))
        except asyncio.CancelledError:
            with self._lock:
                self._dropped[CLOSED] += 1
            raise

    async def _one(
        self, shadow: ShadowRail, variables: Mapping[str, Any], live: CheckResult, turn: TurnInfo
    ) -> None:
        result = await shadow.rail.run(variables)  # never raises (Rail.run); its model's timeout
        results = live.input if shadow.direction == "input" else live.output
        live_as, compared_with = live_label(results, shadow.counterparts, shadow.direction)
        found = ShadowResult(
            shadow.rail.name, shadow.direction, live_as, rail_label(result), compared_with, result
        )
        turn.shadow = (*turn.shadow, found)
        key = (found.flow, found.live, found.shadow)
        with self._lock:
            self._agreement[key] = self._agreement.get(key, 0) + 1

    # -- counts and closing ----------------------------------------------------------------------

    def stats(self) -> ShadowStats:
        """The counts now (a copy, taken under the lock)."""
        with self._lock:
            return ShadowStats(self._sampled, dict(self._dropped), len(self._tasks), dict(self._agreement))

    async def aclose(self, *, drain: bool = True) -> None:
        """Finish this event loop's samples: wait up to ``close_timeout`` for them when ``drain``,
        then cancel what is left and wait (again at most ``close_timeout``) for it to end. Bounded
        however the shadow guards behave; a loop about to end (the blocking API) cancels at once."""
        loop = asyncio.get_running_loop()
        with self._lock:
            mine = [t for t in self._tasks if t.get_loop() is loop]
        if not mine:
            return
        bound = self.settings.close_timeout
        if drain:
            await asyncio.wait(mine, timeout=bound)
        left = [t for t in mine if not t.done()]
        for task in left:
            task.cancel()
        if left:
            _, stuck = await asyncio.wait(left, timeout=bound)
            if stuck:
                log.warning(
                    "%d shadow sample(s) did not end within %.1f s of being cancelled", len(stuck), bound
                )


def rail_label(result: RailResult) -> str:
    """A rail's decision as the agreement counts it: ``error`` without a verdict (whatever
    ``on_error`` made of it), else ``blocked`` or ``allowed``."""
    if result.error is not None:
        return "error"
    return "allowed" if result.allowed else "blocked"


def live_label(
    results: Sequence[RailResult], counterparts: frozenset[str], direction: str
) -> tuple[str, str]:
    """What the live rails decided about the text a shadow rail judged, and what that is: the
    results of the live rails of the same flow (``counterparts``) when they ran, else every live
    rail of the direction; ``blocked`` if one blocked on a verdict, else ``error`` if one had no
    verdict, else ``allowed``; ``none`` when no live rail judged it. Only the message's results
    count (tool results and tool calls are other texts); a stream checked in windows counts all
    its windows."""
    messages = [r for r in results if r.kind == MESSAGE]
    same = [r for r in messages if r.flow in counterparts]
    chosen = same or messages
    if not chosen:
        return "none", f"no live {direction} rail"
    what = ", ".join(sorted({r.flow for r in chosen})) if same else f"the live {direction} rails"
    labels = {rail_label(r) for r in chosen}
    for label in ("blocked", "error"):
        if label in labels:
            return label, what
    return "allowed", what


def _shadow_rails(
    config: RailsConfig, group: RailGroup, runtime: Runtime, direction: str, live: Sequence[Rail]
) -> list[ShadowRail]:
    rails: list[ShadowRail] = []
    for ref in group.shadow_refs():
        check: Any = build_check(config, ref, runtime)
        check.namespace = shadow_namespace(check.namespace)  # every check keys on its namespace
        rail = Rail(ref=ref, spec=KNOWN_FLOWS[ref.name], check=check, on_error="block")
        counterparts = frozenset(r.name for r in live if r.ref.name == ref.name)
        rails.append(ShadowRail(rail, direction, counterparts))
    return rails


__all__ = [
    "CLOSED",
    "DROP_REASONS",
    "LIMIT",
    "SHADOW_MARK",
    "Rng",
    "ShadowRail",
    "ShadowRails",
    "ShadowStats",
    "live_label",
    "rail_label",
    "shadow_namespace",
]
