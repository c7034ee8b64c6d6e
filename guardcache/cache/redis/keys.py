"""Redis key layout of the shared tier.

One model's entries live under ``{prefix}:{scope}:``; a value is ``{prefix}:{scope}:{<hex digest>}``,
its lease ``{prefix}:{scope}:{<hex digest>}:lease`` and the model's shared counters
``{prefix}:{scope}:stats``. The digest is NOT the cache key: it is an HMAC of it under the operator's
secret (:class:`~guardcache.cache.redis.auth.RedisAuth`), so no one can compute the key of a chosen
text from the config. This module only lays keys out; it holds no secret. Why this shape:

- ``scope`` (e.g. ``content_safety:1a2b3c4d``: model type + a short hash of the model name) exists for
  operators: the CLI can count or clear one model with ``SCAN MATCH {prefix}:{scope}:*``. It is NOT
  what keeps models apart: the digest already covers model, template and parameters.
- The braces around the digest are a Redis Cluster hash tag. A value and its lease hash to the same
  slot, so one Lua script may touch both, while different digests still spread over every slot
  (tagging the scope instead would pin a whole model to one node).
- Only digests and fixed words appear in keys: no user text ever reaches Redis.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Hashable
from dataclasses import dataclass

_UNSAFE_SCOPE_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")
_GLOB_SPECIALS = re.compile(r"([*?\[\]\\])")

LEASE_SUFFIX = ":lease"
STATS_SUFFIX = "stats"
CLEARED_SUFFIX = "cleared"  # the scope's clear token (cache/redis/clearing.py)


def model_scope(model_type: str, model_name: str) -> str:
    """``{model type}:{8 hex of blake2b(model name)}``, safe inside a key and a SCAN pattern.

    The model name is hashed because it may hold slashes, colons and other noise; the type is kept
    readable (characters outside ``[A-Za-z0-9_.-]`` become ``_``) so operators recognise it.
    """
    kind = _UNSAFE_SCOPE_CHARS.sub("_", model_type) or "_"
    tag = hashlib.blake2b(model_name.encode("utf-8"), digest_size=4).hexdigest()
    return f"{kind}:{tag}"


def glob_escape(text: str) -> str:
    """``text`` as a literal inside a Redis MATCH pattern."""
    return _GLOB_SPECIALS.sub(r"\\\1", text)


def key_bytes(key: Hashable) -> bytes:
    """The bytes a cache key is named by: the bytes themselves for digests (guardcache's keys),
    else a blake2b digest of ``repr(key)``, so even a text key never reaches Redis as text."""
    if type(key) is bytes:  # the hot path: guardcache's own keys
        return key
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key)
    return hashlib.blake2b(repr(key).encode("utf-8"), digest_size=32).digest()


def key_hex(key: Hashable) -> str:
    """:func:`key_bytes` in hex."""
    return key_bytes(key).hex()


@dataclass(frozen=True, slots=True)
class KeySpace:
    """The keys of one scope under one prefix."""

    prefix: str
    scope: str

    def __post_init__(self) -> None:
        for name in ("prefix", "scope"):
            value = getattr(self, name)
            if not value or any(c in value for c in "{}") or any(c.isspace() for c in value):
                raise ValueError(
                    f"redis key {name} must be non-empty, without spaces or braces (got {value!r}); "
                    "braces are reserved for the Redis Cluster hash tag around each digest"
                )

    @property
    def base(self) -> str:
        """``{prefix}:{scope}:``, the start of every key of this scope."""
        return f"{self.prefix}:{self.scope}:"

    def value_key(self, digest: str) -> str:
        """The value's key for a name ``digest`` (the store derives it with its secret)."""
        return f"{self.base}{{{digest}}}"

    def lease_key(self, digest: str) -> str:
        """The lease's key for a name ``digest``: same hash tag (slot) as the value."""
        return f"{self.base}{{{digest}}}{LEASE_SUFFIX}"

    @property
    def stats_key(self) -> str:
        """The hash of counters all replicas add their deltas to (HINCRBY)."""
        return f"{self.base}{STATS_SUFFIX}"

    @property
    def cleared_key(self) -> str:
        """The token ``guardcache cache clear`` replaces and every replica polls
        (:mod:`~guardcache.cache.redis.clearing`): a new value means "drop your in-process entries"."""
        return f"{self.base}{CLEARED_SUFFIX}"

    @property
    def scope_pattern(self) -> str:
        """MATCH pattern of every key of this scope (values, leases, stats)."""
        return glob_escape(self.base) + "*"

    @property
    def value_pattern(self) -> str:
        """MATCH pattern of this scope's values only (they end with the closing brace)."""
        return glob_escape(self.base) + "{*}"


def prefix_pattern(prefix: str) -> str:
    """MATCH pattern of every key under ``prefix`` (all scopes)."""
    return glob_escape(prefix) + ":*"


def scope_of(key: str, prefix: str) -> str | None:
    """The scope part of a key under ``prefix`` (``None`` when it is not one of ours)."""
    head = prefix + ":"
    if not key.startswith(head):
        return None
    rest = key[len(head) :]
    brace = rest.find(":{")
    if brace >= 0:
        return rest[:brace]
    for suffix in (STATS_SUFFIX, CLEARED_SUFFIX):
        if rest.endswith(":" + suffix):
            return rest[: -len(suffix) - 1]
    return None


__all__ = [
    "CLEARED_SUFFIX",
    "LEASE_SUFFIX",
    "KeySpace",
    "glob_escape",
    "key_bytes",
    "key_hex",
    "model_scope",
    "prefix_pattern",
    "scope_of",
]
