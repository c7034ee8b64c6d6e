"""``cache.policy`` in config.yml: which in-process cache a model's verdicts get."""

from __future__ import annotations

import typing

import pytest

from guardcache.cache import POLICY_NAMES, LFUCache, TinyLFUCache
from guardcache.config import RailsConfig
from guardcache.config.models import ModelCacheConfig
from guardcache.errors import ConfigError
from guardcache.rails.caches import build_cache, build_caches, cache_summary


def config(cache: str) -> RailsConfig:
    return RailsConfig.from_content(
        f"""
models:
  - type: main
    engine: nim
    model: meta/llama-3.1-8b-instruct
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    cache: {cache}
rails:
  input: {{flows: [content safety check input $model=content_safety]}}
""",
        source="config.yml",
    )


def test_policy_tinylfu_builds_a_tinylfu_cache_with_the_configured_settings() -> None:
    cfg = config("{maxsize: 321, policy: tinylfu, stats: {enabled: true, log_interval: 30}}")
    caches = build_caches(cfg)
    cache = caches["content_safety"]
    assert type(cache) is TinyLFUCache
    assert cache.maxsize == 321 and cache.track_stats and cache.supports_stats_logging()
    cache.close()
    assert "content_safety (321, memory, tinylfu)" in cache_summary(cfg, caches)


def test_the_default_policy_is_the_seeds_lfu_and_the_summary_is_unchanged() -> None:
    cfg = config("{maxsize: 100}")
    assert cfg.model("content_safety").cache.policy == "lfu"
    caches = build_caches(cfg)
    assert type(caches["content_safety"]) is LFUCache
    assert "content_safety (100, memory);" in cache_summary(cfg, caches)
    assert type(build_cache(config("{policy: lfu}").model("content_safety"))) is LFUCache


def test_an_unknown_policy_is_an_error_naming_the_file_the_field_and_the_choices() -> None:
    with pytest.raises(ConfigError) as info:
        config("{policy: arc}")
    assert str(info.value) == (
        "config.yml: models[1].cache.policy: expected one of 'lfu' or 'tinylfu' (got 'arc')"
    )


def test_the_configs_choices_are_the_registrys() -> None:
    field = ModelCacheConfig.model_fields["policy"]
    assert typing.get_args(field.annotation) == POLICY_NAMES
    assert field.default == POLICY_NAMES[0]


def test_the_redis_tier_sits_behind_a_tinylfu_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    from guardcache.cache.redis import TieredCache

    monkeypatch.setenv("GUARDCACHE_REDIS_SECRET", "unit-test-secret-0123456789abcdef")
    cfg = config("{policy: tinylfu, store: redis, redis: {url: 'redis://127.0.0.1:9/0'}}")
    cache = build_cache(cfg.model("content_safety"))  # builds without connecting
    assert isinstance(cache, TieredCache) and type(cache.l1) is TinyLFUCache
    assert cache.recorder is cache.l1.recorder
    cache.close()
