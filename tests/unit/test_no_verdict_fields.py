"""What a turn says about verdicts it did not get: ``RailResult.no_verdict``/``error_kind``,
``CheckResult.no_verdict``/``reason``/``outcome``, the served ``guardcache`` object and header, and
``guardcache_turns_total``. (Over real HTTP, per failure class: tests/integration/
test_no_verdict_reporting.py.)"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from guardcache.checks.verdict import RailResult
from guardcache.llm.records import ExplainInfo
from guardcache.rails.turn import OUTCOMES, CheckResult, TurnInfo
from guardcache.server import answers
from guardcache.server.metrics import ServerMetrics

OK = RailResult("a", True)
UNSAFE = RailResult("b", False, categories=("violence",))
DOWN_PASSED = RailResult("c", True, error="BackendTimeoutError: no answer within 0.5 s")
DOWN_BLOCKED = RailResult("d", False, error="BackendStatusError: HTTP 503")
UNREADABLE = RailResult("e", False, error="the answer is not JSON")


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (None, None),
        ("BackendRefusedConfigError: HTTP 401 from http://x/v1", "BackendRefusedConfigError"),
        ("BackendDeclinedError: the guard declined", "BackendDeclinedError"),
        ("InputRejectedError: the text is 9 characters long, over max_input_chars=4", "InputRejectedError"),
        ("KeyError", "KeyError"),  # a bug: the class name alone
        ("the answer is not JSON", "ParseError"),  # an unreadable answer: its reason, a sentence
        ("the 'User Safety' rating is neither safe nor unsafe", "ParseError"),
    ],
)
def test_a_rail_says_whether_it_got_a_verdict_and_the_failures_class(
    error: str | None, kind: str | None
) -> None:
    result = RailResult("flow", False, error=error)
    assert result.no_verdict is (error is not None)
    assert result.error_kind == kind


def test_a_rail_result_is_still_the_tuple_it_was_plus_what_it_judged() -> None:
    # The hit path builds one per rail per turn: what is derived stays a property, not a field.
    # ``kind`` (a message, a tool result, a tool call) is no derivation: it says what was judged.
    fields = ("flow", "allowed", "categories", "from_cache", "duration", "error", "kind")
    assert RailResult._fields == fields


@pytest.mark.parametrize(
    ("checks", "no_verdict", "reason", "outcome"),
    [
        (CheckResult(), (), None, "allowed"),
        (CheckResult((OK,), (OK,)), (), None, "allowed"),
        (CheckResult((OK, UNSAFE)), (), "verdict", "blocked_verdict"),
        (CheckResult((DOWN_BLOCKED,)), ("d",), "no_verdict", "blocked_no_verdict"),
        (CheckResult((UNREADABLE,)), ("e",), "no_verdict", "blocked_no_verdict"),
        (
            CheckResult((DOWN_PASSED, OK), (DOWN_PASSED._replace(flow="f"),)),
            ("c", "f"),
            None,
            "passed_no_verdict",
        ),
        # A verdict block stands beside a rail let through without one: the text was judged.
        (CheckResult((DOWN_PASSED,), (UNSAFE,)), ("c",), "verdict", "blocked_verdict"),
        (CheckResult((DOWN_PASSED,), (DOWN_BLOCKED,)), ("c", "d"), "no_verdict", "blocked_no_verdict"),
        # A streamed answer checked in windows runs an output rail per window: listed once.
        (
            CheckResult((OK,), (DOWN_PASSED, OK._replace(flow="c"), DOWN_PASSED)),
            ("c",),
            None,
            "passed_no_verdict",
        ),
    ],
)
def test_a_turn_lists_its_rails_without_a_verdict_and_says_what_decided(
    checks: CheckResult, no_verdict: tuple[str, ...], reason: str | None, outcome: str
) -> None:
    assert checks.no_verdict == no_verdict
    assert checks.reason == reason
    assert checks.outcome == outcome and outcome in OUTCOMES
    assert (checks.reason is None) is checks.allowed
    turn = TurnInfo(ExplainInfo(), checks)
    assert turn.no_verdict == no_verdict and turn.reason == reason


def test_every_rail_answering_allocates_no_list() -> None:
    empty: tuple[str, ...] = ()  # CPython's one empty tuple: no object made per turn
    assert CheckResult((OK, OK), (OK,)).no_verdict is empty and CheckResult().no_verdict is empty


def test_the_summary_says_no_verdict_and_the_outcome() -> None:
    text = TurnInfo(ExplainInfo(), CheckResult((DOWN_PASSED,), (OK,))).summary()
    assert "rail c: allowed [no verdict: BackendTimeoutError" in text
    assert "outcome: passed_no_verdict" in text
    assert "outcome" not in TurnInfo(ExplainInfo(), CheckResult((OK,))).summary()


# -- the served answer -----------------------------------------------------------------------------


class _Stream:
    """What the answers read of a ``GuardedStream``: ``blocked``, ``rail``, ``turn``."""

    def __init__(self, checks: CheckResult, blocked: str | None = None, rail: str | None = None) -> None:
        self.turn = TurnInfo(ExplainInfo(), checks)
        self.blocked = blocked
        self.rail = rail


def _served(stream: _Stream) -> tuple[dict[str, Any], dict[str, str] | None]:
    no_verdict = stream.turn.checks.no_verdict
    return answers.extension(stream, "c", no_verdict), answers.headers(stream, no_verdict)  # type: ignore[arg-type]


def test_an_answered_turn_keeps_its_shape_and_gets_no_header() -> None:
    extension, headers = _served(_Stream(CheckResult((OK,), (OK,))))
    assert extension == {"blocked": False, "config_id": "c"} and headers is None
    extension, headers = _served(_Stream(CheckResult((UNSAFE,)), "input", "b"))
    assert extension == {
        "blocked": True,
        "direction": "input",
        "rail": "b",
        "reason": "verdict",
        "config_id": "c",
    }
    assert headers == {"X-Guardcache-Blocked": "input"}


def test_a_turn_without_a_verdict_lists_it_in_the_body_and_a_header() -> None:
    extension, headers = _served(_Stream(CheckResult((DOWN_PASSED,), (DOWN_PASSED._replace(flow="f"),))))
    assert extension == {"blocked": False, "no_verdict": ["c", "f"], "config_id": "c"}
    assert headers == {answers.NO_VERDICT_HEADER: "c, f"}
    extension, headers = _served(_Stream(CheckResult((DOWN_BLOCKED,)), "input", "d"))
    assert extension == {
        "blocked": True,
        "direction": "input",
        "rail": "d",
        "reason": "no_verdict",
        "config_id": "c",
        "no_verdict": ["d"],
    }
    assert headers == {"X-Guardcache-Blocked": "input", answers.NO_VERDICT_HEADER: "d"}


def test_any_flow_name_makes_a_valid_splittable_header() -> None:
    names = [
        "content safety check input $model=content_safety",
        'self check input $model="a,b"',
        "topic safety check input $model=t%1 é\u2028",
    ]
    checks = CheckResult(tuple(RailResult(n, True, error="BackendTimeoutError: x") for n in names))
    _, headers = _served(_Stream(checks))
    assert headers is not None
    value = headers[answers.NO_VERDICT_HEADER]
    value.encode("ascii")  # latin-1-safe, and nothing a header cannot hold
    assert value.isprintable() and "\r" not in value and "\n" not in value
    assert value.split(", ")[0] == names[0]  # the usual names read as they are
    assert [unquote(part) for part in value.split(", ")] == names


# -- the metric --------------------------------------------------------------------------------


def _scrape(metrics: ServerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_answered_turns_are_counted_by_what_decided_them() -> None:
    metrics = ServerMetrics(dict)
    turns = [
        (CheckResult((OK,), (OK,)), "allowed"),
        (CheckResult((UNSAFE,)), "blocked_input"),
        (CheckResult((DOWN_BLOCKED,)), "blocked_input"),
        (CheckResult((DOWN_PASSED,), (OK,)), "allowed"),
        (CheckResult((DOWN_PASSED,), (UNREADABLE,)), "blocked_output"),
        # not answered: not counted by decision (their checks may be partial)
        (CheckResult((DOWN_PASSED,)), "main_error"),
        (CheckResult((OK,)), "client_left"),
    ]
    for checks, outcome in turns:
        metrics.observe_turn("c", TurnInfo(ExplainInfo(), checks), mode="plain", outcome=outcome, seconds=0.1)
    got = _scrape(metrics)
    counted = {
        labels[1][1]: value for (name, labels), value in got.items() if name == "guardcache_turns_total"
    }
    assert counted == {"allowed": 1, "blocked_verdict": 1, "blocked_no_verdict": 2, "passed_no_verdict": 1}
    # An unreadable answer's kind is its class, not its reason (a bounded label).
    errors = {
        dict(labels)["kind"]
        for (name, labels), value in got.items()
        if name == "guardcache_check_errors_total"
    }
    assert errors == {"BackendStatusError", "BackendTimeoutError", "ParseError"}
