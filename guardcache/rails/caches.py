"""One result cache per model, built from its ``cache:`` config.

This is where config meets ``guardcache.cache`` (which takes plain settings only): ``store: redis``
puts the shared tier behind the in-process LFU, scoped by the model's type and name, with
``guardcache.checks.codec`` turning verdicts into versioned bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from guardcache.cache import CacheInterface, LFUCache, default_reporter
from guardcache.config.models import ModelConfig
from guardcache.errors import ConfigError

if TYPE_CHECKING:
    from guardcache.cache.redis import RedisSettings


def build_cache(model: ModelConfig) -> CacheInterface | None:
    """The model's cache, or None when caching is off for it.

    ``store: redis`` needs the ``redis`` extra; its import is lazy so memory-only configs do not.
    """
    cfg = model.cache
    if not cfg.enabled:
        return None
    interval = cfg.stats.log_interval if cfg.stats.enabled else None
    if cfg.store == "memory":
        # The process's reporter thread writes the line on time, also while the cache is idle (a
        # cache without one writes it on its first access after the interval, as NeMo's does).
        reporter = default_reporter() if interval is not None else None
        return LFUCache(
            cfg.maxsize, track_stats=cfg.stats.enabled, stats_logging_interval=interval, reporter=reporter
        )
    try:
        from guardcache.cache.redis import build_tiered_cache, model_scope
        from guardcache.checks import codec
    except ImportError as exc:
        raise ConfigError(
            f"model {model.type!r}: cache.store: redis needs the redis package ({exc}); "
            "install it with: pip install 'guardcache[redis]'"
        ) from exc
    # The tier logs the LFU line and its own line together, so the L1 gets no interval of its own.
    settings = redis_settings(model)
    l1 = LFUCache(cfg.maxsize, track_stats=cfg.stats.enabled)
    try:
        return build_tiered_cache(
            l1,
            codec=codec,
            settings=settings,
            scope=model_scope(model.type, model.model),
            stats_logging_interval=interval,
        )
    except ValueError as exc:  # e.g. a key_prefix with spaces or braces
        raise ConfigError(f"model {model.type!r}: cache.redis: {exc}") from exc


def redis_settings(model: ModelConfig) -> RedisSettings:
    """The plain settings of a model's Redis tier; the URL is read now (``url_env_var``)."""
    from guardcache.cache.redis import RedisSettings

    redis_cfg = model.cache.redis
    if redis_cfg is None:  # unreachable after validation (store: redis requires it)
        raise ConfigError(f"model {model.type!r}: cache.store: redis needs a cache.redis section")
    url = redis_cfg.resolved_url()
    if url is None:
        raise ConfigError(
            f"model {model.type!r}: cache.redis.url_env_var: environment variable "
            f"{redis_cfg.url_env_var} is not set or empty; set it to the Redis URL "
            "(e.g. redis://localhost:6379/0)"
        )
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(
            f"model {model.type!r}: the Redis URL in {redis_cfg.url_env_var} must start with "
            "redis://, rediss:// or unix://"
        )
    return RedisSettings(
        url=url,
        ttl_s=float(redis_cfg.ttl),
        key_prefix=redis_cfg.key_prefix,
        timeout_ms=float(redis_cfg.timeout_ms),
        pool_size=redis_cfg.pool_size,
        lease_ms=redis_cfg.lease_ms,
    )


__all__ = ["build_cache", "redis_settings"]
