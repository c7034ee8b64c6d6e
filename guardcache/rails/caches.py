"""One verdict cache per guard model, built from its ``cache:`` config.

This is where config meets ``guardcache.cache`` (which takes plain settings only): ``policy``
picks the in-process cache (``lfu``, ``tinylfu``: :func:`guardcache.cache.make_cache`), ``store:
redis`` puts the shared tier behind it, scoped by the model's type and name, with
``guardcache.checks.codec`` turning verdicts into versioned bytes, the tier's endpoint (one server,
a Redis Cluster's seed nodes, or Sentinels: ``cache.redis.mode``), and its URL, credentials and
secrets read from the environment when the cache is built (start-up), never from the config file.

Which models get one (``planned_caches``): every model but ``main`` unless its ``cache: {enabled:
false}`` says otherwise (``ModelConfig`` resolves the default), and the JailbreakDetect NIM even
without a ``jailbreak_detection`` model entry (it is a classifier endpoint in ``rails.config``, not a
model; an entry of that type gives its cache other settings or turns it off). ``cache_summary`` is
the start-up line that says what each model got.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from guardcache.cache import CacheInterface, PolicyCache, default_reporter, make_cache
from guardcache.checks.jailbreak_detection.flows import MODEL_TYPE as JAILBREAK_TYPE
from guardcache.config import RailsConfig
from guardcache.config.models import MAIN_MODEL_TYPE, ModelCacheConfig, ModelConfig
from guardcache.errors import ConfigError
from guardcache.flows import KNOWN_FLOWS

if TYPE_CHECKING:
    from guardcache.cache.redis import RedisEndpoint, RedisSettings

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PlannedCache:
    """The cache one model (or the JailbreakDetect NIM) gets: ``settings.enabled`` says whether."""

    model_type: str
    settings: ModelCacheConfig
    model: ModelConfig | None  # None: the JailbreakDetect NIM without a model entry
    where: str  # "config.yml: models[1]", for errors


def planned_caches(config: RailsConfig) -> list[PlannedCache]:
    """Every model's cache settings in file order, then the JailbreakDetect NIM's when a rail uses
    it and no ``jailbreak_detection`` model gives it settings of its own (the defaults: on)."""
    source = config.source or "<config>"
    plans = [
        PlannedCache(model.type, model.cache, model, f"{source}: models[{i}]")
        for i, model in enumerate(config.models)
    ]
    classifies = any(KNOWN_FLOWS[ref.name].backend == "classify" for ref in config.rails.input.flow_refs())
    if classifies and JAILBREAK_TYPE not in config.model_types:
        where = f"{source}: rails.config.jailbreak_detection"
        plans.append(PlannedCache(JAILBREAK_TYPE, ModelCacheConfig(), None, where))
    return plans


def build_caches(config: RailsConfig) -> dict[str, CacheInterface]:
    """The caches of ``planned_caches``, by model type (only those enabled)."""
    caches: dict[str, CacheInterface] = {}
    for plan in planned_caches(config):
        if not plan.settings.enabled:
            continue
        cache = (
            build_cache(plan.model, where=plan.where) if plan.model is not None else _memory(plan.settings)
        )
        if cache is not None:
            caches[plan.model_type] = cache
    return caches


def cache_summary(config: RailsConfig, caches: Mapping[str, CacheInterface]) -> str:
    """One line saying what each model's verdicts are cached in, e.g. ``guardcache caches:
    content_safety (50000, memory), jailbreak_detection (50000, memory); main: not cached``."""
    cached: list[str] = []
    uncached: list[str] = []
    plans = planned_caches(config)
    for plan in plans:
        size = f"{plan.settings.maxsize}, {plan.settings.store}"
        if plan.settings.policy != "lfu":  # the default goes unsaid, as before policies existed
            size += f", {plan.settings.policy}"
        if plan.model_type == MAIN_MODEL_TYPE:
            if plan.model_type in caches:
                cached.append(f"main ({size}; checks run on main only, its answers are never cached)")
            else:
                uncached.append("main: not cached")
        elif plan.model_type in caches:
            cached.append(f"{plan.model_type} ({size})")
        else:
            uncached.append(f"{plan.model_type}: not cached (cache: {{enabled: false}})")
    if MAIN_MODEL_TYPE not in {p.model_type for p in plans}:
        uncached.insert(0, "main: not cached")
    return "; ".join([f"guardcache caches: {', '.join(cached) or 'none'}", *uncached])


def log_caches(config: RailsConfig, caches: Mapping[str, CacheInterface]) -> None:
    """Log :func:`cache_summary` at INFO, with the config it is for."""
    logger.info("%s [%s]", cache_summary(config, caches), config.source or "<config>")


def _memory(cfg: ModelCacheConfig) -> PolicyCache:
    interval = cfg.stats.log_interval if cfg.stats.enabled else None
    # The process's reporter thread writes the line on time, also while the cache is idle (a
    # cache without one writes it on its first access after the interval, as NeMo's does).
    reporter = default_reporter() if interval is not None else None
    return make_cache(
        cfg.policy,
        cfg.maxsize,
        track_stats=cfg.stats.enabled,
        stats_logging_interval=interval,
        reporter=reporter,
    )


def build_cache(model: ModelConfig, *, where: str | None = None) -> CacheInterface | None:
    """The model's cache, or None when caching is off for it.

    ``store: redis`` needs the ``redis`` extra; its import is lazy so memory-only configs do not.
    ``where`` (e.g. ``"config.yml: models[1]"``) names the model in errors; default: its type.
    """
    cfg = model.cache
    if not cfg.enabled:
        return None
    interval = cfg.stats.log_interval if cfg.stats.enabled else None
    if cfg.store == "memory":
        return _memory(cfg)
    try:
        from guardcache.cache.redis import build_tiered_cache, model_scope
        from guardcache.checks import codec
    except ImportError as exc:
        raise ConfigError(
            f"model {model.type!r}: cache.store: redis needs the redis package ({exc}); "
            "install it with: pip install 'guardcache[redis]'"
        ) from exc
    # The tier logs the LFU line and its own line together, so the L1 gets no interval of its own.
    settings = redis_settings(model, where=where)
    l1 = make_cache(cfg.policy, cfg.maxsize, track_stats=cfg.stats.enabled)
    try:
        return build_tiered_cache(
            l1,
            codec=codec,
            settings=settings,
            scope=model_scope(model.type, model.model),
            stats_logging_interval=interval,
        )
    except ValueError as exc:  # e.g. a key_prefix with spaces or braces
        raise ConfigError(f"{_field(model, where, '')}: {exc}") from exc


def _field(model: ModelConfig, where: str | None, name: str) -> str:
    """``config.yml: models[1].cache.redis.<name>`` given ``where``, else
    ``model 'content_safety': cache.redis.<name>``."""
    path = "cache.redis" + (f".{name}" if name else "")
    return f"{where}.{path}" if where else f"model {model.type!r}: {path}"


def redis_url(model: ModelConfig, *, where: str | None = None) -> str:
    """The model's Redis URL: ``url``, or ``url_env_var`` read now; a ``ConfigError`` if unusable."""
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


