"""One convention across ``guardcache`` commands: exit 0 done, 1 a negative result (or a failure at
run time), 2 a usage or config error; and a command whose optional extra is missing answers any
arguments with the install hint (exit 2), never argparse's "unrecognized arguments"."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types
from pathlib import Path

import pytest

from guardcache import cli
from guardcache.emulator import cli as emulate_cli
from guardcache.server import cli as serve_cli


@pytest.fixture
def without_server_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Imports of ``guardcache.server.cli`` fail as they do with only the core installed (its
    package imports starlette first)."""
    real = importlib.import_module

    def import_module(name: str, package: str | None = None) -> types.ModuleType:
        if name == "guardcache.server.cli":
            raise ModuleNotFoundError("No module named 'starlette'", name="starlette")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", import_module)  # what guardcache.cli calls


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--config", "x", "--port", "8080"],
        ["serve", "--config=x", "--workers", "2", "extra-positional"],
        ["serve", "--help"],
        ["serve", "-h"],
        ["serve"],
        ["-v", "serve", "--config", "x"],
    ],
)
def test_a_command_without_its_extra_says_what_to_install_for_any_arguments(
    without_server_extra: None, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "pip install 'guardcache[server]'" in err and "starlette" in err
    assert "unrecognized arguments" not in err


CORE_ONLY = """
import sys
from importlib.abc import MetaPathFinder


class CoreOnly(MetaPathFinder):  # what an install without extras cannot import
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("starlette", "uvicorn", "prometheus_client", "orjson", "uvloop", "redis"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, CoreOnly())
from guardcache.cli import main

sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (["serve", "--config", "x", "--port", "8080"], "server"),
        (["emulate", "--port", "8001", "--time-scale", "0"], "server"),
        (["demo", "--turns", "5"], "server"),
        (["cache", "stats", "--config", "x"], "redis"),
    ],
)
def test_with_only_the_core_installed_each_command_names_its_extra(args: list[str], extra: str) -> None:
    """The real import chain of each command, in a process where the extras' packages are missing."""
    proc = subprocess.run(
        [sys.executable, "-c", CORE_ONLY, *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, proc.stderr
    assert f"pip install 'guardcache[{extra}]'" in proc.stderr and "unrecognized" not in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_command_list_names_the_extra_a_missing_command_needs(
    without_server_extra: None, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0
    assert "(unavailable: pip install 'guardcache[server]')" in " ".join(capsys.readouterr().out.split())


def test_each_extra_is_named_for_its_commands() -> None:
    missing = ModuleNotFoundError("No module named 'x'", name="x")
    assert "'guardcache[redis]'" in cli.install_hint("cache", missing)
    for name in ("serve", "emulate", "demo"):
        assert "'guardcache[server]'" in cli.install_hint(name, missing)


def test_an_installed_command_still_refuses_unknown_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["check", "--config", "x", "--bogus", "hello"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args",
    [
        ["cache"],  # no action
        ["cache", "clear", "--config", "{config}"],  # neither --model nor --all
        ["cache", "clear", "--config", "{config}", "--model", "content_safety", "--all"],
        ["cache", "stats", "--config", "{missing}"],  # a config that does not load
        ["cache", "stats", "--config", "{config}", "--model", "nope"],  # no such redis-backed model
    ],
)
def test_cache_usage_and_config_errors_exit_2_before_any_redis_call(
    tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yml"
    config.write_text(
        "models:\n"
        "  - type: content_safety\n"
        "    engine: nim\n"
        "    model: nvidia/llama-3.1-nemoguard-8b-content-safety\n"
        "    parameters: {base_url: http://127.0.0.1:1/v1}\n"
        "    cache: {store: redis, redis: {url: 'redis://127.0.0.1:1/0'}}\n"
        "rails:\n"
        "  input: {flows: [content safety check input $model=content_safety]}\n",
        encoding="utf-8",
    )
    argv = [a.format(config=config, missing=tmp_path / "nowhere") for a in args]
    assert cli.main(argv) == 2
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "args",
    [
        ["demo", "--turns", "0"],
        ["demo", "--concurrency", "0"],
        ["demo", "--unique", "1.5"],
        ["demo", "--time-scale", "-1"],
        ["demo", "--log-interval", "0"],
        ["emulate", "--bogus"],
        ["serve"],  # --config is required
    ],
)
def test_bad_flags_exit_2_with_a_message_not_a_traceback(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(args)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


def test_an_emulator_config_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["emulate", "--config-json", "{not json"]) == 2
    assert "guardcache emulate: --config-json is not valid JSON" in capsys.readouterr().err


def test_emulate_and_serve_default_to_distinct_ports_beside_the_example_main_model() -> None:
    """The example configs put the main model on 8000 and content safety on 8001: the emulator
    stands in for content safety (and, echoing, a main model) on 8001; the server takes 8080."""
    args = cli.build_parser().parse_args(["serve", "--config", "x"])
    assert args.port == serve_cli.DEFAULT_PORT == 8080
    assert emulate_cli.DEFAULT_PORT == 8001
    examples = Path(__file__).resolve().parents[2] / "examples"
    minimal = (examples / "minimal_app" / "config.yml").read_text(encoding="utf-8")
    assert "localhost:8000/v1" in minimal and "localhost:8001/v1" in minimal
    quickstart = (examples / "quickstart" / "config" / "config.yml").read_text(encoding="utf-8")
    assert quickstart.count(f"127.0.0.1:{emulate_cli.DEFAULT_PORT}/v1") == 2  # main and content safety
