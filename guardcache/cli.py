"""The ``guardcache`` command: one subcommand per job, each registered by the module that owns it.

Subcommand modules are imported lazily so ``guardcache --help`` works without the optional extras.

Exit status, the same for every subcommand, so a script tells a mistake in its own call (2) from
what the command found or met (1):

- 0: done (``check``: allowed);
- 1: a negative result (``check``: blocked), or the command could not do its job at run time
  (``emulate``/``serve``: the port is taken; ``cache``: Redis did not answer);
- 2: a usage or config error, found before anything ran (bad flags, a config that does not load, a
  command whose optional extra is not installed);
- 3 (``check`` only): no verdict, a rail got none (see ``guardcache/rails/cli.py``).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Sequence

EXIT_USAGE = 2  # see the module doc: what every command returns for a usage or config error

# subcommand -> module providing ``register(subparsers)``; the module's parser sets ``func``.
_SUBCOMMANDS: dict[str, str] = {
    "emulate": "guardcache.emulator.cli",
    "demo": "guardcache.demo.cli",
    "check": "guardcache.rails.cli",
    "cache": "guardcache.commands.cache",
    "serve": "guardcache.server.cli",
}
# subcommand -> the extra that installs what its module imports (``check`` needs only the core).
_EXTRAS: dict[str, str] = {"emulate": "server", "demo": "server", "serve": "server", "cache": "redis"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="guardcache",
        description="Cached guardrails for LLM apps: run the demo, the NIM emulator, or a check.",
        epilog="Exit status: 0 ok (check: allowed), 1 a negative result (check: blocked) or a "
        "failure at run time (a port taken, Redis down), 2 a usage or config error, 3 (check only) "
        "no verdict.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in _SUBCOMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # an optional extra is missing: keep the command, explain it
            _add_unavailable(sub, name, exc)
            continue
        module.register(sub)
    return parser


def _package(name: str) -> str:
    """What ``pip install`` needs for subcommand ``name``."""
    extra = _EXTRAS.get(name)
    return f"guardcache[{extra}]" if extra else "guardcache[server,redis]"


def install_hint(name: str, exc: ImportError) -> str:
    """What to install for subcommand ``name``, whose module failed to import with ``exc``."""
    return f"guardcache {name}: a dependency is missing ({exc}). Install it: pip install '{_package(name)}'"


def _add_unavailable(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, exc: ImportError
) -> None:
    """A stand-in for a subcommand whose extra is not installed.

    It takes any arguments (its real flags are unknown without the module) and answers every
    invocation with the install hint: ``guardcache serve --config x --port 8080`` must say "install
    the server extra", not argparse's "unrecognized arguments: --config". ``add_help=False`` so that
    ``--help`` gets the hint too; ``main`` lets such a command's unknown arguments through.
    """
    stub = sub.add_parser(name, help=f"(unavailable: pip install '{_package(name)}')", add_help=False)
    stub.set_defaults(func=_unavailable(install_hint(name, exc)), accepts_any_arguments=True)


def _unavailable(hint: str) -> Callable[[argparse.Namespace], int]:
    def run(_args: argparse.Namespace) -> int:
        print(hint, file=sys.stderr)
        return EXIT_USAGE

    return run


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    # parse_known_args, not parse_args: the stand-in of an unavailable command must see any flags
    # (argparse cannot collect unknown options into a positional); every other command still gets
    # argparse's own "unrecognized arguments" error, exit 2.
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "accepts_any_arguments", False):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
