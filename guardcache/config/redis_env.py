"""The Redis settings a model's ``cache.redis`` names, resolved from the environment at start.

The config file names environment variables (the URL, the ACL credentials, the secrets), never their
values; this reads them when the cache is built and checks what only the environment can tell (a
variable unset or empty, a secret too short, a password in the URL and in a variable, a CA bundle
that is not there), so every problem is a ``ConfigError`` naming the field and the variable, never a
value. What it returns is the cache package's plain values (``RedisEndpoint``, ``RedisSettings``,
``KeySpace``), already accepted by their constructors: the tier built from them has nothing left to
refuse. ``guardcache.cache.redis`` needs the ``redis`` extra, so it is imported here only when asked
for: importing ``guardcache.config`` does not need it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from guardcache.config.models import ModelConfig
from guardcache.config.redis_tier import RedisConfig
from guardcache.errors import ConfigError

if TYPE_CHECKING:
    from guardcache.cache.redis import KeySpace, RedisEndpoint, RedisSettings

_LOGINS = ("username_env_var", "password_env_var", "sentinel_username_env_var", "sentinel_password_env_var")


def _field(model: ModelConfig, where: str | None, name: str) -> str:
    """``config.yml: models[1].cache.redis.<name>`` given ``where``, else
    ``model 'content_safety': cache.redis.<name>``."""
    path = "cache.redis" + (f".{name}" if name else "")
    return f"{where}.{path}" if where else f"model {model.type!r}: {path}"


def _redis_config(model: ModelConfig, where: str | None) -> RedisConfig:
    """The model's ``cache.redis``, once the ``redis`` extra is known to be installed."""
    try:
        import guardcache.cache.redis  # noqa: F401  (redis-py, the extra)
    except ImportError as exc:
        raise ConfigError(
            f"model {model.type!r}: cache.store: redis needs the redis package ({exc}); "
            "install it with: pip install 'guardcache[redis]'"
        ) from exc
    redis_cfg = model.cache.redis
    if redis_cfg is None:  # unreachable after validation (store: redis requires it)
        raise ConfigError(f"{_field(model, where, '')}: cache.store: redis needs a cache.redis section")
    return redis_cfg


def _env_text(name: str) -> str | None:
    """An environment variable, surrounding whitespace dropped (a mounted file's newline); None
    when unset or blank."""
    return (os.environ.get(name) or "").strip() or None


def redis_url(model: ModelConfig, *, where: str | None = None) -> str:
    """The model's Redis URL: ``url``, or ``url_env_var`` read now; a ``ConfigError`` if unusable.
    ``where`` (e.g. ``"config.yml: models[1]"``) names the model in errors; default: its type."""
    redis_cfg = model.cache.redis
    if redis_cfg is None:  # unreachable after validation (store: redis requires it)
        raise ConfigError(f"{_field(model, where, '')}: cache.store: redis needs a cache.redis section")
    url = redis_cfg.resolved_url()
    if url is None:
        raise ConfigError(
            f"{_field(model, where, 'url_env_var')}: environment variable "
            f"{redis_cfg.url_env_var} is not set or empty; set it to the Redis URL "
            "(e.g. redis://localhost:6379/0)"
        )
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(
            f"{_field(model, where, 'url_env_var')}: the Redis URL in {redis_cfg.url_env_var} must "
            "start with redis://, rediss:// or unix://"
        )
    return url


def redis_endpoint(model: ModelConfig, *, where: str | None = None) -> RedisEndpoint:
    """Where the model's Redis tier is, in its ``mode``, with the ACL credentials read now from the
    environment variables the config names; a ``ConfigError`` (naming the field and the variable,
    never a value) if one is missing or unusable. Needs the ``redis`` extra."""
    redis_cfg = _redis_config(model, where)
    from guardcache.cache.redis import RedisEndpoint

    mode = redis_cfg.mode
    urls: tuple[str, ...] = ()
    if mode == "cluster" and redis_cfg.urls:
        urls = tuple(redis_cfg.urls)
    elif mode != "sentinel":
        urls = (redis_url(model, where=where),)
        if mode == "cluster" and urls[0].startswith("unix://"):
            raise ConfigError(
                f"{_field(model, where, 'url_env_var')}: a Redis Cluster is reached over TCP: the URL in "
                f"{redis_cfg.url_env_var} must start with redis:// or rediss://"
            )
    logins: dict[str, str | None] = {}
    for name in _LOGINS:
        var = getattr(redis_cfg, name)
        logins[name] = None if var is None else _env_text(var)
        if var is not None and logins[name] is None:
            what = "user name" if "username" in name else "password"
            raise ConfigError(
                f"{_field(model, where, name)}: environment variable {var} is not set or empty; set it to "
                f"the Redis ACL {what} (or drop {name} if Redis needs none)"
            )
    if redis_cfg.password_env_var is not None and any(urlsplit(u).password is not None for u in urls):
        raise ConfigError(
            f"{_field(model, where, 'password_env_var')}: the Redis URL holds a password too; keep it in "
            f"{redis_cfg.password_env_var} only"
        )
    ca_file = redis_cfg.tls_ca_file
    if ca_file is not None:
        if not os.path.isfile(ca_file):
            raise ConfigError(f"{_field(model, where, 'tls_ca_file')}: no such file: {ca_file}")
        if mode != "sentinel" and not urls[0].startswith("rediss://"):
            raise ConfigError(
                f"{_field(model, where, 'tls_ca_file')}: a CA bundle is for TLS: the URL in "
                f"{redis_cfg.url_env_var} must start with rediss://"
            )
    try:
        return RedisEndpoint(
            mode=mode,
            urls=urls,
            sentinels=tuple(redis_cfg.sentinel_addresses),
            service_name=redis_cfg.service_name or "",
            db=redis_cfg.db,
            tls=redis_cfg.tls,
            tls_ca_file=ca_file,
            username=logins["username_env_var"],
            password=logins["password_env_var"],
            sentinel_username=logins["sentinel_username_env_var"],
            sentinel_password=logins["sentinel_password_env_var"],
        )
    except ValueError as exc:
        raise ConfigError(f"{_field(model, where, '')}: {exc}") from exc


