"""A configured rail: one flow on one model, with the group's ``on_error`` policy.

What decides a rail, in order:
- a verdict from the model (fresh or cached): allowed or blocked as it says;
- an input the guard cannot judge because of the input itself (``InputRejectedError``: too long,
  not valid Unicode, refused by the backend as a bad request, or declined by the guard model: a
  refusal, a content filter, no text), or an answer that cannot be read as a verdict: **blocked,
  whatever** ``on_error`` **says** — a user can cause these at will, so they must never turn a
  check off;
- a backend that can never answer as configured (``BackendMisconfiguredError``: a redirect, 401,
  403, 404, a TLS certificate that does not verify): **blocked, whatever** ``on_error`` **says**,
  logged at ERROR (at most one line per 10 s) — a guard that cannot answer must not become no guard;
- a backend that gave no answer (timeout, 5xx/429 after retries, refused connection): an outage,
  decided by the explicit policy, ``block`` (fail closed, the default) or ``allow``;
- a bug (any other exception): blocked, and logged with its traceback.
Nothing of a failure is cached, the failure is logged without user text, and the turn still gets
a reply. Every decision but a verdict carries its failure in ``RailResult.error``
(``RailResult.no_verdict``), so no caller can take an outage let through for a safe verdict, or a
guard that could not answer for an unsafe one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from guardcache import tracing
from guardcache.checks.check import Check, CheckOutcome
from guardcache.checks.verdict import MESSAGE, RailResult
from guardcache.errors import (
    BackendDeclinedError,
    BackendError,
    BackendMisconfiguredError,
    InputRejectedError,
    ParseError,
)
from guardcache.flows import FlowRef, FlowSpec
from guardcache.llm.logs import RateLimitedLog

log = logging.getLogger(__name__)

_MISCONFIGURED_LOG = RateLimitedLog(log, interval=10.0)
"""One ERROR line per 10 s for misconfigured backends (every check fails the same way until an
operator acts; a line per check would flood the log)."""


@dataclass(frozen=True, slots=True)
class Rail:
    """What the runtime runs for one entry of ``rails.<input|output>.flows``."""

    ref: FlowRef
    spec: FlowSpec
    check: Check
    on_error: str  # "block" | "allow"
    #: The flow as the config wrote it (``ref.text``), else its name: every result carries it.
    name: str = field(init=False, compare=False)
    #: The check's ``hit`` (``Check.hit``), or None for a check without one: looked up once.
    _hit: Callable[[Mapping[str, Any]], CheckOutcome | None] | None = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.ref.text or self.ref.name)
        object.__setattr__(self, "_hit", getattr(self.check, "hit", None))

    async def run(
        self,
        variables: Mapping[str, Any],
        deadline: float | None = None,
        *,
        kind: str = MESSAGE,
        _traced: bool = False,
    ) -> RailResult:
        """Run the check on this turn's texts, by ``deadline`` if given (a ``time.monotonic()``
        value); never raises (see the module docstring). In a span when tracing is on. ``kind``
        says what the texts are (a message, a tool result, a tool call: ``RailResult.kind``)."""
        if tracing.TRACER is not None and not _traced:
            run = self.run(variables, deadline, kind=kind, _traced=True)
            return await tracing.traced_rail(self.name, run, kind)
        if kind != MESSAGE:
            return (await self._run(variables, deadline))._replace(kind=kind)
        return await self._run(variables, deadline)

    def cached(self, variables: Mapping[str, Any]) -> bool:
        """Whether the check's verdict for these variables is in its cache now, never counted as a
        lookup; False for a text the check cannot read (its run decides)."""
        try:
            return self.check.cached(variables)
        except Exception:
            return False

    def hit(self, variables: Mapping[str, Any], kind: str = MESSAGE) -> RailResult | None:
        """:meth:`run`'s result when the check's verdict is cached, decided without awaiting; None
        (no lookup counted) when :meth:`run` must decide: a miss, a check without ``hit``, a text
        the check cannot read (``run`` reads it again and decides, as for any turn), tracing on
        (``run`` makes the spans)."""
        hit = self._hit
        if hit is None or tracing.TRACER is not None:
            return None
        try:
            outcome = hit(variables)
        except Exception:
            return None
        if outcome is None:
            return None
        verdict = outcome.verdict
        return _new_result(
            RailResult, (self.name, verdict.allowed, verdict.categories, True, outcome.duration, None, kind)
        )

    async def _run(self, variables: Mapping[str, Any], deadline: float | None) -> RailResult:
        started = time.monotonic()
        try:
            outcome = await self.check.run(variables, deadline)
        except InputRejectedError as exc:  # before BackendError: a backend 400 is both
            why = "the guard declined to judge it" if isinstance(exc, BackendDeclinedError) else None
            return self._result(exc, started, allowed=False, why=why or "the input cannot be judged")
        except BackendMisconfiguredError as exc:  # a guard that can never answer is not no guard
            return self._misconfigured(exc, started)
        except BackendError as exc:
            allowed = self.on_error == "allow"
            return self._result(exc, started, allowed=allowed, why=f"on_error={self.on_error}")
        except ParseError as exc:
            return self._result(exc, started, allowed=False, why="the answer is no verdict")
        except Exception as exc:  # a bug must not let a message through unchecked
            log.error(
                "rail %r failed unexpectedly (%s); blocking", self.name, type(exc).__name__, exc_info=True
            )
            return RailResult(self.name, False, duration=time.monotonic() - started, error=type(exc).__name__)
        verdict = outcome.verdict
        if outcome.error is not None:
            _warn(self.name, f"ParseError: {outcome.error}", "the answer is no verdict", allowed=False)
        return RailResult(
            flow=self.name,
            allowed=verdict.allowed,
            categories=verdict.categories,
            from_cache=outcome.from_cache,
            duration=outcome.duration,
            error=outcome.error,
        )

    def _misconfigured(self, exc: BackendMisconfiguredError, started: float) -> RailResult:
        reason = f"{type(exc).__name__}: {exc}"
        _MISCONFIGURED_LOG.log(
            logging.ERROR,
            "rail %r cannot reach a working guard (%s); the backend is misconfigured, so every "
            "check of this rail is blocked whatever on_error says until it is fixed",
            self.name,
            reason,
        )
        return RailResult(flow=self.name, allowed=False, duration=time.monotonic() - started, error=reason)

    def _result(self, exc: Exception, started: float, *, allowed: bool, why: str) -> RailResult:
        reason = f"{type(exc).__name__}: {exc}"  # guardcache's messages hold no user text
        _warn(self.name, reason, why, allowed=allowed)
        return RailResult(flow=self.name, allowed=allowed, duration=time.monotonic() - started, error=reason)


_new_result = tuple.__new__  # a RailResult built as the tuple it is (its __new__ is Python code)


def _warn(rail: str, reason: str, why: str, *, allowed: bool) -> None:
    log.warning(
        "rail %r could not get a verdict (%s); %s -> %s",
        rail,
        reason,
        why,
        "allowed" if allowed else "blocked",
    )


__all__ = ["Rail"]
