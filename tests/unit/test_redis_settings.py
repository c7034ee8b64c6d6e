"""Settings, stats values and config wiring of the Redis tier (no sockets: nothing connects here)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from guardcache.cache import LFUCache
from guardcache.cache.redis import RedisSettings, TieredCache
from guardcache.cache.redis.stats import GlobalTierStats, TierStats
from guardcache.cache.redis.store import redacted
from guardcache.checks import codec
from guardcache.checks.verdict import CachedCheck, Verdict
from guardcache.config import RailsConfig
from guardcache.config.redis_env import redis_settings
from guardcache.errors import ConfigError
from guardcache.llm.types import Usage
from guardcache.rails.caches import build_cache

SECRET = "unit-test-secret-0123456789abcdef"
OLD_SECRET = "unit-test-old-secret-fedcba9876543210"


@pytest.fixture(autouse=True)
def redis_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test here runs with the default secret variable set, as a deployment would."""
    monkeypatch.setenv("GUARDCACHE_REDIS_SECRET", SECRET)


def config(cache: str) -> RailsConfig:
    return RailsConfig.from_content(
        f"""
models:
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    parameters: {{base_url: "http://127.0.0.1:9/v1"}}
    cache: {cache}
"""
    )


def test_store_redis_builds_a_tiered_cache_scoped_by_model_without_connecting() -> None:
    cfg = config(
        "{enabled: true, maxsize: 123, store: redis, stats: {enabled: true}, "
        "redis: {url: 'redis://127.0.0.1:9/2', ttl: 60, key_prefix: gcx, timeout_ms: 40, pool_size: 3, "
        "lease_ms: 750}}"
    )
    cache = build_cache(cfg.model("content_safety"))
    assert isinstance(cache, TieredCache)
    assert cache.maxsize == 123 and isinstance(cache.l1, LFUCache)
    assert cache.store.keys.prefix == "gcx"
    assert cache.store.keys.scope.startswith("content_safety:")
    s = cache.store.settings
    assert (s.url, s.ttl_ms, s.timeout_ms, s.pool_size, s.lease_ms) == (
        "redis://127.0.0.1:9/2",
        60_000,
        40,
        3,
        750,
    )
    assert cache.codec is codec
    assert s.secret == SECRET.encode() and s.previous_secret is None
    assert cache.get_stats().maxsize == 123  # the LFU line stays per model


def test_the_url_comes_from_the_env_var_and_a_missing_one_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = config("{enabled: true, store: redis, redis: {url_env_var: GC_TEST_REDIS_URL}}")
    monkeypatch.delenv("GC_TEST_REDIS_URL", raising=False)
    with pytest.raises(ConfigError, match="GC_TEST_REDIS_URL is not set"):
        build_cache(cfg.model("content_safety"))
    monkeypatch.setenv("GC_TEST_REDIS_URL", "redis://:pw@127.0.0.1:9/0")
    cache = build_cache(cfg.model("content_safety"))
    assert isinstance(cache, TieredCache)
    assert "pw" not in repr(cache.store.settings)  # the URL may hold a password
    monkeypatch.setenv("GC_TEST_REDIS_URL", "http://nope")
    with pytest.raises(ConfigError, match="redis://"):
        build_cache(cfg.model("content_safety"))


REDIS_CACHE = "{enabled: true, store: redis, redis: {url: 'redis://127.0.0.1:9/0'%s}}"


