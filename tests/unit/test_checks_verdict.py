"""Cached check values: compact, immutable, restored exactly, shared (equal values are one object)."""

from __future__ import annotations

import pickle
import sys
import time

import pytest

from guardcache.checks import codec
from guardcache.checks import verdict as values
from guardcache.checks.verdict import CachedCheck, Verdict
from guardcache.llm.records import LLMCallInfo
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
    assert len(values._HEADS) <= values.SHARED_MAX


def test_model_names_from_responses_are_interned() -> None:
    raw = {"prompt_tokens": 1, "completion_tokens": 1}
    name = "".join(["nvidia/", "some-model"])  # built at run time: not a literal constant
    other = "".join(["nvidia/", "some-model"])
    assert name is not other
    assert parse_usage(raw, model=name).model is parse_usage(raw, model=other).model


MODEL = "nvidia/llama-3.1-nemoguard-8b-content-safety"
USAGES = [
    Usage(1234, 6, 1240, 1152, MODEL, "nim"),
    Usage(),  # all zero, no model
    Usage(400, 8, 408, 0, MODEL, None),
    Usage(2**32 - 1, 2**32 - 1, 2**32 - 1, 2**32 - 1, MODEL, "vllm"),  # the widest packed counts
    Usage(2**32, 1, 2**32 + 1, 0, MODEL, "nim"),  # too wide to pack: kept as they are
    Usage(5, 6, 10**30, 0, "m", "p"),
    Usage(-1, 3, 2, 0, "m", "p"),  # not from parse_usage (it clamps), still kept exactly
]


@pytest.mark.parametrize("usage", USAGES)
def test_a_value_gives_back_exactly_the_usage_it_was_made_with(usage: Usage) -> None:
    verdict = Verdict(False, ("Violence",), "unsafe")
    for value in (CachedCheck(verdict, usage), CachedCheck.shared(verdict, usage)):
        assert value.verdict == verdict and value.usage == usage
        assert value == CachedCheck(verdict, usage) and hash(value) == hash(CachedCheck(verdict, usage))
        assert pickle.loads(pickle.dumps(value)) == value
        assert codec.decode(codec.encode(value)) == value


@pytest.mark.parametrize("usage", USAGES)
def test_replay_is_the_record_from_usage_builds_field_for_field(usage: Usage) -> None:
    """The hit path builds the record without ``from_usage``: this keeps the two in step."""
    value = CachedCheck.shared(Verdict(True, (), "safe"), usage)
    for from_cache in (True, False):
        before = time.time()
        verdict, info = value.replay("content_safety_check_input", 0.25, from_cache)
        after = time.time()
        expected = LLMCallInfo.from_usage(
            "content_safety_check_input", usage, duration=0.25, from_cache=from_cache
        )
        assert verdict is value.verdict and type(info) is LLMCallInfo
        assert info._replace(started_at=0.0) == expected._replace(started_at=0.0)
        assert before - 0.25 <= info.started_at <= after - 0.25
        assert not info.cancelled and info.from_cache is from_cache


def test_unequal_values_differ() -> None:
    base = CachedCheck(Verdict(True, (), "safe"), USAGES[0])
    for other in (
        CachedCheck(Verdict(False, (), "safe"), USAGES[0]),
        CachedCheck(Verdict(True, (), "safe"), Usage(1234, 6, 1240, 1151, MODEL, "nim")),
        CachedCheck(Verdict(True, (), "safe"), Usage(1234, 6, 1240, 1152, MODEL, "vllm")),
        CachedCheck(Verdict(True, (), "safe"), Usage(1234, 6, 1240, 1152, "other", "nim")),
    ):
        assert other != base
    assert base != (base.verdict, base.usage)


def test_values_are_immutable() -> None:
    value = CachedCheck.shared(Verdict(True, (), "safe"), USAGES[0])
    with pytest.raises(AttributeError):
        value.verdict = Verdict(False)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        value._tokens = 0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del value._head
    assert value.usage == USAGES[0]


def test_a_distinct_value_is_two_small_objects() -> None:
    """What an entry with its own token counts costs beyond the key and the LFU's structure: the
    check (two slots) and its packed counts; the head (verdict, model, provider) is shared."""
    a = CachedCheck.shared(Verdict(True, (), "safe"), Usage(1234, 6, 1240, 1152, MODEL, "nim"))
    b = CachedCheck.shared(Verdict(True, (), "safe"), Usage(1300, 6, 1306, 1152, MODEL, "nim"))
    assert a is not b and a._head is b._head
    assert sys.getsizeof(a) + sys.getsizeof(a._tokens) <= 96  # was ~190: a Usage of six slots, ints


def test_codec_bytes_are_unchanged() -> None:
    """Values written to Redis before the compact value (same format, version 1) read back exactly,
    and what is written now is byte for byte what was written then."""
    written = (
        b'\x01{"a":0,"l":"unsafe","c":["Violence","Criminal Planning/Confessions"],'
        b'"u":[1234,20,1254,1152],"m":"nvidia/llama-3.1-nemoguard-8b-content-safety","p":"nim"}'
    )
    value = CachedCheck(
        Verdict(False, ("Violence", "Criminal Planning/Confessions"), "unsafe"),
        Usage(1234, 20, 1254, 1152, MODEL, "nim"),
    )
    assert codec.decode(written) == value and codec.encode(value) == written
    wide = b'\x01{"a":1,"l":"safe","c":[],"u":[1099511627776,0,1099511627776,0],"m":null,"p":null}'
    assert codec.decode(wide) == CachedCheck(Verdict(True, (), "safe"), Usage(2**40, 0, 2**40, 0))
    for other_version in (b"\x00" + written[1:], b"\x02" + written[1:], written[1:]):
        assert codec.decode(other_version) is None  # a miss, never a misread value
