"""Loading: a file or a folder, merging files as NeMo does, NeMo-only keys, the shipped examples."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import pytest

from guardcache.config import RailsConfig
from guardcache.config.prompts import default_prompts
from guardcache.errors import ConfigError
from guardcache.prompts import fingerprint

REPO = Path(__file__).resolve().parents[2]

MODELS = """\
models:
  - type: main
    engine: openai
    model: gpt-4o-mini
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
"""
RAILS = """\
rails:
  input:
    flows:
      - content safety check input $model=content_safety
"""
INPUT_PROMPT = """\
prompts:
  - task: content_safety_check_input $model=content_safety
    output_parser: nemoguard_parse_prompt_safety
    max_tokens: 20
    content: "Is this safe? {{ user_input }}"
"""


def test_a_single_file_loads_and_is_its_own_source(tmp_path: Path) -> None:
    path = tmp_path / "guard.yml"
    path.write_text(MODELS + RAILS)
    config = RailsConfig.from_path(path)
    assert config.source == str(path)
    assert [r.model_type for r in config.rails.input.flow_refs()] == ["content_safety"]


def test_a_folder_merges_config_and_prompts_files(tmp_path: Path) -> None:
    (tmp_path / "config.yml").write_text(MODELS + RAILS)
    (tmp_path / "prompts.yml").write_text(INPUT_PROMPT)
    config = RailsConfig.from_path(tmp_path)
    assert config.source == str(tmp_path)
    prompt = config.prompt_for("content_safety_check_input", "content_safety")
    assert prompt.content == "Is this safe? {{ user_input }}"
    assert prompt.max_tokens == 20


def test_folder_lists_are_concatenated_and_mappings_merged(tmp_path: Path) -> None:
    (tmp_path / "config.yml").write_text(MODELS + "rails:\n  input:\n    parallel: true\n")
    (tmp_path / "guard_models.yaml").write_text(
        "models:\n  - type: other_guard\n    engine: vllm_openai\n    model: m\n"
        "    parameters: {base_url: 'http://localhost:9000/v1'}\n"
    )
    (tmp_path / "rails.yml").write_text(RAILS)
    config = RailsConfig.from_path(tmp_path)
    assert config.model_types == ["main", "content_safety", "other_guard"]
    assert config.rails.input.parallel is True
    assert config.rails.input.flows == ["content safety check input $model=content_safety"]


def test_an_error_in_a_merged_folder_names_the_file_that_holds_it(tmp_path: Path) -> None:
    (tmp_path / "config.yml").write_text(MODELS + RAILS)
    (tmp_path / "prompts.yml").write_text(INPUT_PROMPT.replace("max_tokens: 20", "max_tokens: 0"))
    with pytest.raises(ConfigError) as info:
        RailsConfig.from_path(tmp_path)
    assert (
        str(info.value)
        == f"{tmp_path / 'prompts.yml'}: prompts[0].max_tokens: must be greater than 0 (got 0)"
    )


def test_an_error_in_a_second_models_file_names_that_file_and_the_merged_index(tmp_path: Path) -> None:
    (tmp_path / "config.yml").write_text(MODELS)
    (tmp_path / "more.yml").write_text(
        "models:\n  - type: g\n    engine: nim\n    model: m\n    cache: {maxsize: 0}\n"
    )
    with pytest.raises(ConfigError) as info:
        RailsConfig.from_path(tmp_path)
    assert (
        str(info.value) == f"{tmp_path / 'more.yml'}: models[2].cache.maxsize: must be greater than 0 (got 0)"
    )


def test_the_same_setting_with_two_values_in_two_files_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "config.yml").write_text(MODELS + "rails:\n  input: {parallel: false}\n")
    (tmp_path / "other.yml").write_text("rails:\n  input: {parallel: true}\n")
    with pytest.raises(ConfigError) as info:
        RailsConfig.from_path(tmp_path)
    assert str(info.value) == (
        f"{tmp_path / 'other.yml'}: rails.input.parallel: also set in {tmp_path / 'config.yml'} "
        "(false there, true here); set it in one file only"
    )


def test_config_yml_is_read_first_and_other_files_and_railsignored_ones_are_skipped(tmp_path: Path) -> None:
    # As NeMo: every .yml/.yaml under the folder counts (subfolders and hidden files too, see
    # test_config_folders.py); .railsignore excludes by file name; other suffixes are not config.
    (tmp_path / "a.yml").write_text("models:\n  - {type: a, engine: openai, model: m}\n")
    (tmp_path / "config.yml").write_text(MODELS)
    (tmp_path / "notes.txt").write_text("not: [valid")
    (tmp_path / ".railsignore").write_text(".hidden.yml\n")
    (tmp_path / ".hidden.yml").write_text("not: [valid")
    assert RailsConfig.from_path(tmp_path).model_types == ["main", "content_safety", "a"]


def test_a_missing_path_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match=r"nope: no such file or folder"):
        RailsConfig.from_path(missing)


def test_a_folder_without_yaml_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no config.yml \(or other .yml/.yaml file\) in this folder"):
        RailsConfig.from_path(tmp_path)


def test_invalid_yaml_in_a_file_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "config.yml"
    path.write_text("models:\n  - type: main\n   engine: nim\n")
    with pytest.raises(ConfigError) as info:
        RailsConfig.from_path(path)
    assert str(info.value).startswith(f"{path}: line 3, column 4: invalid YAML: ")


def test_an_empty_file_is_an_empty_config(tmp_path: Path) -> None:
    (tmp_path / "config.yml").write_text("# nothing yet\n")
    config = RailsConfig.from_path(tmp_path)
    assert config.models == [] and config.rails.input.flows == []
    assert [p.task for p in config.prompts] == [p.task for p in default_prompts()]


def test_nemo_settings_are_ignored_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    text = (
        MODELS
        + RAILS
        + "  dialog:\n    single_call: {enabled: false}\n"
        + "  config:\n    jailbreak_detection: {}\n    sensitive_data_detection: {input: {}}\n"
        + "instructions:\n  - type: general\n    content: Be nice.\n"
        + 'sample_conversation: |\n  user "hi"\n'
        + "lowest_temperature: 0.1\ncolang_version: '1.0'\nstreaming: true\n"
    )
    with caplog.at_level(logging.WARNING, logger="guardcache.config"):
        config = RailsConfig.from_content(text, source="config.yml")
    # instructions and sample_conversation are no longer ignored: templates read them as NeMo's
    # {{ general_instructions }} and {{ sample_conversation }} (test_config_nemo_surface.py).
    assert config.ignored_keys == (
        "colang_version",
        "lowest_temperature",
        "rails.config.sensitive_data_detection",
        "rails.dialog",
        "streaming",
    )
    assert config.sample_conversation == 'user "hi"\n'
    assert config.template_settings()["general_instructions"] == "Be nice."
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].getMessage() == (
        "config.yml: ignoring NeMo Guardrails settings that guardcache does not use: "
        "colang_version, lowest_temperature, rails.config.sensitive_data_detection, "
        "rails.dialog, streaming"
    )


def test_a_config_without_nemo_settings_logs_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="guardcache.config"):
        RailsConfig.from_content(MODELS + RAILS)
    assert caplog.records == []


def test_colang_files_are_refused_naming_the_file_and_its_flows(tmp_path: Path) -> None:
    # Rails declared in Colang would not run: loading must fail, never run with fewer rails.
    (tmp_path / "config.yml").write_text(MODELS)
    (tmp_path / "rails.co").write_text("define flow check blocked words\n  $x = 1\n")
    (tmp_path / "main.co").write_text("import guardrails\nflow input rails $input_text\n  pass\n")
    with pytest.raises(ConfigError) as info:
        RailsConfig.from_path(tmp_path)
    message = str(info.value)
    assert "main.co (flows: input rails $input_text)" in message
    assert "rails.co (flows: check blocked words)" in message
    assert str(tmp_path) in message


@pytest.mark.parametrize("version", ["2.x", "2.0", 2])
def test_a_colang_2_config_is_refused(version: object) -> None:
    with pytest.raises(ConfigError, match=r"config.yml: colang_version: .*Colang 2"):
        RailsConfig.from_content(MODELS + RAILS + f"colang_version: {version!r}\n", source="config.yml")


def test_from_content_takes_prompts_as_yaml_text_or_list() -> None:
    from_text = RailsConfig.from_content(MODELS + RAILS, prompts=INPUT_PROMPT)
    from_list_text = RailsConfig.from_content(
        MODELS + RAILS, prompts=textwrap.dedent(INPUT_PROMPT.removeprefix("prompts:\n"))
    )
    raw = {
        "task": "content_safety_check_input $model=content_safety",
        "content": "Is this safe? {{ user_input }}",
        "output_parser": "nemoguard_parse_prompt_safety",
        "max_tokens": 20,
    }
    from_list = RailsConfig.from_content(MODELS + RAILS, prompts=[raw])
    prompts = [
        c.prompt_for("content_safety_check_input $model=content_safety")
        for c in (from_text, from_list_text, from_list)
    ]
    assert prompts[0] == prompts[1] == prompts[2]


def test_from_content_names_the_prompts_source_in_errors() -> None:
    with pytest.raises(ConfigError) as info:
        RailsConfig.from_content(MODELS, prompts=[{"task": "x", "content": "a", "max_tokens": -5}])
    assert str(info.value) == "<prompts>: prompts[0].max_tokens: must be greater than 0 (got -5)"


def test_config_yml_example_loads_every_option() -> None:
    config = RailsConfig.from_path(REPO / "config.yml.example")
    guard = config.model("content_safety")
    assert guard.cache.enabled and guard.cache.maxsize == 50000 and guard.cache.store == "memory"
    assert guard.cache.stats.enabled and guard.cache.stats.log_interval == 60.0
    assert guard.cache.redis is not None and guard.cache.redis.pool_size == 16
    assert guard.api_key_env_var == "NVIDIA_API_KEY"
    assert config.rails.input.on_error == "block" and config.rails.output.flows
    assert config.ignored_keys == ()


def test_nemo_content_safety_example_loads_unchanged(caplog: pytest.LogCaptureFixture) -> None:
    folder = REPO / "examples" / "nemo_content_safety"
    with caplog.at_level(logging.WARNING, logger="guardcache.config"):
        config = RailsConfig.from_path(folder)
    assert config.model_types == ["main", "content_safety"]
    assert config.model("content_safety").engine == "nim"
    assert config.model("content_safety").base_url == "https://integrate.api.nvidia.com/v1"
    assert [r.text for r in config.rails.input.flow_refs()] == [
        "content safety check input $model=content_safety"
    ]
    assert [r.text for r in config.rails.output.flow_refs()] == [
        "content safety check output $model=content_safety"
    ]
    # Its prompts.yml is NeMo's: the same templates as the package defaults, so the same cache keys.
    for default in default_prompts():
        assert fingerprint(config.prompt_for(default.task)) == fingerprint(default)
    assert config.ignored_keys == ("streaming",)  # rails.output.streaming is used
    assert config.rails.output.streaming.enabled
    assert len(caplog.records) == 1


def test_a_dumped_config_validates_back_to_the_same_prompts() -> None:
    config = RailsConfig.from_content(MODELS + RAILS, prompts=INPUT_PROMPT)
    again = RailsConfig.model_validate(config.model_dump())
    assert again.prompts == config.prompts and again.models == config.models
