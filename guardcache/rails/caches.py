"""One result cache per model, built from its ``cache:`` config."""

from __future__ import annotations

from guardcache.cache import CacheInterface, LFUCache
from guardcache.config_models import ModelConfig


def build_cache(model: ModelConfig) -> CacheInterface | None:
    """The model's cache, or None when caching is off for it.

    ``store: redis`` puts the shared tier behind the in-process LFU; its import is lazy so the
    ``redis`` extra is needed only by configs that ask for it.
    """
    cfg = model.cache
    if not cfg.enabled:
        return None
    l1 = LFUCache(
        cfg.maxsize,
        track_stats=cfg.stats.enabled,
        stats_logging_interval=cfg.stats.log_interval if cfg.stats.enabled else None,
    )
    if cfg.store == "memory":
        return l1
    from guardcache.cache.redis import build_tiered_cache  # the optional extra

    return build_tiered_cache(l1, model)


__all__ = ["build_cache"]
