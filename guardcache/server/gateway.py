"""The rails alone, for the routes a gateway calls per request and keeps its own LLM call:
``POST /v1/checks`` (NeMo Guardrails' server, ``checks_api.py``) and LiteLLM's Generic Guardrail
API (``litellm_api.py``).

Why a module of its own: both routes judge texts that are not one chat turn (a conversation's
user message and its tool results, a gateway's list of texts), so each text is an :class:`Item`:
the variables one run of a direction's rails gets, and where in the request it came from. The
items of one request run in one request scope (one turn record: what ``/metrics`` counts and the
answer reports), the input rails first; a block there skips the output rails, as in a chat turn.
Every check is the same cached check a chat turn makes, so a text a chat turn already judged is a
cache hit here and the other way round. :class:`GatewayRoute` is what both routes do around their
own reading and answer: the body parsed, refusals counted and answered, the items run, a bug
answered 500 (never an answer that reads as passed), the request counted, guardcache's object added.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

from starlette.types import ASGIApp

from guardcache.checks.verdict import MESSAGE as MESSAGE_KIND
from guardcache.checks.verdict import RailResult
from guardcache.config import RailGroup
from guardcache.llm.records import request_scope
from guardcache.openai_wire import RequestError, kind_of
from guardcache.rails.rail import Rail
from guardcache.rails.runner import TurnRunner, run_group
from guardcache.rails.turn import CheckResult, TurnInfo
from guardcache.server.answers import error_response, internal_error
from guardcache.server.protocol import parse_json
from guardcache.server.responses import JSONResponse
from guardcache.server.state import ServerState

log = logging.getLogger("guardcache.server")

INPUT = "input"
OUTPUT = "output"

#: What an item's text is (``kind`` in the answers): a message's text, a tool's result (judged by
#: the input rails as the user's input: text nobody trusted), a tool call of the model (judged by
#: the output rails as its answer: ``name(arguments)``), or one of a gateway's texts.
MESSAGE = "message"
TOOL_RESULT = "tool_result"
TOOL_CALL = "tool_call"
TEXT = "text"


class Item(NamedTuple):
    """One run of a direction's rails: its variables (``user_input``, ``history`` and, for the
    output rails, ``bot_response``), and where in the request the judged text came from."""

    direction: str
    at: int
    kind: str
    variables: Mapping[str, Any]


class Outcome(NamedTuple):
    """An item and its rails' results (the rails that ran: a group stops at its first block)."""

    item: Item
    results: list[RailResult]


class Checked(NamedTuple):
    """A request's checks: the turn record (``checks``, the LLM calls, hits included) and each
    item's results, in the order the items were given."""

    turn: TurnInfo
    outcomes: list[Outcome]

    @property
    def blocked(self) -> tuple[Outcome, RailResult] | None:
        """The first item a rail blocked, and that rail's result; None when nothing blocked."""
        for outcome in self.outcomes:
            for result in outcome.results:
                if not result.allowed:
                    return outcome, result
        return None


async def run_items(runner: TurnRunner, items: Sequence[Item]) -> Checked:
    """Run each item's rails, the input items first; any input block skips the output items."""
    inputs = [item for item in items if item.direction == INPUT]
    outputs = [item for item in items if item.direction == OUTPUT]
    with request_scope() as explain:
        turn = TurnInfo(explain)
        outcomes = await _run(runner, inputs)
        if outputs and all(r.allowed for o in outcomes for r in o.results):
            outcomes += await _run(runner, outputs)
        turn.checks = CheckResult(
            tuple(r for o in outcomes if o.item.direction == INPUT for r in o.results),
            tuple(r for o in outcomes if o.item.direction == OUTPUT for r in o.results),
        )
    return Checked(turn, outcomes)


def rails_for(runner: TurnRunner, item: Item) -> tuple[Sequence[Rail], RailGroup]:
    """What judges an item, as in a chat turn: a tool result the tool-input rails, a tool call the
    tool-output rails (NeMo's ``rails.tool_input``/``tool_output``; the input and output rails when
    a config has none), anything else its direction's rails."""
    if item.kind == TOOL_RESULT:
        return runner.tool_input_rails, runner.tool_input_group
    if item.kind == TOOL_CALL:
        return runner.tool_output_rails, runner.tool_output_group
    if item.direction == INPUT:
        return runner.input_rails, runner.input_group
    return runner.output_rails, runner.output_group