def _env_text(name: str) -> str | None:
    """An environment variable, surrounding whitespace dropped (a mounted file's newline); None
    when unset or blank."""
    return (os.environ.get(name) or "").strip() or None


_LOGINS = ("username_env_var", "password_env_var", "sentinel_username_env_var", "sentinel_password_env_var")


def redis_endpoint(model: ModelConfig, *, where: str | None = None) -> RedisEndpoint:
    """Where the model's Redis tier is, in its ``mode``, with the ACL credentials read now from the
    environment variables the config names; a ``ConfigError`` (naming the field and the variable,
    never a value) if one is missing or unusable. Needs the ``redis`` extra."""
    from guardcache.cache.redis import RedisEndpoint

    redis_cfg = model.cache.redis
    if redis_cfg is None:  # unreachable after validation (store: redis requires it)
        raise ConfigError(f"{_field(model, where, '')}: cache.store: redis needs a cache.redis section")
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


def redis_settings(model: ModelConfig, *, where: str | None = None) -> RedisSettings:
    """The plain settings of a model's Redis tier (its endpoint: :func:`redis_endpoint`); the URL,
    the credentials and the secrets are read now from their environment variables, so they are
    never in a config file.

    An unset secret is a ``ConfigError``, not a fallback to unauthenticated entries: anyone who can
    write to Redis could then plant verdicts for any text, and the shared tier exists to be shared.
    Error messages name the variable, never its value.
    """
    from guardcache.cache.redis import RedisSettings
    from guardcache.cache.redis.auth import MIN_SECRET_BYTES

    endpoint = redis_endpoint(model, where=where)
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
    return RedisSettings(
        endpoint=endpoint,
        secret=secret,
        previous_secret=previous,
        ttl_s=float(redis_cfg.ttl),
        key_prefix=redis_cfg.key_prefix,
        timeout_ms=float(redis_cfg.timeout_ms),
        pool_size=redis_cfg.pool_size,
        lease_ms=redis_cfg.lease_ms,
    )


__all__ = [
    "PlannedCache",
    "build_cache",
    "build_caches",
    "cache_summary",
    "log_caches",
    "planned_caches",
    "redis_endpoint",
    "redis_settings",
    "redis_url",
]
