"""Key layout of the Redis tier: digests only, one scope per model, cluster hash tags, SCAN patterns.

``KeySpace`` lays keys out around a name digest; the store derives that digest with its secret
(``tests/unit/test_redis_auth.py``)."""

from __future__ import annotations

import fnmatch
import re

import pytest

from guardcache.cache.keys import Namespace
from guardcache.cache.redis.keys import (
    KeySpace,
    glob_escape,
    key_bytes,
    key_hex,
    model_scope,
    prefix_pattern,
    scope_of,
)

DIGEST = bytes(range(32)).hex()
OTHER = (b"\x01" * 32).hex()


def test_value_lease_and_stats_keys_have_the_documented_shape() -> None:
    ks = KeySpace("guardcache", "content_safety:1a2b3c4d")
    assert ks.value_key(DIGEST) == f"guardcache:content_safety:1a2b3c4d:{{{DIGEST}}}"
    assert ks.lease_key(DIGEST) == f"guardcache:content_safety:1a2b3c4d:{{{DIGEST}}}:lease"
    assert ks.stats_key == "guardcache:content_safety:1a2b3c4d:stats"


def cluster_hash_tag(key: str) -> str:
    """What Redis Cluster hashes: the text between the first { and the next }, if non-empty."""
    start = key.find("{")
    end = key.find("}", start + 1)
    return key[start + 1 : end] if start >= 0 and end > start + 1 else key


def test_a_value_and_its_lease_share_a_cluster_slot_but_digests_spread() -> None:
    ks = KeySpace("guardcache", "content_safety:1a2b3c4d")
    assert cluster_hash_tag(ks.value_key(DIGEST)) == cluster_hash_tag(ks.lease_key(DIGEST))
    assert cluster_hash_tag(ks.value_key(DIGEST)) == DIGEST  # not the scope: no hot slot
    assert cluster_hash_tag(ks.value_key(OTHER)) != cluster_hash_tag(ks.value_key(DIGEST))


def test_the_scope_names_the_model_type_and_hashes_the_model_name() -> None:
    scope = model_scope("content_safety", "nvidia/llama-3.1-nemoguard-8b-content-safety")
    assert re.fullmatch(r"content_safety:[0-9a-f]{8}", scope)
    assert scope != model_scope("content_safety", "another/model")
    assert scope != model_scope("topic_control", "nvidia/llama-3.1-nemoguard-8b-content-safety")
    assert model_scope("a{b}*c", "m").startswith("a_b__c:")  # no hash tag or glob characters


def test_keys_never_contain_the_prompt() -> None:
    ns = Namespace.of("content_safety", "m", "tpl")
    prompt = "my password is hunter2"
    ks = KeySpace("guardcache", model_scope("content_safety", "m"))
    assert "hunter2" not in ks.value_key(key_hex(ns.key(prompt)))
    # a non-bytes key is hashed too, never written as text
    assert "hunter2" not in key_hex(prompt) and len(key_hex(prompt)) == 64
    assert key_hex(("a", 1)) == key_hex(("a", 1))
    assert key_bytes(ns.key(prompt)) == ns.key(prompt) and len(key_bytes(prompt)) == 32


@pytest.mark.parametrize("bad", ["", "has space", "a{b", "x}"])
def test_prefixes_with_braces_or_spaces_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError, match="hash tag"):
        KeySpace(bad, "content_safety:00000000")


def test_scan_patterns_select_exactly_one_scope() -> None:
    ks = KeySpace("gc[1]*", "content_safety:1a2b3c4d")
    other = KeySpace("gc[1]*", "content_safety:99999999")
    keys = [ks.value_key(DIGEST), ks.lease_key(DIGEST), ks.stats_key]
    # Redis MATCH is glob-like; fnmatch has no backslash escapes, so check the escaping separately.
    assert glob_escape("gc[1]*?\\") == "gc\\[1\\]\\*\\?\\\\"
    plain = KeySpace("gc", "content_safety:1a2b3c4d")
    assert all(fnmatch.fnmatchcase(k, plain.scope_pattern) for k in map(plain.value_key, [DIGEST]))
    assert fnmatch.fnmatchcase(plain.value_key(DIGEST), plain.value_pattern)
    assert not fnmatch.fnmatchcase(plain.lease_key(DIGEST), plain.value_pattern)
    assert not fnmatch.fnmatchcase(plain.stats_key, plain.value_pattern)
    assert prefix_pattern("gc") == "gc:*"
    assert [scope_of(k, "gc[1]*") for k in keys] == ["content_safety:1a2b3c4d"] * 3
    assert scope_of(other.value_key(DIGEST), "gc[1]*") == "content_safety:99999999"
    assert scope_of("elsewhere:key", "gc[1]*") is None
