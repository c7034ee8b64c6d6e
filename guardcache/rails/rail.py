"""A configured rail: one flow on one model, with the group's ``on_error`` policy.

A check that cannot get a verdict (backend timeout, 5xx/429 after retries, refused connection,
unparseable output) is not a verdict: nothing is cached, the failure is logged, and the rail decides
by its explicit policy — ``block`` (fail closed, the default) or ``allow``. The turn still gets a reply.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from guardcache.errors import BackendError, ParseError
from guardcache.flows import FlowRef, FlowSpec
from guardcache.library.check import LLMCheck
from guardcache.library.verdict import RailResult

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Rail:
    """What the runtime runs for one entry of ``rails.<input|output>.flows``."""

    ref: FlowRef
    spec: FlowSpec
    check: LLMCheck
    on_error: str  # "block" | "allow"

    @property
    def name(self) -> str:
        return self.ref.text or self.ref.name

    async def run(self, variables: Mapping[str, str]) -> RailResult:
        """Run the check on this turn's texts; never raises for a backend or parse failure."""
        wanted = {k: variables[k] for k in self.spec.variables}
        started = time.monotonic()
        try:
            outcome = await self.check.run(wanted)
        except (BackendError, ParseError) as exc:
            return self._failed(exc, started)
        except Exception as exc:  # a bug must not let a message through unchecked either
            log.exception("rail %r raised unexpectedly", self.name)
            return self._failed(exc, started)
        verdict = outcome.verdict
        return RailResult(
            flow=self.name,
            allowed=verdict.allowed,
            categories=verdict.categories,
            from_cache=outcome.from_cache,
            duration=outcome.duration,
        )

    def _failed(self, exc: Exception, started: float) -> RailResult:
        allowed = self.on_error == "allow"
        reason = f"{type(exc).__name__}: {exc}"
        log.warning(
            "rail %r could not get a verdict (%s); on_error=%s -> %s",
            self.name,
            reason,
            self.on_error,
            "allowed" if allowed else "blocked",
        )
        return RailResult(
            flow=self.name,
            allowed=allowed,
            duration=time.monotonic() - started,
            error=reason,
        )


__all__ = ["Rail"]
