"""``guardcache emulate``: flags map onto EmulatorConfig, --help explains every knob."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pytest

from guardcache.emulator import cli

KNOBS = [
    "--port",
    "--host",
    "--block-size",
    "--kv-capacity-tokens",
    "--reuse",
    "--time-scale",
    "--policy",
    "--error-rate",
    "--rate-limit-rate",
    "--hang-rate",
    "--malformed-rate",
    "--drop-rate",
    "--seed",
    "--cached-tokens-field",
    "--api-key",
    "--model",
    "--max-model-len",
    "--max-body-bytes",
    "--duplicate-key-rate",
]


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="guardcache")
    cli.register(root.add_subparsers(dest="command"))
    return root


def test_emulate_is_registered_with_run_as_its_function() -> None:
    args = parser().parse_args(["emulate"])
    assert args.func is cli.run


def test_help_explains_every_knob(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["emulate", "--help"])
    text = capsys.readouterr().out
    for knob in KNOBS:
        assert knob in text


def test_flags_build_the_config() -> None:
    args = parser().parse_args(
        shlex.split(
            "emulate --port 0 --block-size 16 --kv-capacity-tokens 4096 --reuse after_finish "
            "--time-scale 0.5 --error-rate 0.01 --rate-limit-rate 0.02 --hang-rate 0.03 "
            "--malformed-rate 0.04 --drop-rate 0.05 --seed 5 --cached-tokens-field nonzero "
            "--api-key k --model my-model --no-trailing-space"
        )
    )
    cfg = cli.build_config(args)
    assert cfg.port == 0 and cfg.model == "my-model" and cfg.api_key == "k"
    assert (cfg.kv_cache.block_size, cfg.kv_cache.capacity_tokens, cfg.kv_cache.reuse) == (
        16,
        4096,
        "after_finish",
    )
    assert cfg.latency.time_scale == 0.5
    f = cfg.faults
    assert (f.error_rate, f.rate_limit_rate, f.hang_rate, f.malformed_rate, f.drop_rate, f.seed) == (
        0.01,
        0.02,
        0.03,
        0.04,
        0.05,
        5,
    )
    assert cfg.cached_tokens_field == "nonzero" and cfg.trailing_space is False


def test_limit_and_duplicate_key_flags_build_the_config() -> None:
    args = parser().parse_args(
        shlex.split("emulate --max-model-len 4096 --max-body-bytes 0 --duplicate-key-rate 0.25")
    )
    cfg = cli.build_config(args)
    assert (cfg.max_model_len, cfg.max_body_bytes, cfg.faults.duplicate_key_rate) == (4096, 0, 0.25)


def test_help_lists_every_guard_format(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["emulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in ("Llama Guard", "Nemotron", "ShieldGemma", "self check", "topic control", "classify"):
        assert name in text


def test_default_port_is_where_the_example_configs_expect_content_safety() -> None:
    # 8001, not 8000: the example configs' main model is at 8000 (and guardcache serve at 8080).
    assert cli.build_config(parser().parse_args(["emulate"])).port == cli.DEFAULT_PORT == 8001


def test_flags_override_a_config_file(tmp_path: Path) -> None:
    path = tmp_path / "emu.yml"
    path.write_text("port: 9100\nlatency:\n  time_scale: 0\n  max_running: 3\n", encoding="utf-8")
    cfg = cli.build_config(parser().parse_args(["emulate", "--config", str(path), "--max-running", "7"]))
    assert cfg.port == 9100 and cfg.latency.time_scale == 0 and cfg.latency.max_running == 7


def test_bad_values_exit_2_with_the_field_named(capsys: pytest.CaptureFixture[str]) -> None:
    args = parser().parse_args(["emulate", "--error-rate", "3"])
    assert cli.run(args) == 2
    assert "error_rate" in capsys.readouterr().err


def test_a_broken_policy_file_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "bad.yml"
    policy.write_text("Violence: [unclosed", encoding="utf-8")
    assert cli.run(parser().parse_args(["emulate", "--policy", str(policy)])) == 2
    assert "bad.yml" in capsys.readouterr().err