async def _judge(runner: TurnRunner, item: Item) -> list[RailResult]:
    rails, group = rails_for(runner, item)
    kind = item.kind if item.kind in (TOOL_RESULT, TOOL_CALL) else MESSAGE_KIND
    return await run_group(rails, item.variables, group, kind=kind)


async def _run(runner: TurnRunner, items: Sequence[Item]) -> list[Outcome]:
    """One direction's items. In order (stopping at the first block) when there is nothing to
    overlap (one item, or every verdict cached: tasks would cost more CPU than the hits); else all
    at once, so a long conversation's misses wait for one backend round trip, not one per text."""
    if not items:
        return []
    if len(items) == 1 or all(
        rail.cached(item.variables) for item in items for rail in rails_for(runner, item)[0]
    ):
        outcomes: list[Outcome] = []
        for item in items:
            results = await _judge(runner, item)
            outcomes.append(Outcome(item, results))
            if not all(r.allowed for r in results):
                break
        return outcomes
    ran = await asyncio.gather(*(_judge(runner, item) for item in items))
    return [Outcome(item, results) for item, results in zip(items, ran, strict=True)]


def need_rails(runner: TurnRunner, direction: str, config_id: str, param: str) -> None:
    """A 400 naming ``param`` when the config has no rails of ``direction``: an answer would read
    as "passed" with no rail run."""
    rails = runner.input_rails if direction == INPUT else runner.output_rails
    if not rails:
        raise RequestError(
            f"Config {config_id!r} has no {direction} rails: nothing would check this request.",
            param=param,
            code="no_rails",
        )


def select_config_id(state: ServerState, *sources: tuple[Any, str], model: str | None = None) -> str:
    """The config a gateway request goes to: ``config_id`` (or NeMo's one-element ``config_ids``)
    in any of ``sources`` (an object and the prefix naming it in errors: NeMo puts them in
    ``guardrails``, guardcache's chat route at the top), which must agree; else as a chat request
    (the only config, or the one ``model`` names). 400/404 naming the field."""
    chosen: str | None = None
    named = ""
    for source, prefix in sources:
        if not isinstance(source, dict):
            continue
        for key in ("config_id", "config_ids"):
            value = source.get(key)
            if value is None:
                continue
            where = prefix + key
            if key == "config_id":
                if not isinstance(value, str):
                    raise RequestError(f"'{where}' must be a string, not {kind_of(value)}.", param=where)
                ids = [value] if value else []
            else:
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise RequestError(f"'{where}' must be an array of strings.", param=where)
                if len(value) > 1:
                    raise RequestError(
                        f"'{where}': combining configs is not supported; send one config_id.", param=where
                    )
                ids = value
            for config_id in ids:
                if chosen is not None and config_id != chosen:
                    raise RequestError(f"'{named}' and '{where}' name different configs.", param=where)
                chosen, named = config_id, where
    try:
        return state.select(chosen, model)
    except RequestError as exc:
        if named:
            exc.param = named
        raise


def tool_call_texts(calls: Any, where: str) -> list[str]:
    """The text each of a model's tool calls is judged as: ``name(arguments)``, the arguments as
    compact JSON when they parse (so escapes are judged as what the tool will read), else as sent.
    A 400 naming the field for a call that is not OpenAI's shape."""
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise RequestError(f"'{where}' must be an array of tool calls.", param=where)
    texts = []
    for j, call in enumerate(calls):
        at = f"{where}[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise RequestError(f"'{at}.function' must be an object (name and arguments).", param=at)
        name, arguments = function.get("name"), function.get("arguments", "")
        if not isinstance(name, str) or not name:
            raise RequestError(
                f"'{at}.function.name' must be a non-empty string.", param=f"{at}.function.name"
            )
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError, RecursionError):
                arguments = json.dumps(json.loads(arguments), ensure_ascii=False)
        elif isinstance(arguments, dict):  # some SDKs send them parsed
            arguments = json.dumps(arguments, ensure_ascii=False)
        else:
            raise RequestError(
                f"'{at}.function.arguments' must be a string (JSON).", param=f"{at}.function.arguments"
            )
        texts.append(f"{name}({arguments})")
    return texts


