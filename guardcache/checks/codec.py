"""A compact, versioned byte form of :class:`CachedCheck` for shared stores (Redis).

Never pickle: a shared store is written by other processes, and unpickling is code execution. The
format is JSON with short keys behind a one-byte version; a value this code cannot read (another
version, corruption) decodes to ``None`` and the caller treats it as a miss.
"""

from __future__ import annotations

import json
from typing import Any

from guardcache.checks.verdict import CachedCheck, Verdict
from guardcache.llm.types import Usage

VERSION = b"\x01"


def encode(check: CachedCheck) -> bytes:
    v, u = check.verdict, check.usage
    body: dict[str, Any] = {
        "a": 1 if v.allowed else 0,
        "l": v.label,
        "c": list(v.categories),
        "u": [u.prompt_tokens, u.completion_tokens, u.total_tokens, u.cached_prompt_tokens],
        "m": u.model,
        "p": u.provider,
    }
    return VERSION + json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode(data: bytes | None) -> CachedCheck | None:
    """The check, or None for anything unreadable (treated as a miss, then overwritten)."""
    if not data or data[:1] != VERSION:
        return None
    try:
        body = json.loads(data[1:])
        pt, ct, tt, cached = (int(n) for n in body["u"])
        verdict = Verdict(
            allowed=body["a"] == 1,
            categories=tuple(str(c) for c in body["c"]),
            label=str(body["l"]),
        )
        usage = Usage(pt, ct, tt, cached, body.get("m"), body.get("p"))
    except (ValueError, KeyError, TypeError):
        return None
    return CachedCheck.shared(verdict, usage)


__all__ = ["VERSION", "decode", "encode"]
