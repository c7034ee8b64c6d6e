"""EmulatorConfig: defaults, validation naming the field, files naming the file."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from guardcache.emulator import EmulatorConfig, FaultConfig, KVCacheConfig, LatencyConfig
from guardcache.errors import ConfigError


def test_defaults_model_a_nim_like_backend() -> None:
    cfg = EmulatorConfig()
    assert cfg.host == "127.0.0.1"
    assert cfg.kv_cache.block_size == 64 and cfg.kv_cache.reuse == "early"
    assert cfg.latency.time_scale == 1.0 and cfg.latency.max_running == 64
    assert cfg.trailing_space is True
    assert cfg.faults.error_rate == 0.0


def test_configs_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        EmulatorConfig().port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("factory", "field"),
    [
        (lambda: LatencyConfig(time_scale=-1), "time_scale"),
        (lambda: LatencyConfig(max_running=0), "max_running"),
        (lambda: LatencyConfig(decode_base_ms=float("nan")), "decode_base_ms"),
        (lambda: KVCacheConfig(block_size=48), "block_size"),
        (lambda: KVCacheConfig(reuse="sometimes"), "reuse"),  # type: ignore[arg-type]
        (lambda: KVCacheConfig(capacity_tokens=-5), "capacity_tokens"),
        (lambda: FaultConfig(error_rate=1.5), "error_rate"),
        (lambda: FaultConfig(drop_rate=-0.1), "drop_rate"),
        (lambda: FaultConfig(error_rate=0.6, hang_rate=0.6), "sum"),
        (lambda: FaultConfig(retry_after_seconds=-1), "retry_after_seconds"),
        (lambda: EmulatorConfig(port=70000), "port"),
        (lambda: EmulatorConfig(cached_tokens_field="sometimes"), "cached_tokens_field"),  # type: ignore[arg-type]
        (lambda: EmulatorConfig(api_key=""), "api_key"),
        (lambda: EmulatorConfig(chars_per_token=0), "chars_per_token"),
        (lambda: EmulatorConfig(max_model_len=-1), "max_model_len"),
        (lambda: EmulatorConfig(max_body_bytes=1.5), "max_body_bytes"),  # type: ignore[arg-type]
        (lambda: FaultConfig(duplicate_key_rate=2.0), "duplicate_key_rate"),
        (lambda: FaultConfig(duplicate_key_rate=0.5, drop_rate=0.6), "sum"),
        (lambda: LatencyConfig(classify_ms_per_token=-1), "classify_ms_per_token"),
    ],
)
def test_invalid_values_raise_a_value_error_naming_the_field(factory: Any, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        factory()


def test_dict_round_trip_and_merge_keep_other_fields() -> None:
    cfg = EmulatorConfig(api_key="k", kv_cache=KVCacheConfig(block_size=16))
    assert EmulatorConfig.from_dict(cfg.to_dict()) == cfg
    merged = cfg.merged(latency={"time_scale": 0}, port=0)
    assert merged.latency.time_scale == 0
    assert merged.latency.decode_base_ms == cfg.latency.decode_base_ms
    assert merged.kv_cache.block_size == 16 and merged.api_key == "k"


def test_limits_default_to_a_nims_context_window_and_a_1_mib_body() -> None:
    cfg = EmulatorConfig()
    assert (cfg.max_model_len, cfg.max_body_bytes) == (8192, 1_048_576)
    assert EmulatorConfig(max_model_len=0, max_body_bytes=0).max_model_len == 0  # 0 = no limit


def test_unknown_fields_are_rejected_with_the_known_ones_listed() -> None:
    with pytest.raises(ConfigError, match="time_scal"):
        EmulatorConfig.from_dict({"latency": {"time_scal": 0}})


def test_from_file_reads_yaml_and_json(tmp_path: Path) -> None:
    yml = tmp_path / "emu.yml"
    yml.write_text("port: 9000\nkv_cache:\n  reuse: after_finish\n", encoding="utf-8")
    js = tmp_path / "emu.json"
    js.write_text('{"faults": {"error_rate": 0.1, "seed": 7}}', encoding="utf-8")
    assert EmulatorConfig.from_file(yml).kv_cache.reuse == "after_finish"
    assert EmulatorConfig.from_file(js).faults.seed == 7


@pytest.mark.parametrize("content", ["port: [", "kv_cache:\n  block_size: 7\n", "bogus: 1\n"])
def test_file_errors_name_the_file(tmp_path: Path, content: str) -> None:
    path = tmp_path / "emu.yml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"emu\.yml"):
        EmulatorConfig.from_file(path)