def test_a_missing_secret_is_a_config_error_naming_the_field_and_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No silent fallback to unauthenticated entries: the tier does not start without its secret."""
    monkeypatch.delenv("GUARDCACHE_REDIS_SECRET")
    model = config(REDIS_CACHE % "").model("content_safety")
    with pytest.raises(ConfigError) as info:
        build_cache(model)
    assert str(info.value).startswith(
        "model 'content_safety': cache.redis.secret_env_var: environment variable "
        "GUARDCACHE_REDIS_SECRET is not set or empty;"
    )
    with pytest.raises(ConfigError) as info:
        redis_settings(model, where="config.yml: models[1]")
    assert str(info.value).startswith(
        "config.yml: models[1].cache.redis.secret_env_var: environment variable "
        "GUARDCACHE_REDIS_SECRET is not set or empty;"
    )
    monkeypatch.setenv("GUARDCACHE_REDIS_SECRET", "   ")  # blank counts as unset
    with pytest.raises(ConfigError, match="GUARDCACHE_REDIS_SECRET is not set"):
        build_cache(model)


def test_the_secret_variable_is_configurable_and_a_short_secret_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = config(REDIS_CACHE % ", secret_env_var: GC_TEST_SECRET").model("content_safety")
    monkeypatch.delenv("GC_TEST_SECRET", raising=False)
    with pytest.raises(ConfigError, match="secret_env_var: environment variable GC_TEST_SECRET is not set"):
        build_cache(model)
    monkeypatch.setenv("GC_TEST_SECRET", "short-but-15byt")
    with pytest.raises(ConfigError) as info:
        build_cache(model)
    message = str(info.value)
    assert (
        "cache.redis.secret_env_var: the secret in environment variable GC_TEST_SECRET is 15 bytes" in message
    )
    assert "at least 16" in message and "short-but-15byt" not in message  # never the secret itself
    monkeypatch.setenv("GC_TEST_SECRET", " exactly-16-bytes\n")  # surrounding whitespace is dropped
    cache = build_cache(model)
    assert isinstance(cache, TieredCache) and cache.store.settings.secret == b"exactly-16-bytes"


def test_secrets_never_show_in_reprs_or_settings_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GC_TEST_OLD", OLD_SECRET)
    model = config(REDIS_CACHE % ", previous_secret_env_var: GC_TEST_OLD").model("content_safety")
    cache = build_cache(model)
    assert isinstance(cache, TieredCache)
    shown = repr(cache.store.settings) + repr(cache) + repr(cache.store._auth) + str(cache.tier_stats())
    assert SECRET not in shown and OLD_SECRET not in shown and "secret" not in repr(cache.store.settings)
    with pytest.raises(ValueError) as info:
        RedisSettings(url="redis://h/0", secret=b"tiny")
    assert "4 bytes" in str(info.value) and "tiny" not in str(info.value)


def test_the_previous_secret_is_optional_and_read_only_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    model = config(REDIS_CACHE % ", previous_secret_env_var: GC_TEST_OLD").model("content_safety")
    monkeypatch.delenv("GC_TEST_OLD", raising=False)
    assert redis_settings(model).previous_secret is None  # named but unset: no rotation in progress
    monkeypatch.setenv("GC_TEST_OLD", OLD_SECRET)
    assert redis_settings(model).previous_secret == OLD_SECRET.encode()
    monkeypatch.setenv("GC_TEST_OLD", "old-and-short")
    with pytest.raises(
        ConfigError, match=r"previous_secret_env_var: the secret in environment variable GC_TEST_OLD is 13"
    ):
        redis_settings(model)
    monkeypatch.setenv("GC_TEST_OLD", SECRET)
    with pytest.raises(ConfigError, match="GC_TEST_OLD holds the same secret as GUARDCACHE_REDIS_SECRET"):
        redis_settings(model)
    with pytest.raises(ValueError, match="equals the current one"):
        RedisSettings(url="redis://h/0", secret=SECRET.encode(), previous_secret=SECRET.encode())


def test_the_previous_secret_variable_must_differ_from_the_secret_variable() -> None:
    with pytest.raises(ConfigError, match="previous_secret_env_var: must name another variable"):
        config(REDIS_CACHE % ", previous_secret_env_var: GUARDCACHE_REDIS_SECRET")
    with pytest.raises(ConfigError, match=r"secret_env_var: expected the name of an environment variable"):
        config(REDIS_CACHE % ", secret_env_var: '$MY_SECRET'")


def test_a_prefix_with_spaces_is_a_config_error() -> None:
    cfg = config("{enabled: true, store: redis, redis: {url: 'redis://h:1/0', key_prefix: 'a b'}}")
    with pytest.raises(ConfigError, match=r"cache\.redis"):
        build_cache(cfg.model("content_safety"))


def test_the_tier_logs_both_lines_and_the_l1_does_not_log_alone() -> None:
    cfg = config(
        "{enabled: true, store: redis, stats: {enabled: true, log_interval: 3600}, "
        "redis: {url: 'redis://127.0.0.1:9/0'}}"
    )
    cache = build_cache(cfg.model("content_safety"))
    assert isinstance(cache, TieredCache)
    assert cache.supports_stats_logging()
    assert not cache.l1.supports_stats_logging()  # else the LFU line would be logged twice
    cache.close()


def test_memory_store_is_still_a_plain_lfu() -> None:
    assert type(build_cache(config("{enabled: true}").model("content_safety"))) is LFUCache


def test_importing_guardcache_cache_does_not_import_redis() -> None:
    code = "import sys, guardcache.cache; print(sorted(m for m in sys.modules if m.split('.')[0] == 'redis'))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"  # no redis module, not even a submodule


def test_settings_are_validated() -> None:
    key = SECRET.encode()
    with pytest.raises(ValueError, match="timeout_ms"):
        RedisSettings(url="redis://h/0", secret=key, timeout_ms=0)
    with pytest.raises(ValueError, match="URL"):
        RedisSettings(url="http://h/0", secret=key)
    assert RedisSettings(url="redis://h/0", secret=key, ttl_s=0.25).ttl_ms == 250


def test_redacted_urls_hide_the_password_only() -> None:
    assert redacted("redis://user:s3cret@cache.local:6380/1") == "redis://user:***@cache.local:6380/1"
    assert redacted("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_the_codec_round_trips_and_rejects_other_versions() -> None:
    value = CachedCheck(Verdict(False, ("S1", "S3"), "unsafe"), Usage(1, 2, 3, 0, "m", "nim"))
    data = codec.encode(value)
    assert codec.decode(data) == value
    assert codec.decode(b"\x02" + data[1:]) is None
    assert codec.decode(data[:-3]) is None


def test_tier_stats_line_and_global_hit_rate() -> None:
    g = GlobalTierStats.from_hash({b"lookups": b"200", b"computations": b"30", b"junk": b"x"})
    assert (g.lookups, g.computations, g.l2_hits) == (200, 30, 0)
    assert g.hit_rate == pytest.approx(0.85)
    stats = TierStats(lookups=10, l1_hits=5, l2_hits=3, l2_misses=2, computations=2, global_stats=g)
    assert stats.hit_rate == pytest.approx(0.8)
    assert stats.format_line() == (
        "Redis Tier Statistics - L1 Hits: 5 | L2 Hits: 3 | L2 Misses: 2 | L2 Errors: 0 | "
        "Backend Calls: 2 | Lease Waits: 0 | Coalesced: 0 | Global Hit Rate: 85.00%"
    )
    assert "Global Hit Rate: n/a" in TierStats().format_line()
    assert "Circuit: open" in TierStats(circuit_open=True).format_line()
    assert "L2 Auth Failures" not in stats.format_line()  # shown only when something was rejected
    assert TierStats(l2_auth_failures=3).format_line().endswith(" | L2 Auth Failures: 3")
    g = GlobalTierStats.from_hash({b"l2_auth_failures": b"7"})
    assert g.l2_auth_failures == 7
    assert stats.as_dict()["global_stats"]["hit_rate"] == pytest.approx(0.85)
    with pytest.raises(AttributeError):
        stats.l1_hits = 1  # type: ignore[misc]