def rail_reports(outcomes: Sequence[Outcome], position: str) -> list[dict[str, Any]]:
    """Each rail that ran, what it judged and how it decided: ``verdict`` is the guard's
    (``"allowed"``/``"blocked"``; null when the rail got none), ``allowed`` the decision (the
    verdict's, else ``on_error``'s or a block), ``from_cache`` whether the verdict was a cache hit,
    ``error_kind`` the failure's class when there was no verdict. ``position`` names the index
    field (``message`` or ``text``)."""
    reports = []
    for outcome in outcomes:
        item = outcome.item
        for r in outcome.results:
            report: dict[str, Any] = {
                "rail": r.flow,
                "direction": item.direction,
                position: item.at,
                "kind": item.kind,
                "verdict": None if r.error is not None else ("allowed" if r.allowed else "blocked"),
                "allowed": r.allowed,
                "categories": list(r.categories),
                "from_cache": r.from_cache,
            }
            if r.error is not None:
                report["error_kind"] = r.error_kind
            reports.append(report)
    return reports


def extension(checked: Checked, config_id: str, position: str) -> dict[str, Any]:
    """guardcache's own fields beside a gateway answer: the config, why it blocked (``reason``:
    ``verdict`` or ``no_verdict``), the rails without a verdict, each rail's report, and how many
    verdicts came from the cache."""
    checks = checked.turn.checks
    body: dict[str, Any] = {"config_id": config_id}
    reason = checks.reason
    if reason is not None:
        body["reason"] = reason
    no_verdict = checks.no_verdict
    if no_verdict:
        body["no_verdict"] = list(no_verdict)
    body["rails"] = rail_reports(checked.outcomes, position)
    body["cache_hits"] = sum(1 for o in checked.outcomes for r in o.results if r.from_cache)
    return body


def observe(state: ServerState, config_id: str, checked: Checked, mode: str, started: float) -> None:
    """Count the request's checks in ``/metrics`` like a turn's (``mode``: ``checks``,
    ``litellm``), by what decided it."""
    found = checked.blocked
    outcome = f"blocked_{found[0].item.direction}" if found is not None else "allowed"
    state.metrics.observe_turn(
        config_id, checked.turn, mode=mode, outcome=outcome, seconds=time.monotonic() - started
    )


class Judging(NamedTuple):
    """What a gateway request asks: the config, its runner, the items to run, and what the route's
    answer needs besides the results (``context``: the route's own)."""

    config_id: str
    runner: TurnRunner
    items: list[Item]
    context: Any = None


class GatewayRoute:
    """A gateway route: :meth:`judging` reads the request, :meth:`answer` answers its results;
    :meth:`handle` is the rest, the same for every gateway route."""

    MODE: ClassVar[str]
    """The route's ``mode`` in ``/metrics`` (and its log lines)."""
    POSITION: ClassVar[str]
    """The index field of a rail's report (``message`` or ``text``: what the request lists)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    def judging(self, body: Any, started: float) -> Judging | ASGIApp:
        """What the decoded ``body`` asks (or an answer given without running a rail); a
        :class:`RequestError` naming the field otherwise."""
        raise NotImplementedError

    def answer(self, judging: Judging, checked: Checked) -> dict[str, Any]:
        """The route's own answer to the results (guardcache's object is added to it)."""
        raise NotImplementedError

    async def handle(self, raw: bytes) -> ASGIApp:
        """Judge the request (the body ``raw``, read within the limits)."""
        started = time.monotonic()
        state = self.state
        try:
            judging = self.judging(parse_json(raw, state.settings.max_json_depth), started)
        except RequestError as exc:
            state.metrics.refused(exc)
            return error_response(exc)
        if not isinstance(judging, Judging):
            return judging
        config_id = judging.config_id
        try:
            checked = await run_items(judging.runner, judging.items)
        except Exception as exc:  # a bug: never an answer that reads as passed
            log.error("%s: the checks failed unexpectedly (%s)", self.MODE, type(exc).__name__, exc_info=exc)
            state.metrics.observe_failed_turn(config_id, self.MODE, "error", time.monotonic() - started)
            return internal_error()
        observe(state, config_id, checked, self.MODE, started)
        answer = self.answer(judging, checked)
        answer["guardcache"] = extension(checked, config_id, self.POSITION)
        return JSONResponse(answer)


__all__ = [
    "INPUT",
    "MESSAGE",
    "OUTPUT",
    "TEXT",
    "TOOL_CALL",
    "TOOL_RESULT",
    "Checked",
    "GatewayRoute",
    "Item",
    "Judging",
    "Outcome",
    "extension",
    "need_rails",
    "observe",
    "rail_reports",
    "run_items",
    "select_config_id",
    "tool_call_texts",
]
