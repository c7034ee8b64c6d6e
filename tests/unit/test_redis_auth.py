"""Key names and value envelopes of the Redis tier (no sockets): what a Redis writer cannot forge."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from guardcache.cache.redis.auth import (
    ENVELOPE_OVERHEAD,
    ENVELOPE_VERSION,
    MIN_SECRET_BYTES,
    TAG_BYTES,
    RedisAuth,
    check_secret,
)
from guardcache.cache.redis.keys import KeySpace, key_hex

SECRET = b"unit-test-secret-0123456789abcdef"
OTHER_SECRET = b"another-secret-0123456789abcdef!"
BASE = "guardcache:content_safety:1a2b3c4d:"
KEY = bytes(range(32))
NOW = 1_700_000_000_000
LATER = NOW + 60_000
PAYLOAD = b'\x01{"a":1,"l":"safe"}'


def name(auth: RedisAuth, key: bytes = KEY) -> str:
    return KeySpace("guardcache", "content_safety:1a2b3c4d").value_key(auth.key_digest(key))


def test_key_names_are_keyed_digests_of_the_cache_key_and_scope() -> None:
    auth = RedisAuth(SECRET, BASE)
    digest = auth.key_digest(KEY)
    assert len(digest) == 64 and int(digest, 16) >= 0
    assert digest == RedisAuth(SECRET, BASE).key_digest(KEY)  # every replica computes the same name
    assert digest != key_hex(KEY)  # not the cache key, which anyone with the config can compute
    assert digest != hashlib.sha256(KEY).hexdigest()
    assert digest != RedisAuth(OTHER_SECRET, BASE).key_digest(KEY)  # another secret: another name
    assert digest != RedisAuth(SECRET, "guardcache:topic_control:1a2b3c4d:").key_digest(KEY)
    assert digest != auth.key_digest(b"\xff" + KEY[1:])
    assert len(auth.key_digest(("a", "text key"))) == 64


def test_a_sealed_value_opens_only_at_its_key_with_its_secret_before_its_expiry() -> None:
    auth = RedisAuth(SECRET, BASE)
    at = name(auth)
    sealed = auth.seal(at, PAYLOAD, LATER)
    assert sealed.startswith(ENVELOPE_VERSION) and sealed.endswith(PAYLOAD)
    assert len(sealed) == len(PAYLOAD) + ENVELOPE_OVERHEAD == len(PAYLOAD) + 1 + 8 + TAG_BYTES
    assert auth.open(at, sealed, NOW) == (PAYLOAD, LATER)
    assert RedisAuth(SECRET, BASE).open(at, sealed, NOW) == (PAYLOAD, LATER)  # another replica
    assert RedisAuth(OTHER_SECRET, BASE).open(at, sealed, NOW) is None
    assert auth.open(name(auth, b"\x01" * 32), sealed, NOW) is None  # copied onto another key
    assert auth.open(at + ":lease", sealed, NOW) is None
    assert auth.open(at, sealed, LATER) is None  # kept past its expiry (PERSIST, or re-inserted)
    assert auth.open(at, sealed, LATER - 1) == (PAYLOAD, LATER)


def tamper(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1 :]


@pytest.mark.parametrize(
    "where",
    [0, 1, 8, 9, 9 + TAG_BYTES - 1, ENVELOPE_OVERHEAD, -1],
    ids=["version", "expiry-high", "expiry-low", "tag-first", "tag-last", "payload-first", "payload-last"],
)
def test_any_flipped_bit_is_rejected(where: int) -> None:
    auth = RedisAuth(SECRET, BASE)
    at = name(auth)
    sealed = auth.seal(at, PAYLOAD, LATER)
    assert auth.open(at, tamper(sealed, where % len(sealed)), NOW) is None


def test_forgeries_without_the_secret_are_rejected() -> None:
    auth = RedisAuth(SECRET, BASE)
    at = name(auth)
    header = ENVELOPE_VERSION + LATER.to_bytes(8, "big")
    forged = [
        PAYLOAD,  # the bare codec bytes, as before authentication
        header + b"\x00" * TAG_BYTES + PAYLOAD,  # an absent (zero) tag
        header + PAYLOAD,  # no tag at all
        header + hmac.digest(b"guessed-secret-0123456789", at.encode() + PAYLOAD, "sha256")[:16] + PAYLOAD,
        b"",
        ENVELOPE_VERSION,
        auth.seal(at, PAYLOAD, LATER)[: ENVELOPE_OVERHEAD - 1],  # truncated
    ]
    assert [auth.open(at, data, NOW) for data in forged] == [None] * len(forged)
    # the right envelope with a longer life is not the right envelope
    sealed = auth.seal(at, PAYLOAD, LATER)
    extended = ENVELOPE_VERSION + (LATER * 10).to_bytes(8, "big") + sealed[9:]
    assert auth.open(at, extended, LATER + 1) is None


def test_secrets_are_checked_and_never_shown() -> None:
    with pytest.raises(ValueError, match=f"at least {MIN_SECRET_BYTES}") as info:
        RedisAuth(b"x" * (MIN_SECRET_BYTES - 1), BASE)
    assert "xxxx" not in str(info.value)
    with pytest.raises(ValueError, match="must be bytes"):
        check_secret("a str secret of enough length")  # type: ignore[arg-type]
    check_secret(b"x" * MIN_SECRET_BYTES)
    auth = RedisAuth(SECRET, BASE)
    assert repr(auth) == "RedisAuth(<secret hidden>)"
    assert not hasattr(auth, "__dict__")  # no stray attribute holding the secret
