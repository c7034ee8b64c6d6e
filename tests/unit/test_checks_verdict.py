"""Cached check values are shared: equal values are one object, in bounded tables."""

from __future__ import annotations

from guardcache.checks import codec
from guardcache.checks import verdict as values
from guardcache.checks.verdict import CachedCheck, Verdict
from guardcache.llm.response import parse_usage
from guardcache.llm.types import Usage


def usage(prompt: int) -> Usage:
    return Usage(prompt, 6, prompt + 6, 288, "nvidia/llama-3.1-nemoguard-8b-content-safety", "nim")


def test_equal_checks_are_one_object_and_their_verdicts_too() -> None:
    a = CachedCheck.shared(Verdict(True, (), "safe"), usage(400))
    b = CachedCheck.shared(Verdict(True, (), "safe"), usage(400))
    c = CachedCheck.shared(Verdict(True, (), "safe"), usage(401))
    assert a is b and a == CachedCheck(Verdict(True, (), "safe"), usage(400))
    assert c is not a and c.verdict is a.verdict


def test_a_value_read_back_from_redis_is_the_shared_one() -> None:
    a = CachedCheck.shared(Verdict(False, ("Violence",), "unsafe"), usage(512))
    decoded = codec.decode(codec.encode(a))
    assert decoded is a


def test_the_tables_are_bounded() -> None:
    for i in range(values.SHARED_MAX + 10):
        CachedCheck.shared(Verdict(True, (), "safe"), usage(10_000 + i))
    assert len(values._CHECKS) <= values.SHARED_MAX
    assert len(values._VERDICTS) <= values.SHARED_MAX


def test_model_names_from_responses_are_interned() -> None:
    raw = {"prompt_tokens": 1, "completion_tokens": 1}
    name = "".join(["nvidia/", "some-model"])  # built at run time: not a literal constant
    other = "".join(["nvidia/", "some-model"])
    assert name is not other
    assert parse_usage(raw, model=name).model is parse_usage(raw, model=other).model
