"""Model entries: URLs per engine, keys (from the environment, or written in parameters with a
warning), the cache section, lookups."""

from __future__ import annotations

import pydantic
import pytest

from guardcache.config import ModelCacheConfig, ModelConfig, RailsConfig, RedisConfig
from guardcache.errors import ConfigError


def one_model(body: str) -> ModelConfig:
    return RailsConfig.from_content("models:\n  - type: guard\n" + body, source="config.yml").model("guard")


@pytest.mark.parametrize(
    ("engine", "url"),
    [
        ("nim", "https://integrate.api.nvidia.com/v1"),
        ("nvidia_ai_endpoints", "https://integrate.api.nvidia.com/v1"),
        ("openai", "https://api.openai.com/v1"),
    ],
)
def test_base_url_defaults_per_engine(engine: str, url: str) -> None:
    assert one_model(f"    engine: {engine}\n    model: m\n").base_url == url


def test_parameters_base_url_wins_and_loses_its_trailing_slash() -> None:
    body = "    engine: nim\n    model: m\n    parameters: {base_url: 'http://localhost:8001/v1/'}\n"
    assert one_model(body).base_url == "http://localhost:8001/v1"


def test_vllm_openai_reads_nemos_openai_api_base() -> None:
    body = (
        "    engine: vllm_openai\n    parameters:\n"
        "      openai_api_base: 'http://localhost:5000/v1'\n      model_name: meta-llama/LlamaGuard-7b\n"
    )
    model = one_model(body)
    assert model.base_url == "http://localhost:5000/v1"
    assert model.model == "meta-llama/LlamaGuard-7b"  # NeMo's parameters.model_name
    assert "model_name" not in model.parameters


def test_model_name_in_two_places_is_an_error() -> None:
    with pytest.raises(ConfigError) as info:
        one_model("    engine: nim\n    model: a\n    parameters: {model_name: b}\n")
    assert str(info.value) == (
        "config.yml: models[0].parameters.model_name: the model name is given twice "
        "(model and parameters); keep only `model`"
    )


def test_api_key_is_read_from_the_env_var_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GC_TEST_KEY", raising=False)
    model = one_model("    engine: nim\n    model: m\n    api_key_env_var: GC_TEST_KEY\n")
    assert model.api_key() is None
    monkeypatch.setenv("GC_TEST_KEY", "nvapi-1")
    assert model.api_key() == "nvapi-1"
    monkeypatch.setenv("GC_TEST_KEY", "nvapi-2")  # rotated: no reload needed
    assert model.api_key() == "nvapi-2"
    monkeypatch.setenv("GC_TEST_KEY", "")
    assert model.api_key() is None


def test_nvidia_engines_default_to_nvidia_api_key_over_https_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # NeMo's default for nim / nvidia_ai_endpoints; never sent in clear text to a local endpoint.
    monkeypatch.setenv("NVIDIA_API_KEY", "nvapi-ambient")
    assert one_model("    engine: nim\n    model: m\n").api_key() == "nvapi-ambient"
    assert one_model("    engine: nvidia_ai_endpoints\n    model: m\n").api_key() == "nvapi-ambient"
    local = "    engine: nim\n    model: m\n    parameters: {base_url: http://localhost:8000/v1}\n"
    assert one_model(local).api_key() is None
    assert one_model("    engine: openai\n    model: m\n").api_key() is None


@pytest.mark.parametrize("key", ["api_key", "openai_api_key", "nvidia_api_key"])
def test_a_key_in_parameters_is_accepted_and_kept_out_of_the_parameters(key: str) -> None:
    # Used to be refused; NeMo's own llama_guard example writes `api_key: EMPTY` (vLLM's
    # placeholder), so it is accepted now, with a load warning (test_config_nemo_surface.py), and
    # taken out of the parameters: never a body field, never in the cache namespace, never in a repr.
    model = one_model(f"    engine: nim\n    model: m\n    parameters: {{{key}: s3cret, temperature: 0}}\n")
    assert model.api_key() == "s3cret" and model.inline_key_field == key
    assert model.parameters == {"temperature": 0} and "s3cret" not in repr(model)


@pytest.mark.parametrize("value", ["''", "[a]", "1", '"two\\nlines"'])
def test_a_key_that_is_not_one_line_of_text_is_refused_without_showing_it(value: str) -> None:
    with pytest.raises(ConfigError, match=r"models\[0\]\.parameters\.api_key: expected the key") as info:
        one_model(f"    engine: nim\n    model: m\n    parameters: {{api_key: {value}}}\n")
    assert "the value is not shown)" in str(info.value) and "lines" not in str(info.value)


