"""``guardcache emulate`` and ``python -m guardcache.emulator``: serve the NIM emulator.

Flags override a ``--config`` file (JSON or YAML ``EmulatorConfig``) or ``--config-json``; unset
flags leave the file's values alone. Once listening, one machine-readable line is printed on
stdout: ``GUARDCACHE_EMULATOR_READY {"host": ..., "port": ..., "base_url": ..., "pid": ...}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

from guardcache.errors import ConfigError

from .config import BLOCK_SIZES, CACHED_TOKENS_FIELDS, REUSE_MODES, EmulatorConfig
from .engine import Emulator
from .process import ready_line
from .server import EmulatorStartError, make_uvicorn

DESCRIPTION = (
    "Serve an OpenAI-compatible emulator of the NemoGuard NIMs with a prefix-cache latency model and "
    "fault injection. It answers every guard prompt NeMo Guardrails sends: NemoGuard content safety "
    "(JSON), Llama Guard 1/2/3 (safe / unsafe + codes), Nemotron content-safety reasoning (Prompt "
    "harm / Response Harm, <think> under /think), ShieldGemma and self check input/output (Yes/No), "
    "topic control (on-topic/off-topic) and jailbreak detect (POST /v1/classify); anything else is "
    "echoed. With --safety-guard --vision, the vision guard of NeMo's content_safety_vision example "
    "(Nemotron 3.5 Content Safety: images, 'User Safety' lines). Verdicts come from a keyword/regex "
    "policy (--policy)."
)

DEFAULT_PORT = 8001
"""Where ``guardcache emulate`` listens without ``--port``: the port every example config (and the
README's) gives the NemoGuard content-safety NIM. Not 8000: that is the main model's port in those
configs (a NIM container's own port), and a real main model there must not collide with the
emulator; nor ``guardcache serve``'s default (8080), so the two run side by side as they are."""

# flag dest -> (config section or None, field)
_FIELDS: dict[str, tuple[str | None, str]] = {
    "host": (None, "host"),
    "port": (None, "port"),
    "model": (None, "model"),
    "api_key": (None, "api_key"),
    "policy": (None, "policy_path"),
    "cached_tokens_field": (None, "cached_tokens_field"),
    "trailing_space": (None, "trailing_space"),
    "vision": (None, "vision"),
    "safety_guard": (None, "safety_guard"),
    "max_model_len": (None, "max_model_len"),
    "max_body_bytes": (None, "max_body_bytes"),
    "time_scale": ("latency", "time_scale"),
    "max_running": ("latency", "max_running"),
    "block_size": ("kv_cache", "block_size"),
    "kv_capacity_tokens": ("kv_cache", "capacity_tokens"),
    "reuse": ("kv_cache", "reuse"),
    "error_rate": ("faults", "error_rate"),
    "rate_limit_rate": ("faults", "rate_limit_rate"),
    "hang_rate": ("faults", "hang_rate"),
    "hang_seconds": ("faults", "hang_seconds"),
    "malformed_rate": ("faults", "malformed_rate"),
    "invalid_body_rate": ("faults", "invalid_body_rate"),
    "drop_rate": ("faults", "drop_rate"),
    "duplicate_key_rate": ("faults", "duplicate_key_rate"),
    "retry_after": ("faults", "retry_after_seconds"),
    "seed": ("faults", "seed"),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The emulator's flags, shared by ``guardcache emulate`` and ``python -m guardcache.emulator``."""
    src = p.add_argument_group("configuration source")
    src.add_argument("--config", metavar="FILE", help="load an EmulatorConfig from a JSON or YAML file")
    src.add_argument("--config-json", metavar="JSON", help="an EmulatorConfig as one JSON document")
    net = p.add_argument_group("server")
    net.add_argument("--host", help="address to bind (default 127.0.0.1)")
    net.add_argument(
        "--port",
        type=int,
        help=f"port to bind; 0 picks a free one (default {DEFAULT_PORT}: the content-safety NIM's port "
        "in the example configs)",
    )
    net.add_argument("--model", help="model name reported by /v1/models and in responses")
    net.add_argument(
        "--api-key", help="require 'Authorization: Bearer KEY' on /v1 inference routes (chat, classify)"
    )
    net.add_argument(
        "--max-body-bytes",
        type=int,
        help="answer HTTP 413 to a request body larger than this (default 1048576; 0 = no limit)",
    )
    net.add_argument("--log-level", help="server log level (default info; warning under python -m)")
    net.add_argument("--access-log", action="store_true", help="log one line per HTTP request")
    beh = p.add_argument_group("model behaviour")
    beh.add_argument("--policy", metavar="FILE", help="YAML/JSON policy: category name -> words/regexes")
    beh.add_argument(
        "--cached-tokens-field",
        choices=CACHED_TOKENS_FIELDS,
        help="when usage.prompt_tokens_details is sent: always (TRT-LLM), nonzero (vLLM), never",
    )
    beh.add_argument(
        "--max-model-len",
        type=int,
        help="context window in tokens (default 8192, as the NIMs); a prompt (+ max_tokens) over it "
        "answers vLLM's HTTP 400 'This model's maximum context length is ...'; 0 = no limit",
    )
    beh.add_argument(
        "--trailing-space",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="append a space after the content-safety JSON, as the real NIM sometimes does",
    )
    beh.add_argument(
        "--vision",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="take image_url parts in messages (a text-only model answers them HTTP 400)",
    )
    beh.add_argument(
        "--safety-guard",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="judge every request as Nemotron 3.5 Content Safety does (its chat template holds the "
        "safety prompt): answer 'User Safety: safe|unsafe' lines; with --vision, images too",
    )
    lat = p.add_argument_group("latency and KV cache")
    lat.add_argument("--time-scale", type=float, help="multiply every modelled delay; 0 never sleeps")
    lat.add_argument("--max-running", type=int, help="requests running at once; the rest queue FIFO")
    lat.add_argument("--block-size", type=int, choices=BLOCK_SIZES, help="tokens per KV-cache block")
    lat.add_argument("--kv-capacity-tokens", type=int, help="prefix-cache capacity in tokens (LRU beyond it)")
    lat.add_argument(
        "--reuse",
        choices=REUSE_MODES,
        help="early: blocks reusable once computed; after_finish: once their request ends; off",
    )
    flt = p.add_argument_group("fault injection (probabilities per request, at most one each)")
    flt.add_argument("--error-rate", type=float, help="answer HTTP 500")
    flt.add_argument("--rate-limit-rate", type=float, help="answer HTTP 429 with Retry-After")
    flt.add_argument("--retry-after", type=int, help="Retry-After seconds sent with a 429")
    flt.add_argument("--hang-rate", type=float, help="stall for --hang-seconds before answering")
    flt.add_argument("--hang-seconds", type=float, help="wall-clock length of a hang (not scaled)")
    flt.add_argument("--malformed-rate", type=float, help="return model content that is not the JSON")
    flt.add_argument("--invalid-body-rate", type=float, help="return a truncated, invalid JSON body")
    flt.add_argument("--drop-rate", type=float, help="close the connection without a response")
    flt.add_argument(
        "--duplicate-key-rate",
        type=float,
        help='state each verdict twice, the second flipped: {"User Safety": "unsafe", "User Safety": "safe"}',
    )
    flt.add_argument("--seed", type=int, help="seed of the fault RNG (same seed, same faults)")


def register(subparsers: Any) -> None:
    """Add ``emulate`` to the ``guardcache`` command."""
    parser = subparsers.add_parser(
        "emulate",
        help="serve the NemoGuard NIM emulator",
        description=DESCRIPTION,
        epilog="Exit status: 0 after a clean stop (Ctrl-C, SIGTERM), 1 if it cannot listen (the port "
        "is taken), 2 on a usage or config error.",
    )
    add_arguments(parser)
    parser.set_defaults(func=run, log_level="info")


def build_config(args: argparse.Namespace) -> EmulatorConfig:
    """The config a parsed command line asks for (raises ``ConfigError``)."""
    if args.config and args.config_json:
        raise ConfigError("give --config or --config-json, not both")
    if args.config:
        base = EmulatorConfig.from_file(args.config)
        explicit_port = True
    elif args.config_json:
        try:
            data = json.loads(args.config_json)
        except ValueError as exc:
            raise ConfigError(f"--config-json is not valid JSON: {exc}") from exc
        base = EmulatorConfig.from_dict(data, source="--config-json")
        explicit_port = True
    else:
        base = EmulatorConfig()
        explicit_port = False
    top: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {}
    for dest, (section, name) in _FIELDS.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        if section is None:
            top[name] = value
        else:
            sections.setdefault(section, {})[name] = value
    if not explicit_port and "port" not in top:
        top["port"] = DEFAULT_PORT
    return base.merged(**top, **sections)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; 0 on a clean stop, 2 on bad config, 1 if it cannot bind."""
    try:
        config = build_config(args)
        emulator = Emulator(config)
    except ConfigError as exc:
        print(f"guardcache emulate: {exc}", file=sys.stderr)
        return 2

    def announce(port: int) -> None:
        print(ready_line(config.host, port), flush=True)

    server = make_uvicorn(
        emulator,
        signals=True,
        log_level=args.log_level,
        access_log=args.access_log,
        on_started=announce,
    )
    try:
        asyncio.run(server.serve())
    except EmulatorStartError as exc:
        print(f"guardcache emulate: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # uvicorn re-raises the SIGINT it handled
        pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m guardcache.emulator`` (the child-process mode)."""
    import logging

    parser = argparse.ArgumentParser(prog="python -m guardcache.emulator", description=DESCRIPTION)
    add_arguments(parser)
    parser.set_defaults(log_level="warning")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return run(args)
