"""``guardcache serve``: an OpenAI-compatible chat server guarded by a config's rails (uvicorn)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Callable

from guardcache.errors import ConfigError

DEFAULT_PORT = 8080
"""Where ``guardcache serve`` listens without ``--port``. Not 8000: that is where the example configs
(and a NIM or vLLM container) put the main model this server sits in front of; nor 8001-8003, the
guard NIMs' ports there, where ``guardcache emulate`` listens by default (8001): the server, its main
model and the emulator run side by side on their defaults."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="serve OpenAI-compatible chat completions through a config's rails",
        description=(
            "Serves POST /v1/chat/completions (plain and streaming), GET /v1/models, "
            "GET /v1/rails/configs, GET /health/live, GET /health/ready and GET /metrics. "
            "--config is a config (file or folder) or a folder of configs, one per subfolder, "
            "selected by the request's config_id as NeMo Guardrails' server does. Exit status: 0 after "
            "a clean stop, 1 if it cannot listen (the port is taken), 2 on a usage or config error."
        ),
    )
    p.add_argument("--config", required=True, help="a config file or folder, or a folder of config folders")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port to bind (default {DEFAULT_PORT}; 0: any free port)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes (default 1); each has its own in-process caches, shared through the "
        "Redis tier when a model's cache has store: redis",
    )
    p.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="require clients to send 'Authorization: Bearer <key>' with the key held in env var VAR",
    )
    p.add_argument(
        "--admin-key-env",
        metavar="NAME",
        help="serve POST /admin/cache/clear (empties the verdict caches of every worker) to "
        "'Authorization: Bearer <key>' with the key held in env var NAME; without it the route "
        "is not there",
    )
    p.add_argument(
        "--max-body-bytes", type=int, default=1 << 20, help="larger request bodies get 413 (default 1 MiB)"
    )
    p.add_argument(
        "--max-concurrency",
        type=int,
        default=1024,
        help="requests with a body (chat, checks, LiteLLM's guardrail API) served at once per worker; "
        "more get 503 with Retry-After (default 1024)",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=float,
        default=30.0,
        help="seconds in-flight requests get to finish after SIGTERM (default 30)",
    )
    p.add_argument(
        "--max-header-bytes",
        type=_positive(int),
        default=64 * 1024,
        help="a larger request head (request line and headers) gets 431 and the connection is closed "
        "(default 64 KiB)",
    )
    p.add_argument(
        "--header-timeout",
        type=_positive(float),
        default=10.0,
        help="seconds a request head may take to arrive; then 408 and the connection is closed (default 10)",
    )
    p.add_argument(
        "--body-timeout",
        type=_positive(float),
        default=10.0,
        help="seconds a request's body may take to arrive (every route with a body); then 408 and the "
        "connection is closed "
        "(default 10)",
    )
    p.add_argument(
        "--keep-alive-timeout",
        type=_positive(float),
        default=5.0,
        help="seconds an idle kept-alive connection stays open (default 5)",
    )
    p.add_argument(
        "--max-json-depth",
        type=_positive(int),
        default=64,
        help="request bodies nested deeper (arrays and objects) get 400 (default 64)",
    )
    p.add_argument(
        "--ready-interval",
        type=_positive(float),
        default=30.0,
        help="seconds between readiness probes (a real request to every guard and the main model) "
        "while all answer; /health/ready reads the cached result (default 30)",
    )
    p.add_argument(
        "--ready-retry",
        type=_positive(float),
        default=1.0,
        help="seconds before the next probe after a failure, doubling up to --ready-interval (default 1)",
    )
    p.add_argument(
        "--ready-timeout",
        type=_positive(float),
        default=10.0,
        help="seconds one round of readiness probes may take (default 10)",
    )
    p.add_argument(
        "--ready-main",
        choices=("completion", "models", "off"),
        default="completion",
        help="how readiness probes the main model: a 1-token completion (default; every server "
        "supports it, one output token per probe), GET {base_url}/models listing it, or off",
    )
    p.add_argument(
        "--no-warm-up",
        action="store_true",
        help="do not wait for the first readiness round (which primes the guards) before opening the port",
    )
    p.add_argument(
        "--access-log",
        action="store_true",
        help="log every request (uvicorn's access log, with the client address a trusted proxy's "
        "X-Forwarded-For gives, as uvicorn's --proxy-headers)",
    )
    p.add_argument(
        "--http",
        choices=("auto", "httptools", "h11"),
        default="auto",
        help="uvicorn's HTTP parser (default auto: httptools when installed, as the server extra does)",
    )
    p.add_argument(
        "--loop",
        choices=("auto", "uvloop", "asyncio"),
        default="auto",
        help="the event loop (default auto: uvloop when installed, as the server extra does)",
    )
    p.set_defaults(func=run)


