"""A cached verdict answered without awaiting (``Check.hit``, ``Rail.hit``), and its key.

The hit path must be the same decision as the full one: the same key for every kind of input, the same
lookups counted (a hit found there, the miss counted once by the full run that follows), the same
records, and any text the check cannot judge left to the full run, which decides it as before.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardcache.cache import LFUCache
from guardcache.checks.check import TurnTexts, digest, key_fields
from guardcache.checks.verdict import RailResult
from guardcache.errors import InputRejectedError
from guardcache.flows import KNOWN_FLOWS, FlowRef
from guardcache.llm.records import request_scope
from guardcache.prompts.parts import ContentParts, TextPart
from guardcache.rails.rail import Rail
from tests.unit.test_checks_content_safety import Recorder, make_check

TEXT = st.text(alphabet=st.sampled_from(" \t\nab\u00e9\u00a0\U0001f600\x00"), max_size=20)


def _full_key(texts: TurnTexts, variables: dict[str, Any], check: Any) -> bytes:
    return digest(check.namespace, key_fields(texts.read(variables), texts.names))


@settings(max_examples=400, deadline=None)
@given(user=TEXT, bot=TEXT)
def test_the_hit_paths_key_is_the_full_paths_key(user: str, bot: str) -> None:
    check = make_check(Recorder(), cache=None, task="content_safety_check_output")
    variables = {"user_input": user, "bot_response": bot, "history": ()}
    assert check.texts.key(variables, check.namespace) == _full_key(check.texts, variables, check)
    single = TurnTexts(("user_input",), 100)
    assert single.key(variables, check.namespace) == _full_key(single, variables, check)


def test_a_history_is_keyed_as_the_full_path_keys_it() -> None:
    check = make_check(Recorder(), cache=None)
    texts = TurnTexts(("history", "user_input"), 100)
    assert not texts.plain
    for history in ((), ({"role": "user", "content": "a  b"},), ""):
        variables = {"user_input": "hi", "history": history}
        assert texts.key(variables, check.namespace) == _full_key(texts, variables, check)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("x" * 101, InputRejectedError),  # over max_input_chars
        ("lone \ud800 surrogate", InputRejectedError),  # not valid Unicode
        (ContentParts.of([TextPart("hi")]), InputRejectedError),  # content parts, a text-only check
        (42, TypeError),
    ],
)
def test_a_text_the_check_cannot_judge_raises_what_the_full_path_raises(value: Any, error: type) -> None:
    check = make_check(Recorder(), cache=None)
    texts = TurnTexts(("user_input",), 100)
    with pytest.raises(error):
        _full_key(texts, {"user_input": value}, check)
    with pytest.raises(error):
        texts.key({"user_input": value}, check.namespace)


def _rail(check: Any) -> Rail:
    ref = FlowRef.parse("content safety check input $model=content_safety")
    return Rail(ref=ref, spec=KNOWN_FLOWS[ref.name], check=check, on_error="allow")


async def test_a_hit_is_counted_once_and_recorded_as_the_full_path_records_it() -> None:
    recorder = Recorder()
    cache = LFUCache(10, track_stats=True)
    rail = _rail(make_check(recorder, cache))
    variables = {"user_input": "How do I bake bread?"}

    assert rail.hit(variables) is None  # not stored: nothing counted, the full run decides
    assert (cache.get_stats().hits, cache.get_stats().misses) == (0, 0)
    with request_scope() as first:
        missed = await rail.run(variables)
    assert (cache.get_stats().hits, cache.get_stats().misses) == (0, 1)
    assert len(recorder.bodies) == 1 and not missed.from_cache

    with request_scope() as second:
        result = rail.hit(variables)
    assert isinstance(result, RailResult)
    assert result == RailResult(rail.name, True, (), True, result.duration, None)
    assert (cache.get_stats().hits, cache.get_stats().misses) == (1, 1)
    assert len(recorder.bodies) == 1
    [call] = second.llm_calls
    [original] = first.llm_calls
    assert call.from_cache and call.duration == result.duration
    assert (call.task, call.prompt_tokens, call.completion_tokens, call.total_tokens) == (
        original.task,
        original.prompt_tokens,
        original.completion_tokens,
        original.total_tokens,
    )

    with request_scope() as third:
        via_run = await rail.run(variables)  # the full path: the same result, one more hit
    assert via_run._replace(duration=0.0) == result._replace(duration=0.0)
    assert third.llm_calls[0]._replace(duration=0.0, started_at=0.0) == call._replace(
        duration=0.0, started_at=0.0
    )
    stats = cache.get_stats()
    assert (stats.hits, stats.misses, stats.hits + stats.misses) == (2, 1, 3)


async def test_a_text_the_check_cannot_judge_is_left_to_the_full_run_which_blocks_it() -> None:
    recorder = Recorder()
    cache = LFUCache(10, track_stats=True)
    rail = _rail(make_check(recorder, cache))  # on_error: allow, which must not let it through
    variables = {"user_input": "lone \ud800 surrogate"}
    assert rail.hit(variables) is None
    result = await rail.run(variables)
    assert not result.allowed and result.error is not None and "Unicode" in result.error
    assert recorder.bodies == [] and cache.get_stats().hits == 0


async def test_a_check_without_a_cache_or_without_hit_is_always_run() -> None:
    recorder = Recorder()
    rail = _rail(make_check(recorder, cache=None))
    assert rail.hit({"user_input": "hi"}) is None

    class RunOnly:  # a check with no hit (Check.hit is optional)
        task = "x"

        async def run(self, variables: Any, deadline: float | None = None) -> Any:
            raise AssertionError("not called here")

    assert _rail(RunOnly()).hit({"user_input": "hi"}) is None
