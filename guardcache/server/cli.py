"""``guardcache serve``: an OpenAI-compatible chat server guarded by a config's rails (uvicorn)."""

from __future__ import annotations

import argparse
import os
import sys

from guardcache.errors import ConfigError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="serve OpenAI-compatible chat completions through a config's rails",
        description=(
            "Serves POST /v1/chat/completions (plain and streaming), GET /v1/models, "
            "GET /v1/rails/configs, GET /health/live, GET /health/ready and GET /metrics. "
            "--config is a config (file or folder) or a folder of configs, one per subfolder, "
            "selected by the request's config_id as NeMo Guardrails' server does."
        ),
    )
    p.add_argument("--config", required=True, help="a config file or folder, or a folder of config folders")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to bind (default 8000; 0: any free port)")
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
        "--max-body-bytes", type=int, default=1 << 20, help="larger request bodies get 413 (default 1 MiB)"
    )
    p.add_argument(
        "--max-concurrency",
        type=int,
        default=1024,
        help="chat requests served at once per worker; more get 503 with Retry-After (default 1024)",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=float,
        default=30.0,
        help="seconds in-flight requests get to finish after SIGTERM (default 30)",
    )
    p.add_argument("--no-warm-up", action="store_true", help="do not prime the guard backends at start-up")
    p.add_argument("--access-log", action="store_true", help="log every request (uvicorn's access log)")
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


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from guardcache.server.app import configure_logging, create_app
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
    )
    configure_logging(level)
    common: dict[str, object] = {
        "host": settings.host,
        "port": settings.port,
        "log_config": None,
        "access_log": settings.access_log,
        "timeout_graceful_shutdown": settings.shutdown_timeout,
        "lifespan": "on",
        "server_header": False,
        "http": getattr(args, "http", "auto"),
        "loop": getattr(args, "loop", "auto"),
    }
    try:
        if settings.workers == 1:
            app = create_app(settings, own_process=True)
            uvicorn.run(app, **common)  # type: ignore[arg-type]
            return 0
        settings.api_key()  # fail here, not in every worker
        load_configs(settings.config)
    except ConfigError as exc:
        print(f"guardcache serve: {exc}", file=sys.stderr)
        return 2
    os.environ[SETTINGS_ENV] = settings.to_json()
    uvicorn.run("guardcache.server.app:app_from_env", factory=True, workers=settings.workers, **common)  # type: ignore[arg-type]
    return 0


__all__ = ["register", "run"]