def _positive(kind: type[int] | type[float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, not {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its "invalid ... value" message
    return parse


def run(args: argparse.Namespace) -> int:
    """The server; with ``--admin-key-env``, in a private runtime folder its workers share (the
    admin route's clears: ``server/admin.py``), removed when it stops."""
    admin_env = getattr(args, "admin_key_env", None)
    if admin_env is None:
        return _serve(args, None)
    runtime = tempfile.mkdtemp(prefix="guardcache-serve-")  # mode 0700: this user's only
    try:
        return _serve(args, runtime)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def _serve(args: argparse.Namespace, runtime_dir: str | None) -> int:
    import uvicorn

    from guardcache.config.models import check_model_keys
    from guardcache.server.app import create_app
    from guardcache.server.connections import HeadLimits
    from guardcache.server.request_id import configure_logging
    from guardcache.server.settings import SETTINGS_ENV, ServeSettings, load_configs

    level = "debug" if getattr(args, "verbose", False) else "info"
    settings = ServeSettings(
        config=args.config,
        host=args.host,
        port=args.port,
        workers=max(1, args.workers),
        api_key_env=args.api_key_env,
        max_body_bytes=args.max_body_bytes,
        max_concurrency=args.max_concurrency,
        shutdown_timeout=args.shutdown_timeout,
        warm_up=not args.no_warm_up,
        access_log=args.access_log,
        log_level=level,
        max_header_bytes=args.max_header_bytes,
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
        keep_alive_timeout=args.keep_alive_timeout,
        max_json_depth=args.max_json_depth,
        ready_interval=args.ready_interval,
        ready_retry=args.ready_retry,
        ready_timeout=args.ready_timeout,
        ready_main=args.ready_main,
        admin_key_env=getattr(args, "admin_key_env", None),
        runtime_dir=runtime_dir,
    )
    configure_logging(level)
    common: dict[str, object] = {
        "host": settings.host,
        "port": settings.port,
        "log_config": None,
        "access_log": settings.access_log,
        # uvicorn's proxy-headers middleware (client address and scheme from a trusted proxy's
        # X-Forwarded-For/-Proto) runs on every request, and only the access log reads what it
        # sets: nothing in guardcache uses the client's address or the scheme. On with the log.
        "proxy_headers": settings.access_log,
        "timeout_graceful_shutdown": settings.shutdown_timeout,
        "lifespan": "on",
        "server_header": False,
        # The head's size and time limits live in guardcache's subclasses of uvicorn's protocols.
        "http": HeadLimits(getattr(args, "http", "auto"), settings.max_header_bytes, settings.header_timeout),
        "h11_max_incomplete_event_size": settings.max_header_bytes,
        "timeout_keep_alive": settings.keep_alive_timeout,
        "loop": getattr(args, "loop", "auto"),
    }
    try:
        if settings.workers == 1:
            app = create_app(settings, own_process=True)
            uvicorn.run(app, **common)  # type: ignore[arg-type]
            return 0
        settings.api_key()  # fail here, not in every worker
        settings.admin_key()
        for config in load_configs(settings.config).values():
            check_model_keys(config.models, config.source)
    except ConfigError as exc:
        print(f"guardcache serve: {exc}", file=sys.stderr)
        return 2
    os.environ[SETTINGS_ENV] = settings.to_json()
    uvicorn.run("guardcache.server.app:app_from_env", factory=True, workers=settings.workers, **common)  # type: ignore[arg-type]
    return 0


__all__ = ["register", "run"]
