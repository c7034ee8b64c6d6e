"""Authentication of the shared tier: key names and value tags derived from a secret.

Whoever can write to Redis must not be able to make a replica serve a verdict it did not compute
(e.g. plant "safe" for a harmful text). Two HMAC-SHA256 uses, each with its own subkey derived from
the operator's secret (domain separation: a key name seen in Redis is never usable as a tag):

- **Key names.** The digest inside the braces is ``HMAC(names, scope base || cache key)``, not the
  cache key itself. The cache key is computable by anyone holding the (public) config and a text;
  the name is not without the secret, so a writer can neither aim at the entry of a chosen text nor
  tell which text an observed key belongs to. The ``{prefix}:{scope}:{<64 hex>}`` layout (and the
  CLI's SCAN by prefix) stays as it was.
- **Value tags.** A stored value is an envelope ``version (1) || expires_at_ms (8) || tag (16) ||
  payload``, the tag being ``HMAC(tags, len(redis key) || redis key || version || expires_at_ms ||
  payload)`` truncated to 16 bytes and checked with :func:`hmac.compare_digest`. Covering the key
  stops a genuine value from being copied onto another key (a "safe" verdict moved to a harmful
  text's entry); covering the expiry stops a genuine value from being served past its TTL (after a
  ``PERSIST`` or a re-insert of a captured value, e.g. following ``guardcache cache clear``), and
  lets a key rotation re-write an entry without extending its life.

Why a 16-byte tag: a forgery must guess 128 bits, and each guess costs the attacker a write and a
replica's read; truncating HMAC-SHA256 to 128 bits is standard (RFC 4868's HMAC-SHA-256-128, NIST SP
800-107 allows >= 64), and it keeps each entry 16 bytes smaller than the full tag (entries are about
120 bytes of verdict). The key name keeps the full 32 bytes: it is the cluster hash tag and the
documented layout, and its length is not a security margin.

Authentication protects integrity, not availability: a writer can still delete entries (costing
backend calls) or hold a lease key it has observed (a replica waits at most ``lease_ms`` + margin,
then computes itself). A value that fails the check is a miss: the tier recomputes and overwrites it.

Costs: one HMAC per key name, one per seal or open (a few microseconds in CPython, against a Redis
round trip of about 100-300 us).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Hashable

from guardcache.cache.redis.keys import key_bytes

MIN_SECRET_BYTES = 16
TAG_BYTES = 16
ENVELOPE_VERSION = b"\xa1"
_EXPIRY_BYTES = 8
_HEADER = len(ENVELOPE_VERSION) + _EXPIRY_BYTES  # version || expires_at_ms: authenticated, in clear
ENVELOPE_OVERHEAD = _HEADER + TAG_BYTES

_NAMES_LABEL = b"guardcache/redis/key-names/v1"
_TAGS_LABEL = b"guardcache/redis/value-tags/v1"


def check_secret(secret: bytes, what: str = "secret") -> None:
    """Raise ``ValueError`` unless ``secret`` is bytes of at least :data:`MIN_SECRET_BYTES`.

    The message never contains the secret (only its length)."""
    if not isinstance(secret, bytes):
        raise ValueError(f"the Redis {what} must be bytes (got {type(secret).__name__})")
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(
            f"the Redis {what} is {len(secret)} bytes; it needs at least {MIN_SECRET_BYTES} "
            "(e.g. the output of: openssl rand -hex 32)"
        )


class RedisAuth:
    """Key names and value envelopes of one scope (``base``) under one secret.

    Holds only derived subkeys, never shows them (``repr``), and keeps HMAC objects keyed once (the
    names one already fed the scope), so each name, seal or open costs a ``copy`` and an ``update``
    instead of re-keying.
    """

    __slots__ = ("_names", "_tags")

    def __init__(self, secret: bytes, base: str) -> None:
        check_secret(secret)
        names_key = hmac.digest(secret, _NAMES_LABEL, "sha256")
        tags_key = hmac.digest(secret, _TAGS_LABEL, "sha256")
        encoded = base.encode("utf-8")
        self._names = hmac.new(names_key, len(encoded).to_bytes(4, "big") + encoded, hashlib.sha256)
        self._tags = hmac.new(tags_key, digestmod=hashlib.sha256)

    def __repr__(self) -> str:
        return "RedisAuth(<secret hidden>)"

    def key_digest(self, key: Hashable) -> str:
        """The 64-hex name of ``key`` inside the braces: ``HMAC(names, base || key)``."""
        mac = self._names.copy()
        mac.update(key_bytes(key))
        return mac.hexdigest()

    def _tag(self, redis_key: str, header: bytes, payload: bytes) -> bytes:
        name = redis_key.encode("utf-8")
        mac = self._tags.copy()
        mac.update(b"".join((len(name).to_bytes(4, "big"), name, header, payload)))
        return mac.digest()[:TAG_BYTES]

    def seal(self, redis_key: str, payload: bytes, expires_at_ms: int) -> bytes:
        """The envelope to store at ``redis_key``: valid there only, and only until the expiry."""
        header = ENVELOPE_VERSION + expires_at_ms.to_bytes(_EXPIRY_BYTES, "big")
        return header + self._tag(redis_key, header, payload) + payload

    def open(self, redis_key: str, data: bytes, now_ms: int) -> tuple[bytes, int] | None:
        """``(payload, expires_at_ms)`` if ``data`` was sealed for ``redis_key`` with this secret
        and has not expired at ``now_ms``; None otherwise (forged, tampered, moved from another key,
        another secret or format, or kept past its expiry)."""
        if len(data) < ENVELOPE_OVERHEAD or data[:1] != ENVELOPE_VERSION:
            return None
        header = data[:_HEADER]
        payload = data[ENVELOPE_OVERHEAD:]
        if not hmac.compare_digest(data[_HEADER:ENVELOPE_OVERHEAD], self._tag(redis_key, header, payload)):
            return None
        expires_at_ms = int.from_bytes(header[1:], "big")
        if now_ms >= expires_at_ms:
            return None
        return payload, expires_at_ms


__all__ = [
    "ENVELOPE_OVERHEAD",
    "ENVELOPE_VERSION",
    "MIN_SECRET_BYTES",
    "TAG_BYTES",
    "RedisAuth",
    "check_secret",
]
