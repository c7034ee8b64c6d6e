"""One verdict cache per guard model, built from its ``cache:`` config.

This is where config meets ``guardcache.cache`` (which takes plain settings only): ``policy``
picks the in-process cache (``lfu``, ``tinylfu``: :func:`guardcache.cache.make_cache`), ``store:
redis`` puts the shared tier behind it, scoped by the model's type and name, with
``guardcache.checks.codec`` turning verdicts into versioned bytes, the tier's endpoint (one server,
a Redis Cluster's seed nodes, or Sentinels: ``cache.redis.mode``), and its URL, credentials and
secrets read from the environment when the cache is built (start-up), never from the config file
(``guardcache.config.redis_env``: the config boundary, where every such problem is a ``ConfigError``;
nothing here raises one).

Which models get one (``planned_caches``): every model unless its ``cache: {enabled: false}`` says
otherwise, and the JailbreakDetect NIM even without a ``jailbreak_detection`` model entry (it is a
classifier endpoint in ``rails.config``, not a model; an entry of that type gives its cache other
settings or turns it off). ``main`` is a guard model too when a check runs on it (NeMo's ``self check
input``/``output`` without a ``self_check_*`` model: NeMo's getting-started configs and its LangChain
guide do this), so it gets a cache then, on by default like every guard's: a repeated turn asks the
main model for its answer only, never for the same self check again. Its cache holds those checks'
verdicts only, under their own namespaces (the model, the flow and the prompt's template and
settings, with the checked texts: the rendered prompt, exactly); the main model's answers are never
cached. With no check on ``main`` nothing would ever be stored, so it gets none. ``cache_summary``
is the start-up line that says what each model got.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from guardcache.cache import CacheInterface, PolicyCache, default_reporter, make_cache
from guardcache.config import RailsConfig
from guardcache.config.models import MAIN_MODEL_TYPE, ModelCacheConfig, ModelConfig
from guardcache.config.redis_env import redis_settings
from guardcache.flows import KNOWN_FLOWS
from guardcache.flows.jailbreak_detection import MODEL_TYPE as JAILBREAK_TYPE

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PlannedCache:
    """The cache one model (or the JailbreakDetect NIM) gets: ``settings.enabled`` says whether."""

    model_type: str
    settings: ModelCacheConfig
    model: ModelConfig | None  # None: the JailbreakDetect NIM without a model entry
    where: str  # "config.yml: models[1]", for errors
    checks: tuple[str, ...] = ()  # main only: the flows whose verdicts its cache holds


def planned_caches(config: RailsConfig) -> list[PlannedCache]:
    """Every model's cache settings in file order, then the JailbreakDetect NIM's when a rail uses
    it and no ``jailbreak_detection`` model gives it settings of its own (the defaults: on).
    ``main``'s is off when no check runs on it (it would hold nothing: its answers are never
    cached)."""
    source = config.source or "<config>"
    plans: list[PlannedCache] = []
    for i, model in enumerate(config.models):
        settings = model.cache
        checks: tuple[str, ...] = ()
        if model.type == MAIN_MODEL_TYPE:
            checks = tuple(config.flows_on(MAIN_MODEL_TYPE))
            if not checks and settings.enabled:
                settings = settings.model_copy(update={"enabled": False})
        plans.append(PlannedCache(model.type, settings, model, f"{source}: models[{i}]", checks))
    classifies = any(
        KNOWN_FLOWS[ref.name].backend == "classify"
        for group in (config.rails.input, config.rails.tool_input)
        for ref in group.flow_refs()
    )
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
    content_safety (50000, memory), jailbreak_detection (50000, memory); main: not cached``, or
    with a self check on main, ``main (50000, memory; self check input verdicts only, never its
    answers)``."""
    cached: list[str] = []
    uncached: list[str] = []
    plans = planned_caches(config)
    for plan in plans:
        size = f"{plan.settings.maxsize}, {plan.settings.store}"
        if plan.settings.policy != "lfu":  # the default (lfu) goes unsaid
            size += f", {plan.settings.policy}"
        if plan.settings.ttl is not None:  # so are no expiry and no version
            size += f", ttl {plan.settings.ttl:g} s"
        if plan.settings.version is not None:
            size += f", version {plan.settings.version!r}"
        if plan.model_type == MAIN_MODEL_TYPE:
            if plan.model_type in caches:
                checks = ", ".join(plan.checks)
                cached.append(f"main ({size}; {checks} verdicts only, never its answers)")
            elif plan.checks:  # a check runs on main, and its entry turned the cache off
                uncached.append("main: not cached (cache: {enabled: false})")
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
        ttl=cfg.ttl,
    )


def build_cache(model: ModelConfig, *, where: str | None = None) -> CacheInterface | None:
    """The model's cache, or None when caching is off for it.

    ``store: redis`` needs the ``redis`` extra; its import is lazy so memory-only configs do not.
    Its settings come from :func:`guardcache.config.redis_env.redis_settings` (the environment read
    now, every problem a ``ConfigError`` there); ``where`` (e.g. ``"config.yml: models[1]"``) names
    the model in those errors; default: its type.
    """
    cfg = model.cache
    if not cfg.enabled:
        return None
    interval = cfg.stats.log_interval if cfg.stats.enabled else None
    if cfg.store == "memory":
        return _memory(cfg)
    settings = redis_settings(model, where=where)  # the extra installed, the environment read
    from guardcache.cache.redis import build_tiered_cache, model_scope
    from guardcache.checks import codec

    # The tier logs the LFU line and its own line together, so the L1 gets no interval of its own.
    l1 = make_cache(cfg.policy, cfg.maxsize, track_stats=cfg.stats.enabled, ttl=cfg.ttl)
    return build_tiered_cache(
        l1,
        codec=codec,
        settings=settings,
        scope=model_scope(model.type, model.model),
        stats_logging_interval=interval,
    )


__all__ = [
    "PlannedCache",
    "build_cache",
    "build_caches",
    "cache_summary",
    "log_caches",
    "planned_caches",
]
