"""``guardcache check --config DIR "message"``: run the configured rails on one message, for real.

The exit status says what decided, not only whether the message passed, because a pipeline reads
it as a judgment: 0 when every rail that ran gave a verdict and none blocked, 1 when a rail's
verdict blocked, 3 when no verdict decided (a rail got none and blocked, or was let through by
``on_error: allow``: either way nothing judged the text), 2 for a usage or config error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from typing import Any

from guardcache.config import RailsConfig
from guardcache.errors import ConfigError
from guardcache.rails.llmrails import LLMRails
from guardcache.rails.turn import (
    ALLOWED,
    BLOCKED_NO_VERDICT,
    BLOCKED_VERDICT,
    PASSED_NO_VERDICT,
    CheckResult,
)

EXIT_ALLOWED = 0
EXIT_BLOCKED = 1
EXIT_USAGE = 2
EXIT_NO_VERDICT = 3

#: ``CheckResult.outcome`` -> exit status. A verdict block stands even if another rail got no
#: verdict: the text was judged, and not allowed.
EXIT_CODES = {
    ALLOWED: EXIT_ALLOWED,
    BLOCKED_VERDICT: EXIT_BLOCKED,
    BLOCKED_NO_VERDICT: EXIT_NO_VERDICT,
    PASSED_NO_VERDICT: EXIT_NO_VERDICT,
}

_MEANINGS = {
    EXIT_ALLOWED: "allowed by verdicts",
    EXIT_BLOCKED: "blocked by a verdict",
    EXIT_USAGE: "usage or config error",
    EXIT_NO_VERDICT: "no verdict",
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "check",
        help="check one message (and optionally a bot response) against a config's rails",
        description=(
            "Runs the input rails of a config on MESSAGE, and the output rails too when --response is "
            "given, against the endpoints the config names (the API key comes from the env var the "
            "config names in api_key_env_var). Exit status: 0 allowed by verdicts, 1 blocked by a "
            "verdict, 3 no verdict (a rail could not get one: an outage, a misconfigured or declining "
            "guard, an answer that is no verdict; whatever on_error then did), 2 usage or config error."
        ),
    )
    p.add_argument("message", help="the user message to check")
    p.add_argument("--config", required=True, help="a config folder (config.yml + prompts.yml) or file")
    p.add_argument("--response", help="a bot response to check with the output rails")
    p.add_argument(
        "--json", action="store_true", help="print one JSON object: the decision, its exit code, each rail"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    try:
        rails = LLMRails(RailsConfig.from_path(args.config))
    except ConfigError as exc:
        return _usage_error(args, str(exc))
    messages = [{"role": "user", "content": args.message}]
    if args.response is not None:
        messages.append({"role": "assistant", "content": args.response})
    try:
        result = asyncio.run(_check(rails, messages))
    except (TypeError, ValueError) as exc:  # nothing to check in what was given
        return _usage_error(args, str(exc))
    rails_out = [*result.input, *result.output]
    if not rails_out:  # "allowed" with no rail run would be a judgment nobody made
        what = "input or output" if args.response is not None else "input"
        return _usage_error(args, f"{args.config}: the config has no {what} rails to run")
    code = EXIT_CODES[result.outcome]
    if args.json:
        print(json.dumps(_report(result, code), indent=2))
    else:
        for r in rails_out:
            state = "allowed" if r.allowed else "BLOCKED"
            cats = f" ({', '.join(r.categories)})" if r.categories else ""
            err = f" [no verdict: {r.error}]" if r.error is not None else ""
            print(f"{r.flow}: {state}{cats} in {r.duration * 1000:.0f} ms{err}")
        print(_verdict_line(result))
    return code


async def _check(rails: LLMRails, messages: list[dict[str, str]]) -> CheckResult:
    """The rails' results, then the rails closed in the same loop (a Redis tier's counters flushed,
    connections closed), as ``guardcache serve`` does at shutdown: a one-shot command must not
    drop what it counted."""
    try:
        return await rails.check_async(messages)
    finally:
        await rails.aclose()


def _verdict_line(result: CheckResult) -> str:
    outcome = result.outcome
    if outcome == ALLOWED:
        return "allowed"
    if outcome == BLOCKED_VERDICT:
        return "blocked"
    flows = ", ".join(result.no_verdict)
    if outcome == BLOCKED_NO_VERDICT:
        return f"blocked: no verdict ({flows})"
    return f"allowed without a verdict (on_error: allow): no verdict ({flows})"


def _report(result: CheckResult, code: int) -> dict[str, Any]:
    """The ``--json`` object: no user text, only the rails' names, decisions and failures."""
    return {
        "decision": "allowed" if result.allowed else "blocked",
        "allowed": result.allowed,
        "outcome": result.outcome,
        "reason": result.reason,
        "no_verdict": list(result.no_verdict),
        "exit_code": code,
        "exit_meaning": _MEANINGS[code],
        "rails": [
            {
                "flow": r.flow,
                "direction": direction,
                "allowed": r.allowed,
                "no_verdict": r.no_verdict,
                "categories": list(r.categories),
                "from_cache": r.from_cache,
                "duration_ms": round(r.duration * 1000, 3),
                "error": r.error,
                "error_kind": r.error_kind,
            }
            for direction, results in (("input", result.input), ("output", result.output))
            for r in results
        ],
    }


def _usage_error(args: argparse.Namespace, message: str) -> int:
    print(f"guardcache check: {message}", file=sys.stderr)
    if args.json:
        error = {"outcome": "error", "exit_code": EXIT_USAGE, "exit_meaning": _MEANINGS[EXIT_USAGE]}
        print(json.dumps({**error, "error": message}, indent=2))
    return EXIT_USAGE


__all__ = ["EXIT_CODES", "EXIT_NO_VERDICT", "register", "run"]
