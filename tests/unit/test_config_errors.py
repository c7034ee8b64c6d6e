"""Every bad config fails with a ConfigError naming the file and the field path, in YAML terms."""

from __future__ import annotations

import pytest

from guardcache.config import RailsConfig
from guardcache.errors import ConfigError

GOOD = """\
models:
  - type: main
    engine: nim
    model: meta/llama-3.1-8b-instruct
    parameters: {base_url: http://localhost:8000/v1}
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    parameters: {base_url: http://localhost:8001/v1}
    api_key_env_var: NVIDIA_API_KEY
    cache:
      enabled: true
      maxsize: 50000
      store: memory
      stats: {enabled: true, log_interval: 60.0}
rails:
  input:  {parallel: false, on_error: block, flows: [content safety check input $model=content_safety]}
  output: {on_error: block, flows: [content safety check output $model=content_safety]}
"""


def load(text: str) -> RailsConfig:
    return RailsConfig.from_content(text, source="config.yml")


def edit(old: str, new: str, count: int = 1) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, count)


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(text)
    return str(info.value)


def test_the_good_config_loads() -> None:
    config = load(GOOD)
    assert config.model_types == ["main", "content_safety"]
    assert config.source == "config.yml"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            edit("models:", "modles:"),
            # instructions and sample_conversation are NeMo's keys that templates read (since
            # guardcache renders {{ general_instructions }} and {{ sample_conversation }}).
            "config.yml: modles: unknown key; did you mean 'models'? (allowed: models, rails, prompts, "
            "instructions, sample_conversation)",
            id="unknown-top-level-key",
        ),
        pytest.param(
            edit("maxsize: 50000", "maxsixe: 50000"),
            "config.yml: models[1].cache.maxsixe: unknown key; did you mean 'maxsize'? "
            "(allowed: enabled, maxsize (or capacity_per_model), store, policy, stats, redis, ttl, version, "
            "snapshot, snapshot_interval, snapshot_key_env_var)",
            id="unknown-nested-key",
        ),
        pytest.param(
            edit("maxsize: 50000", "maxsize: 0"),
            "config.yml: models[1].cache.maxsize: must be greater than 0 (got 0)",
            id="maxsize-zero",
        ),
        pytest.param(
            edit("maxsize: 50000", "maxsize: -1"),
            "config.yml: models[1].cache.maxsize: must be greater than 0 (got -1)",
            id="maxsize-negative",
        ),
        pytest.param(
            edit("maxsize: 50000", "capacity_per_model: 0"),
            "config.yml: models[1].cache.capacity_per_model: must be greater than 0 (got 0)",
            id="alias-zero",
        ),
        pytest.param(
            edit("maxsize: 50000", "maxsize: true"),
            "config.yml: models[1].cache.maxsize: expected a number (got true)",
            id="maxsize-bool",
        ),
        pytest.param(
            edit("maxsize: 50000", "maxsize: 1.5"),
            "config.yml: models[1].cache.maxsize: expected a whole number (got 1.5)",
            id="maxsize-fraction",
        ),
        pytest.param(
            edit("store: memory", "store: disk"),
            "config.yml: models[1].cache.store: expected one of 'memory' or 'redis' (got 'disk')",
            id="unknown-store",
        ),
        pytest.param(
            edit("engine: nim", "engine: azure"),
            "config.yml: models[0].engine: expected one of 'nim', 'nvidia_ai_endpoints', 'openai' "
            "or 'vllm_openai' (got 'azure')",
            id="unknown-engine",
        ),
        pytest.param(
            edit("log_interval: 60.0", "log_interval: soon"),
            "config.yml: models[1].cache.stats.log_interval: expected a number (got 'soon')",
            id="log-interval-word",
        ),
        pytest.param(
            edit("log_interval: 60.0", "log_interval: 0"),
            "config.yml: models[1].cache.stats.log_interval: must be greater than 0 (got 0)",
            id="log-interval-zero",
        ),
        pytest.param(
            edit("store: memory", "store: memory\n      ttl: 0"),
            "config.yml: models[1].cache.ttl: must be greater than 0 (got 0)",
            id="ttl-zero",
        ),
        pytest.param(
            edit("store: memory", "store: memory\n      ttl: -30"),
            "config.yml: models[1].cache.ttl: must be greater than 0 (got -30)",
            id="ttl-negative",
        ),
        pytest.param(
            edit("store: memory", "store: memory\n      ttl: an hour"),
            "config.yml: models[1].cache.ttl: expected a number (got 'an hour')",
            id="ttl-word",
        ),
        pytest.param(
            edit("store: memory", "store: memory\n      version: ''"),
            "config.yml: models[1].cache.version: must not be empty (got '')",
            id="version-empty",
        ),
        pytest.param(
            edit("check input $model=content_safety", "check input $model=content_safty"),
            "config.yml: rails.input.flows[0]: flow 'content safety check input' names model type "
            "'content_safty', which is not configured (configured: main, content_safety)",
            id="flow-names-missing-model-type",
        ),
        pytest.param(
            edit("check input $model", "check inptu $model"),
            "config.yml: rails.input.flows[0]: unknown flow 'content safety check inptu'; did you "
            "mean 'content safety check input'? (known flows: content safety check input, "
            "content safety check output, jailbreak detection model, llama guard check input, "
            "llama guard check output, self check input, self check output, topic safety check input)",
            id="unknown-flow",
        ),
        pytest.param(
            edit("store: memory", "store: redis"),
            "config.yml: models[1].cache.redis: store: redis needs redis.url or redis.url_env_var "
            "(e.g. redis: {url_env_var: GUARDCACHE_REDIS_URL})",
            id="redis-without-url",
        ),
        pytest.param(
            edit("api_key_env_var: NVIDIA_API_KEY", "api_key: nvapi-secret"),
            # A key beside the model's fields: NeMo ignores it, so it is refused (a key NeMo reads,
            # under parameters, is accepted with a warning: tests/unit/test_config_nemo_surface.py).
            "config.yml: models[1].api_key: a key here is not read (NeMo Guardrails ignores it too): "
            "name the environment variable that holds it with api_key_env_var "
            "(e.g. api_key_env_var: NVIDIA_API_KEY)",
            id="api-key-in-yaml",
        ),
        pytest.param(
            # parameters.api_key used to be refused; it is accepted now (NeMo's own examples write
            # one), but not together with api_key_env_var: which one would be sent is a trap. The
            # message never shows the value.
            edit("{base_url: http://localhost:8001/v1}", "{api_key: nvapi-secret}"),
            "config.yml: models[1].parameters.api_key: the API key is given twice (parameters.api_key "
            "and api_key_env_var); keep api_key_env_var",
            id="api-key-in-parameters-and-env-var",
        ),
        pytest.param(
            edit("api_key_env_var: NVIDIA_API_KEY", "api_key_env_var: $NVIDIA_API_KEY"),
            "config.yml: models[1].api_key_env_var: expected the name of an environment variable "
            "(write NVIDIA_API_KEY, not $NVIDIA_API_KEY) (got '$NVIDIA_API_KEY')",
            id="env-var-with-dollar",
        ),
        pytest.param(
            edit("on_error: block", "on_error: ignore"),
            "config.yml: rails.input.on_error: expected one of 'block' or 'allow' (got 'ignore')",
            id="unknown-on-error",
        ),
        pytest.param(
            edit("{base_url: http://localhost:8000/v1}", "{base_url: localhost:8000}"),
            "config.yml: models[0].parameters.base_url: 'localhost:8000' must start with http:// or "
            "https://, e.g. http://localhost:8000/v1",
            id="base-url-without-scheme",
        ),
        pytest.param(
            edit("  - type: main\n    engine: nim\n", "  - type: main\n    engine: vllm_openai\n").replace(
                "    parameters: {base_url: http://localhost:8000/v1}\n", "", 1
            ),
            "config.yml: models[0].parameters.base_url: engine 'vllm_openai' has no default URL; "
            "set parameters.base_url (e.g. http://localhost:8000/v1)",
            id="vllm-without-base-url",
        ),
        pytest.param(
            edit("type: main", "type: content_safety"),
            "config.yml: models[1].type: model type 'content_safety' is already configured (models[0])",
            id="duplicate-model-type",
        ),
        pytest.param(
            edit(
                "flows: [content safety check input $model=content_safety]",
                "flows: [content safety check input]",
            ),
            "config.yml: rails.input.flows[0]: flow 'content safety check input' needs "
            "$model=<model type> (configured model types: main, content_safety)",
            id="flow-without-model",
        ),
        pytest.param(
            edit(
                "flows: [content safety check input $model=content_safety]",
                "flows: [content safety check output $model=content_safety]",
            ),
            "config.yml: rails.input.flows[0]: flow 'content safety check output' is an output "
            "rail: move it to rails.output.flows",
            id="flow-in-wrong-direction",
        ),
        pytest.param(
            edit("check input $model=content_safety", "check input $model=main"),
            "config.yml: rails.input.flows[0]: flow 'content safety check input' needs a prompt "
            "with task 'content_safety_check_input $model=main': add one to prompts.yml",
            id="flow-without-prompt-for-model-type",
        ),
        pytest.param(
            edit("check input $model=content_safety", "check input $model=content_safety $x=1"),
            "config.yml: rails.input.flows[0]: flow 'content safety check input' does not take $x",
            id="flow-with-extra-argument",
        ),
        pytest.param(
            edit("check input $model=content_safety", "check input $model=content_safety junk"),
            "config.yml: rails.input.flows[0]: cannot read 'junk'",
            id="flow-unreadable",
        ),
        pytest.param(
            edit(
                "  - type: main\n    engine: nim\n    model: meta/llama-3.1-8b-instruct\n",
                "  - type: main\n    engine: nim\n",
            ),
            "config.yml: models[0].model: required key is missing",
            id="model-name-missing",
        ),
        pytest.param(
            "models: {type: main}\n",
            "config.yml: models: expected a list (got a mapping)",
            id="models-not-a-list",
        ),
        pytest.param(
            edit(
                "    parameters: {base_url: http://localhost:8000/v1}\n  - type: content_safety",
                "    parameters: {base_url: http://localhost:8000/v1}\n    bad: [\n  - type: x",
            ),
            "config.yml: line 7, column 3: invalid YAML: expected the node content, but found '-'",
            id="invalid-yaml-with-line",
        ),
        pytest.param(
            "- models\n- rails\n",
            "config.yml: the top level must be a mapping of keys (got a list)",
            id="top-level-list",
        ),
        pytest.param(
            GOOD + "rails: {}\n",
            "config.yml: line 19, column 1: invalid YAML: duplicate key 'rails' (first at line 16)",
            id="duplicate-yaml-key",
        ),
    ],
)
def test_bad_config_names_file_and_field(text: str, expected: str) -> None:
    assert error_of(text).startswith(expected)


