"""``guardcache check --config DIR "message"``: run the configured rails on one message, for real."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys

from guardcache.config import RailsConfig
from guardcache.errors import ConfigError
from guardcache.rails.llmrails import LLMRails


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "check",
        help="check one message (and optionally a bot response) against a config's rails",
        description=(
            "Runs the input rails of a config on MESSAGE, and the output rails too when --response is "
            "given, against the endpoints the config names (the API key comes from the env var the "
            "config names in api_key_env_var). Exit status: 0 allowed, 1 blocked, 2 usage/config error."
        ),
    )
    p.add_argument("message", help="the user message to check")
    p.add_argument("--config", required=True, help="a config folder (config.yml + prompts.yml) or file")
    p.add_argument("--response", help="a bot response to check with the output rails")
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    try:
        rails = LLMRails(RailsConfig.from_path(args.config))
    except ConfigError as exc:
        print(f"guardcache check: {exc}", file=sys.stderr)
        return 2
    messages = [{"role": "user", "content": args.message}]
    if args.response is not None:
        messages.append({"role": "assistant", "content": args.response})
    result = asyncio.run(rails.check_async(messages))
    rails_out = [*result.input, *result.output]
    if args.json:
        print(
            json.dumps(
                {
                    "allowed": result.allowed,
                    "rails": [
                        {
                            "flow": r.flow,
                            "allowed": r.allowed,
                            "categories": list(r.categories),
                            "from_cache": r.from_cache,
                            "duration_ms": round(r.duration * 1000, 3),
                            "error": r.error,
                        }
                        for r in rails_out
                    ],
                },
                indent=2,
            )
        )
    else:
        for r in rails_out:
            state = "allowed" if r.allowed else "BLOCKED"
            cats = f" ({', '.join(r.categories)})" if r.categories else ""
            err = f" [check failed: {r.error}]" if r.error else ""
            print(f"{r.flow}: {state}{cats} in {r.duration * 1000:.0f} ms{err}")
        print("allowed" if result.allowed else "blocked")
    return 0 if result.allowed else 1


__all__ = ["register", "run"]
