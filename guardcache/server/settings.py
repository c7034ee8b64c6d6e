"""``guardcache serve`` settings, and loading the config (or folder of configs) it serves."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from guardcache.config import DEFAULT_LIMITS, ConfigLimits, RailsConfig
from guardcache.errors import ConfigError
from guardcache.server.protocol import MAX_JSON_DEPTH

SETTINGS_ENV = "GUARDCACHE_SERVE_SETTINGS"
"""How worker processes (``--workers N``, started by uvicorn) receive the settings: one JSON value."""

CONFIG_FILES = ("config.yml", "config.yaml")
MAX_CONFIGS_BYTES = 64 * 1024 * 1024
"""The most bytes of config files a folder of configs may hold together (each config also within its
own ``ConfigLimits``): a folder of a thousand configs of 4 MB each is not a deployment."""


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """What one ``guardcache serve`` runs.

    Attributes:
        config: a config file, a config folder, or a folder of config folders (one per
            ``config_id``, as NeMo's server).
        api_key_env: the environment variable holding the key clients must send as
            ``Authorization: Bearer ...``; None: no client authentication.
        max_body_bytes: larger request bodies are refused with 413.
        max_concurrency: requests with a body (every route of ``body_routes.BODY_ROUTES``) served
            at once; more are refused with 503 and Retry-After.
        retry_after: seconds, the Retry-After of a 503.
        shutdown_timeout: seconds in-flight requests get to finish after SIGTERM.
        warm_up: run the first readiness round (a real request to every model, which also primes
            each guard's prompt prefix) before the port opens, per worker; otherwise it runs in
            the background and ``/health/ready`` says ``starting`` until it finished.
        max_header_bytes: the largest request head (request line and headers); a larger one gets
            431 and the connection is closed, before the parser buffers more than this.
        header_timeout: seconds a request head may take to arrive (from the connection's start, or
            the head's first byte on a kept-alive connection); then 408 and the connection closed
            (a connection that sent nothing is closed without an answer).
        body_timeout: seconds a request's body may take to arrive (every body route); then 408 and
            the connection closed. The body is read before the request counts against
            ``max_concurrency``.
        keep_alive_timeout: seconds an idle kept-alive connection stays open (uvicorn's
            ``timeout_keep_alive``).
        max_json_depth: the deepest nesting of arrays and objects a request body may have (400).
        ready_interval: seconds between readiness probes while every model answers (see
            ``server/readiness.py``); the cached result is what ``/health/ready`` reads.
        ready_retry: seconds before the next probe after a failure, doubling up to
            ``ready_interval``.
        ready_timeout: seconds one probe round may take (each probe's deadline).
        ready_main: how the main model is probed: ``completion`` (a 1-token completion, the
            default: every server supports it), ``models`` (``GET {base_url}/models`` must list
            it), or ``off``.
        admin_key_env: the environment variable holding the key of ``POST /admin/cache/clear``
            (``server/admin.py``); None: no admin route (404).
        runtime_dir: the server's private folder its workers share (the admin route's clears),
            made by ``guardcache serve``; None: this process only.

    The limits on slow and huge clients have defaults a user never needs to touch: they are far
    beyond what any OpenAI client sends and short enough that a client holding connections open
    (slowloris) costs the server little.
    """

    config: str
    host: str = "127.0.0.1"
    port: int = 8080  # guardcache serve's default (server/cli.py DEFAULT_PORT: why not 8000)
    workers: int = 1
    api_key_env: str | None = None
    max_body_bytes: int = 1 << 20
    max_concurrency: int = 1024
    retry_after: int = 1
    shutdown_timeout: float = 30.0
    warm_up: bool = True
    access_log: bool = False
    log_level: str = "info"
    max_header_bytes: int = 64 * 1024
    header_timeout: float = 10.0
    body_timeout: float = 10.0
    keep_alive_timeout: float = 5.0
    max_json_depth: int = MAX_JSON_DEPTH
    ready_interval: float = 30.0
    ready_retry: float = 1.0
    ready_timeout: float = 10.0
    ready_main: str = "completion"
    admin_key_env: str | None = None
    runtime_dir: str | None = None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServeSettings:
        return cls(**json.loads(text))

    @classmethod
    def from_env(cls) -> ServeSettings:
        text = os.environ.get(SETTINGS_ENV)
        if not text:
            raise RuntimeError(f"{SETTINGS_ENV} is not set: start workers with 'guardcache serve'")
        return cls.from_json(text)

    def api_key(self) -> str | None:
        """The client key, read from the environment (never from argv, which `ps` shows)."""
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env, "").strip()
        if not key:
            raise ConfigError(f"--api-key-env {self.api_key_env}: the variable is unset or empty")
        return key

    def admin_key(self) -> str | None:
        """The admin route's key, read from the environment (as the client key)."""
        if self.admin_key_env is None:
            return None
        key = os.environ.get(self.admin_key_env, "").strip()
        if not key:
            raise ConfigError(f"--admin-key-env {self.admin_key_env}: the variable is unset or empty")
        return key


def load_configs(
    path: str | os.PathLike[str], *, limits: ConfigLimits | None = None
) -> dict[str, RailsConfig]:
    """config id -> config. A file or a folder with a ``config.yml`` is one config (its id is the
    folder's or file's name); a folder without one serves each subfolder that has one, by name.

    Bounded like every config load (``limits``; ``RailsConfig.from_path``): a folder of configs
    lists at most ``limits.entries`` entries (counted while listing), and its configs together read
    at most ``MAX_CONFIGS_BYTES``, so a shared folder cannot make serve hang or run out of memory."""
    limits = limits if limits is not None else DEFAULT_LIMITS
    root = Path(path)
    try:
        mode = os.stat(root).st_mode
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file or folder") from None
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read ({exc.strerror or exc})") from None
    if not stat.S_ISDIR(mode):  # a file, or what from_path refuses by name (a FIFO, a device)
        return {root.stem: RailsConfig.from_path(root, limits=limits)}
    if any(os.path.lexists(root / name) for name in CONFIG_FILES):
        return {root.resolve().name: RailsConfig.from_path(root, limits=limits)}
    configs: dict[str, RailsConfig] = {}
    total = 0
    for sub in _config_folders(root, path, limits):
        config = configs[sub.name] = RailsConfig.from_path(sub, limits=limits)
        total += config.loaded_bytes
        if total > MAX_CONFIGS_BYTES:
            raise ConfigError(
                f"--config {path}: its configs read more than {MAX_CONFIGS_BYTES // (1024 * 1024)} MB "
                f"together ({total} bytes when {sub} was loaded; the limit for a folder of configs): "
                "is this the right folder?"
            )
    if not configs:
        raise ConfigError(
            f"--config {path}: no config.yml in the folder nor in any subfolder (a folder of configs "
            "holds one subfolder per config_id, each with its config.yml)"
        )
    return configs


def _config_folders(root: Path, path: str | os.PathLike[str], limits: ConfigLimits) -> list[Path]:
    """The subfolders of ``root`` that hold a config, by name; listed within ``limits.entries``
    (counted while listing). A ``config.yml`` that is no file (a FIFO, a broken link) counts as
    one: its load then says what it is, rather than the config silently not being served."""
    found: list[Path] = []
    try:
        with os.scandir(root) as entries:
            for n, entry in enumerate(entries, 1):
                if n > limits.entries:
                    raise ConfigError(
                        f"--config {path}: more than {limits.entries} files and folders in the folder "
                        "of configs (the limit for a config folder); is this the right folder?"
                    )
                sub = root / entry.name
                if sub.is_dir() and any(os.path.lexists(sub / name) for name in CONFIG_FILES):
                    found.append(sub)
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot list this folder ({exc.strerror or exc})") from None
    return sorted(found, key=lambda p: p.name)


__all__ = ["MAX_CONFIGS_BYTES", "SETTINGS_ENV", "ServeSettings", "load_configs"]