def test_every_problem_is_reported_one_per_line() -> None:
    text = edit("maxsize: 50000", "maxsize: 0").replace("log_interval: 60.0", "log_interval: soon")
    lines = error_of(text).splitlines()
    assert lines == [
        "config.yml: models[1].cache.maxsize: must be greater than 0 (got 0)",
        "config.yml: models[1].cache.stats.log_interval: expected a number (got 'soon')",
    ]


def test_an_api_key_value_never_appears_in_the_message() -> None:
    message = error_of(edit("api_key_env_var: NVIDIA_API_KEY", "api_key: nvapi-TOPSECRET"))
    assert "TOPSECRET" not in message


def test_alias_and_name_together_is_one_setting_given_twice() -> None:
    message = error_of(edit("maxsize: 50000", "maxsize: 10\n      capacity_per_model: 20"))
    assert message == (
        "config.yml: models[1].cache.capacity_per_model: 'capacity_per_model' and 'maxsize' are "
        "two names for one setting; keep only one"
    )


def test_redis_url_and_url_env_var_together_is_an_error() -> None:
    text = edit(
        "store: memory",
        "store: redis\n      redis: {url: redis://h:6379/0, url_env_var: GUARDCACHE_REDIS_URL}",
    )
    assert error_of(text) == (
        "config.yml: models[1].cache.redis.url_env_var: set either url or url_env_var, not both"
    )


def test_bad_prompt_names_its_index_and_field() -> None:
    prompts = "prompts:\n  - task: content_safety_check_input $model=content_safety\n"
    assert error_of(GOOD + prompts) == (
        "config.yml: prompts[0]: give exactly one of 'content' or 'messages' (got neither)"
    )
