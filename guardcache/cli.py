"""The ``guardcache`` command: one subcommand per job, each registered by the module that owns it.

Subcommand modules are imported lazily so ``guardcache --help`` works without the optional extras.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

# subcommand -> module providing ``register(subparsers)``; the module's parser sets ``func``.
_SUBCOMMANDS: dict[str, str] = {
    "emulate": "guardcache.emulator.cli",
    "demo": "guardcache.demo.cli",
    "check": "guardcache.rails.cli",
    "cache": "guardcache.cache_cli",
    "serve": "guardcache.server.cli",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="guardcache",
        description="Cached guardrails for LLM apps: run the demo, the NIM emulator, or a check.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in _SUBCOMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # an optional extra is missing: keep the command, explain it
            missing = sub.add_parser(name, help=f"(unavailable: {exc})")
            missing.set_defaults(func=_unavailable(name, exc))
            continue
        module.register(sub)
    return parser


def _unavailable(name: str, exc: ImportError):  # type: ignore[no-untyped-def]
    def run(_args: argparse.Namespace) -> int:
        print(
            f"guardcache {name}: a dependency is missing ({exc}). "
            "Install the extras: pip install 'guardcache[server,redis]'",
            file=sys.stderr,
        )
        return 2

    return run


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