def redis_keys(model: ModelConfig, *, where: str | None = None) -> KeySpace:
    """The model's keys in Redis: its ``key_prefix`` and its scope (type and model name); a
    ``ConfigError`` if the prefix cannot be part of a key (e.g. spaces or braces). Needs the
    ``redis`` extra."""
    redis_cfg = _redis_config(model, where)
    from guardcache.cache.redis import KeySpace, model_scope

    try:
        return KeySpace(redis_cfg.key_prefix, model_scope(model.type, model.model))
    except ValueError as exc:
        raise ConfigError(f"{_field(model, where, '')}: {exc}") from exc


def redis_settings(model: ModelConfig, *, where: str | None = None) -> RedisSettings:
    """The plain settings of a model's Redis tier (its endpoint: :func:`redis_endpoint`, its key
    prefix checked as :func:`redis_keys` does); the URL, the credentials and the secrets are read
    now from their environment variables, so they are never in a config file.

    An unset secret is a ``ConfigError``, not a fallback to unauthenticated entries: anyone who can
    write to Redis could then plant verdicts for any text, and the shared tier exists to be shared.
    Error messages name the variable, never its value.
    """
    endpoint = redis_endpoint(model, where=where)
    from guardcache.cache.redis import RedisSettings
    from guardcache.cache.redis.auth import MIN_SECRET_BYTES

    redis_cfg = model.cache.redis
    assert redis_cfg is not None  # checked by redis_endpoint
    secret = redis_cfg.resolved_secret()
    if secret is None:
        raise ConfigError(
            f"{_field(model, where, 'secret_env_var')}: environment variable {redis_cfg.secret_env_var} "
            "is not set or empty; the shared Redis tier authenticates its entries with this secret "
            f"(at least {MIN_SECRET_BYTES} bytes, the same on every replica; e.g. the output of: "
            "openssl rand -hex 32)"
        )
    previous = redis_cfg.resolved_previous_secret()
    for name, var, value in (
        ("secret_env_var", redis_cfg.secret_env_var, secret),
        ("previous_secret_env_var", redis_cfg.previous_secret_env_var, previous),
    ):
        if value is not None and len(value) < MIN_SECRET_BYTES:
            raise ConfigError(
                f"{_field(model, where, name)}: the secret in environment variable {var} is "
                f"{len(value)} bytes; it needs at least {MIN_SECRET_BYTES} (e.g. the output of: "
                "openssl rand -hex 32)"
            )
    if previous == secret:
        raise ConfigError(
            f"{_field(model, where, 'previous_secret_env_var')}: {redis_cfg.previous_secret_env_var} "
            f"holds the same secret as {redis_cfg.secret_env_var}; during a rotation it holds the old "
            "secret, otherwise leave it unset"
        )
    redis_keys(model, where=where)  # the prefix, checked now rather than by the tier's constructor
    try:
        return RedisSettings(
            endpoint=endpoint,
            secret=secret,
            previous_secret=previous,
            # A verdict outlives cache.ttl nowhere: Redis keeps it min(cache.ttl, redis.ttl).
            ttl_s=float(redis_cfg.ttl) if model.cache.ttl is None else min(model.cache.ttl, redis_cfg.ttl),
            key_prefix=redis_cfg.key_prefix,
            timeout_ms=float(redis_cfg.timeout_ms),
            connect_timeout_ms=float(redis_cfg.connect_timeout_ms),
            pool_size=redis_cfg.pool_size,
            lease_ms=redis_cfg.lease_ms,
        )
    except ValueError as exc:
        raise ConfigError(f"{_field(model, where, '')}: {exc}") from exc


__all__ = ["redis_endpoint", "redis_keys", "redis_settings", "redis_url"]
