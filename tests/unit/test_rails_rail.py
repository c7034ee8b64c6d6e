"""How a rail decides from its check's outcome: verdicts, outages (on_error), inputs that cannot be
judged and unreadable answers (always blocked), bugs (blocked)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from guardcache.checks.check import CheckOutcome
from guardcache.checks.verdict import Verdict
from guardcache.errors import (
    BackendInputRejectedError,
    BackendStatusError,
    BackendTimeoutError,
    InputRejectedError,
    ParseError,
)
from guardcache.flows import KNOWN_FLOWS, FlowRef
from guardcache.rails.rail import Rail


class Scripted:
    """A check that returns or raises what the test says (the Check protocol, no I/O)."""

    task = "scripted"

    def __init__(self, result: CheckOutcome | BaseException) -> None:
        self.result = result

    async def run(self, variables: Mapping[str, Any], deadline: float | None = None) -> CheckOutcome:
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result

    async def prime(self) -> None:
        return None


def rail(result: CheckOutcome | BaseException, on_error: str) -> Rail:
    ref = FlowRef.parse("content safety check input $model=content_safety")
    return Rail(ref=ref, spec=KNOWN_FLOWS[ref.name], check=Scripted(result), on_error=on_error)


ON_ERROR = ["block", "allow"]


@pytest.mark.parametrize("on_error", ON_ERROR)
async def test_a_verdict_decides_whatever_on_error_says(on_error: str) -> None:
    ok = await rail(CheckOutcome(Verdict(True), True, 0.001), on_error).run({"user_input": "x"})
    assert ok.allowed and ok.from_cache and ok.error is None
    no = await rail(CheckOutcome(Verdict(False, ("Violence",)), False, 0.1), on_error).run({})
    assert not no.allowed and no.categories == ("Violence",)


@pytest.mark.parametrize("on_error", ON_ERROR)
@pytest.mark.parametrize(
    "exc", [BackendTimeoutError("t"), BackendStatusError("s", status=503)], ids=["timeout", "503"]
)
async def test_an_outage_follows_on_error(on_error: str, exc: Exception) -> None:
    result = await rail(exc, on_error).run({})
    assert result.allowed is (on_error == "allow") and result.error is not None


@pytest.mark.parametrize("on_error", ON_ERROR)
@pytest.mark.parametrize(
    "exc",
    [
        InputRejectedError("too long"),
        BackendInputRejectedError("400", status=400),
        ParseError("no verdict"),
        KeyError("a bug"),
        UnicodeEncodeError("utf-8", "\udfff", 0, 1, "surrogates not allowed"),
    ],
    ids=["rejected", "backend-400", "parse", "bug", "unicode-bug"],
)
async def test_what_a_user_can_cause_blocks_even_under_allow(on_error: str, exc: Exception) -> None:
    result = await rail(exc, on_error).run({})
    assert not result.allowed and result.error is not None


@pytest.mark.parametrize("on_error", ON_ERROR)
async def test_an_unreadable_answer_blocks_even_under_allow(on_error: str) -> None:
    outcome = CheckOutcome(Verdict(False, (), "unreadable"), False, 0.1, "the answer is not JSON")
    result = await rail(outcome, on_error).run({})
    assert not result.allowed and result.error == "the answer is not JSON"
