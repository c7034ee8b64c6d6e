"""Keys: whitespace normalization shared by strings and chat messages, namespaces, fixed size."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from guardcache.cache import Namespace, make_key, normalize_messages, normalize_text
from guardcache.cache.keys import KEY_SIZE

MESSY = " \t hello \t  world\r\n\r\n\r\n  again  \n"


def test_layout_whitespace_is_folded_and_ends_are_stripped() -> None:
    assert normalize_text(MESSY) == "hello world\n\nagain"
    assert normalize_text("a\rb\fc\vd") == "a\nb c d"


def test_characters_a_model_may_read_differently_from_a_space_are_kept() -> None:
    # Folding these let one user's NBSP variant (judged safe) answer for the plain text.
    for odd in ("\u00a0", "\u3000", "\u2028", "\u2029", "\x1c", "\x1f", "\x85", "\u200b"):
        text = f"where to cook{odd}drugs"
        assert normalize_text(text) == text
        assert normalize_text(text) != normalize_text("where to cook drugs")


def test_normalization_is_idempotent() -> None:
    for text in (MESSY, " a ", "a\n \n b", "\n\n", "x \t\n\ty", "plain"):
        assert normalize_text(normalize_text(text)) == normalize_text(text)


# The normalization as it was written first: one regex decides whether there is anything to fold.
# normalize_text asks with substring scans instead (cheaper); it must fold exactly the same texts.
_NEEDS_WORK = re.compile(r"[\t\r\f\v]|  |\n\n\n| \n|\n |^[ \n]|[ \n]\Z")


def _reference(text: str) -> str:
    if _NEEDS_WORK.search(text) is None:
        return text
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = re.sub(r"[ \t\f\v]+", " ", text).replace(" \n", "\n").replace("\n ", "\n")
    return re.sub(r"\n{3,}", "\n\n", text).strip(" \n")


# Each case the regex names, alone in a text that has nothing else to fold.
_EACH_CASE = ("a\tb", "a\rb", "a\fb", "a\vb", "a  b", "a\n\n\nb", "a \nb", "a\n b", " a", "\na", "a ", "a\n")


def _same_as_the_regex(text: str) -> None:
    assert normalize_text(text) == _reference(text)
    if _NEEDS_WORK.search(text) is None:
        assert normalize_text(text) is text  # nothing to fold: the very same string, no work


def test_the_quick_test_for_work_finds_each_case_alone() -> None:
    for text in ("", "a", "a b", "a\nb", "a\n\nb", *_EACH_CASE):
        _same_as_the_regex(text)
    for text in _EACH_CASE:
        assert normalize_text(text) != text


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet=" \t\n\r\f\vab\u00a0\u2028\x85", max_size=12))
def test_the_quick_test_for_work_folds_what_the_regex_did(text: str) -> None:
    _same_as_the_regex(text)


def test_strings_and_message_contents_normalize_the_same_way() -> None:
    [(role, content)] = normalize_messages([{"role": "user", "content": MESSY}])
    assert (role, content) == ("user", normalize_text(MESSY))


def test_equivalent_prompts_share_a_key_and_different_ones_do_not() -> None:
    ns = Namespace.of("content_safety", "nemoguard", "tpl1", {"temperature": 1e-20})
    assert ns.key("hello   world") == ns.key("hello world\n")
    assert ns.key([{"role": "user", "content": "a  b"}]) == ns.key([{"role": "user", "content": "a b"}])
    assert ns.key("hello world") != ns.key("hello world!")
    assert ns.key("x") != ns.key([{"role": "user", "content": "x"}])  # the shape is part of the key
    assert ns.key([{"role": "user", "content": "x"}]) != ns.key([{"role": "system", "content": "x"}])


def test_field_keys_normalize_each_text_and_keep_the_boundaries() -> None:
    ns = Namespace.of("content_safety", "nemoguard", "tpl1")
    assert ns.key_fields(["hi  there", MESSY]) == ns.key_fields(["hi there", "hello world\n\nagain"])
    assert ns.key_fields(["a b", "c"]) != ns.key_fields(["a", "b c"])  # length prefixes: no shifting
    assert ns.key_fields(["a", "b"]) != ns.key_fields(["b", "a"])
    assert ns.key_fields(["x"]) != ns.key("x")  # a different kind of key
    assert ns.key_fields(["", "x"]) != ns.key_fields(["x", ""]) != ns.key_fields(["x"])
    assert len(ns.key_fields(["a", "b"])) == KEY_SIZE


def test_every_namespace_field_separates_keys() -> None:
    base = Namespace.of("content_safety", "m", "tpl", {"temperature": 0.0, "max_tokens": 50})
    variants = [
        Namespace.of("topic_control", "m", "tpl", {"temperature": 0.0, "max_tokens": 50}),
        Namespace.of("content_safety", "m2", "tpl", {"temperature": 0.0, "max_tokens": 50}),
        Namespace.of("content_safety", "m", "tpl2", {"temperature": 0.0, "max_tokens": 50}),
        Namespace.of("content_safety", "m", "tpl", {"temperature": 0.0, "max_tokens": 51}),
    ]
    assert len({v.key("p") for v in [base, *variants]}) == 5
    same = Namespace.of("content_safety", "m", "tpl", {"max_tokens": 50, "temperature": 0.0})
    assert same.key("p") == base.key("p") and same == base


def test_keys_are_fixed_size_digests_without_user_text() -> None:
    ns = Namespace.of("t", "m")
    long_prompt = "secret " * 1000
    for prompt in ("", "secret", long_prompt):
        k = ns.key(prompt)
        assert isinstance(k, bytes) and len(k) == KEY_SIZE
        assert b"secret" not in k
    assert make_key(ns.digest, "a") == ns.key("a")
    assert len(ns.tag) == 16
