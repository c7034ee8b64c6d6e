"""Seeded fault injection: which failure, if any, hits the next request.

One uniform draw per request from the instance's own ``random.Random(seed)`` picks at most one
fault, so a run with the same seed and the same request order fails the same requests. Changing the
rates at runtime reseeds, so a test that sets faults gets a reproducible sequence from that point.
"""

from __future__ import annotations

import dataclasses
import enum
import random
from typing import Any

from guardcache.errors import ConfigError

from .config import FAULT_RATE_FIELDS, FaultConfig


class Fault(enum.Enum):
    """The failures a real NIM (or the network in front of it) can produce."""

    ERROR = "error"  # HTTP 500 in OpenAI error shape
    RATE_LIMIT = "rate_limit"  # HTTP 429 with Retry-After
    HANG = "hang"  # no answer for hang_seconds (then a normal answer)
    MALFORMED = "malformed"  # 200, but the model's content is not the expected JSON
    INVALID_BODY = "invalid_body"  # 200 with a truncated, unparseable JSON body
    DROP = "drop"  # connection closed without any response
    DUPLICATE_KEY = "duplicate_key"  # 200, each verdict stated twice, the second one flipped


_FAULT_OF_FIELD: dict[str, Fault] = {
    "error_rate": Fault.ERROR,
    "rate_limit_rate": Fault.RATE_LIMIT,
    "hang_rate": Fault.HANG,
    "malformed_rate": Fault.MALFORMED,
    "invalid_body_rate": Fault.INVALID_BODY,
    "drop_rate": Fault.DROP,
    "duplicate_key_rate": Fault.DUPLICATE_KEY,
}
assert set(_FAULT_OF_FIELD) == set(FAULT_RATE_FIELDS)


class FaultInjector:
    """Draws faults from ``config``; owns the RNG so instances never share randomness."""

    def __init__(self, config: FaultConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)

    def draw(self) -> Fault | None:
        """The fault for the next request, or None. Consumes exactly one random number."""
        x = self.rng.random()
        for name in FAULT_RATE_FIELDS:
            rate = getattr(self.config, name)
            if x < rate:
                return _FAULT_OF_FIELD[name]
            x -= rate
        return None

    def update(self, **changes: Any) -> FaultConfig:
        """Replace some fields (validated) and reseed; raises ``ConfigError`` naming a bad field."""
        known = {f.name for f in dataclasses.fields(FaultConfig)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ConfigError(f"unknown fault field(s) {unknown}; known: {sorted(known)}")
        self.config = dataclasses.replace(self.config, **changes)
        self.rng = random.Random(self.config.seed)
        return self.config

    def reseed(self) -> None:
        self.rng = random.Random(self.config.seed)