@pytest.mark.parametrize(
    ("param", "expected"),
    [
        ("timeout: 0", "parameters.timeout: expected seconds for the whole check, a number > 0 (got 0)"),
        (
            "timeout: true",
            "parameters.timeout: expected seconds for the whole check, a number > 0 (got True)",
        ),
        ("max_retries: -1", "parameters.max_retries: expected a whole number >= 0 (got -1)"),
        (
            "base_url: http://user:pw@nim:8000/v1",
            "parameters.base_url: credentials in the URL would be written into every log line; remove "
            "them and give the API key with api_key_env_var (e.g. api_key_env_var: NVIDIA_API_KEY)",
        ),
        ("max_tokens: 1.5", "parameters.max_tokens: expected a whole number > 0 (got 1.5)"),
        ("temperature: -0.1", "parameters.temperature: expected a number from 0 to 2 (got -0.1)"),
    ],
)
def test_parameters_guardcache_reads_are_checked(param: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        one_model(f"    engine: nim\n    model: m\n    parameters: {{{param}}}\n")
    assert str(info.value) == f"config.yml: models[0].{expected}"


def test_other_parameters_pass_through_untouched() -> None:
    body = "    engine: nim\n    model: m\n    parameters: {temperature: 0, top_p: 0.9, x: [1]}\n"
    assert one_model(body).parameters == {"temperature": 0, "top_p": 0.9, "x": [1]}


def test_cache_is_on_by_default_for_every_model_and_accepts_the_capacity_per_model_alias() -> None:
    # Used to be off by default (NeMo's default). A model's verdict cache is now on unless
    # `cache: {enabled: false}`, with 50,000 entries and stats on. The main model's too (it was off
    # unless asked for): it holds the verdicts of self checks run on main, never its answers, and
    # is built only when such a check exists (rails/caches.py, tests/integration/test_default_caches.py).
    assert one_model("    engine: nim\n    model: m\n").cache == ModelCacheConfig()
    assert ModelCacheConfig().enabled is True and ModelCacheConfig().maxsize == 50000
    assert ModelCacheConfig().stats.enabled is True
    main = RailsConfig.from_content("models:\n  - {type: main, engine: nim, model: m}\n").model("main")
    assert main.cache == ModelCacheConfig()
    bare = "models:\n  - {type: main, engine: nim, model: m, cache: }\n"  # `cache:` with nothing after
    assert RailsConfig.from_content(bare).model("main").cache.enabled is True
    off = "models:\n  - {type: main, engine: nim, model: m, cache: {enabled: false}}\n"
    assert RailsConfig.from_content(off).model("main").cache.enabled is False
    off = one_model("    engine: nim\n    model: m\n    cache: {enabled: false}\n")
    assert off.cache.enabled is False
    model = one_model("    engine: nim\n    model: m\n    cache: {enabled: true, capacity_per_model: 7}\n")
    assert model.cache.enabled and model.cache.maxsize == 7


def test_numeric_strings_are_accepted_as_numbers() -> None:
    body = "    engine: nim\n    model: m\n    cache: {maxsize: '12', stats: {log_interval: '2.5'}}\n"
    cache = one_model(body).cache
    assert cache.maxsize == 12 and cache.stats.log_interval == 2.5


def test_empty_cache_and_stats_sections_mean_defaults() -> None:
    assert one_model("    engine: nim\n    model: m\n    cache:\n").cache == ModelCacheConfig()


def test_redis_url_env_var_is_read_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    body = (
        "    engine: nim\n    model: m\n    cache:\n      store: redis\n"
        "      redis: {url_env_var: GC_TEST_REDIS, ttl: 60}\n"
    )
    monkeypatch.delenv("GC_TEST_REDIS", raising=False)
    redis = one_model(body).cache.redis
    assert redis is not None and redis.resolved_url() is None and redis.ttl == 60
    monkeypatch.setenv("GC_TEST_REDIS", "redis://cache:6379/1")
    assert redis.resolved_url() == "redis://cache:6379/1"
    assert RedisConfig(url="redis://h:1/0").resolved_url() == "redis://h:1/0"


@pytest.mark.parametrize(
    ("redis", "expected"),
    [
        ("{url: 'http://h'}", "redis.url: expected a redis://, rediss:// or unix:// URL"),
        ("{url: 'redis://h', ttl: 0}", "redis.ttl: must be greater than 0 (got 0)"),
        ("{url: 'redis://h', timeout_ms: -1}", "redis.timeout_ms: must be greater than 0 (got -1)"),
        ("{url: 'redis://h', key_prefix: ''}", "redis.key_prefix: must not be empty"),
        ("{url: 'redis://h', pool: 3}", "redis.pool: unknown key; did you mean 'pool_size'?"),
    ],
)
def test_redis_settings_are_checked(redis: str, expected: str) -> None:
    body = f"    engine: nim\n    model: m\n    cache:\n      store: redis\n      redis: {redis}\n"
    with pytest.raises(ConfigError) as info:
        one_model(body)
    assert str(info.value).startswith(f"config.yml: models[0].cache.{expected}")


def test_model_lookup_lists_the_configured_types() -> None:
    config = RailsConfig.from_content(
        "models:\n  - {type: main, engine: openai, model: m}\n", source="config.yml"
    )
    with pytest.raises(ConfigError) as info:
        config.model("content_safety")
    assert str(info.value) == (
        "config.yml: no model of type 'content_safety' is configured (configured: main)"
    )


def test_config_objects_are_immutable() -> None:
    model = one_model("    engine: nim\n    model: m\n")
    with pytest.raises(pydantic.ValidationError):
        model.model = "other"  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        model.cache.maxsize = 1  # type: ignore[misc]


def test_a_bad_redis_url_is_not_echoed_because_it_may_hold_a_password() -> None:
    body = (
        "    engine: nim\n    model: m\n    cache:\n      store: redis\n"
        "      redis: {url: 'http://:hunter2@cache:6379'}\n"
    )
    with pytest.raises(ConfigError) as info:
        one_model(body)
    assert "hunter2" not in str(info.value)
    assert str(info.value).endswith("(got http://)")


def test_nemos_model_name_key_is_the_model() -> None:
    assert one_model("    engine: nim\n    model_name: meta/llama-3.3-70b-instruct\n").model == (
        "meta/llama-3.3-70b-instruct"
    )
    with pytest.raises(ConfigError, match=r"models\[0\]\.model_name: give the model name once"):
        one_model("    engine: nim\n    model: a\n    model_name: b\n")
