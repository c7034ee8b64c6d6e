"""Config loading is bounded: no config, however written, makes guardcache hang or exhaust memory.

Platforms load configs they did not write (per-tenant configs, a config store, ``guardcache serve
--config`` over a shared folder), and ``RailsConfig.from_content`` is public API. Each bad config
below is a ``ConfigError`` naming the file and the limit, refused by a counted bound (aliases
expanded, nesting, bytes, entries) before the expensive work. Time and memory are asserted with
generous bounds (a loaded 2-core CI must not fail them); the figures measured on a quiet machine are
in CHANGELOG.md (issue 29): each case takes milliseconds and well under 1 MB.

Also here, in one place: every kind of path a config folder must not hold (a symbolic-link loop, a
FIFO, a device, a binary file), the limits' defaults (docs/configuration.md), tighter limits, and
the commands (``guardcache check``, ``cache``, ``serve``) and serve's folders of configs, which load
through the same reader.
"""

from __future__ import annotations

import os
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from guardcache import cli
from guardcache.config import DEFAULT_LIMITS, ConfigLimits, RailsConfig
from guardcache.config.files import (
    MAX_DEPTH,
    MAX_ENTRIES,
    MAX_FILE_BYTES,
    MAX_TOTAL_BYTES,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    parse_yaml,
)
from guardcache.emulator.config import EmulatorConfig
from guardcache.emulator.policy import Policy
from guardcache.errors import ConfigError
from guardcache.server import settings as serve_settings
from guardcache.server.settings import load_configs

SECONDS = 10.0
"""The generous bound on a refusal's time (each takes milliseconds: see the module docstring)."""
EXTRA_BYTES = 100 * 1024 * 1024
"""The bound on a refusal's extra memory (tracemalloc's peak above what was allocated before)."""

VALID = """\
models:
  - type: main
    engine: openai
    model: gpt-4o-mini
"""


def alias_bomb() -> str:
    """Nine anchors, each a list of nine aliases of the one before (the first of nine strings):
    ~350 bytes, 9**9 strings once expanded (43 million nodes at the eighth anchor)."""
    lines = [VALID.rstrip("\n"), "lol: &a0 [" + ", ".join(['"lol"'] * 9) + "]"]
    for i in range(1, 9):
        lines.append(f"lol{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def nested(levels: int) -> str:
    """A mapping nested ``levels`` deep, under a key of the config."""
    return VALID + "".join("  " * i + f"k{i}:\n" for i in range(levels)) + "  " * levels + "leaf: 1\n"


@dataclass
class Measured:
    error: ConfigError
    seconds: float
    extra_bytes: int  # tracemalloc's peak during the call, above the memory in use before it


@contextmanager
def traced() -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


def refused(load: Callable[[], object]) -> Measured:
    """Run ``load``, which must raise a ConfigError, and measure its time and extra memory."""
    with traced():
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        started = time.perf_counter()
        with pytest.raises(ConfigError) as info:
            load()
        seconds = time.perf_counter() - started
        extra = tracemalloc.get_traced_memory()[1] - base
    measured = Measured(info.value, seconds, extra)
    print(f"refused in {seconds * 1000:.1f} ms, {extra / 1024:.0f} KB extra: {info.value}")
    assert measured.seconds < SECONDS and measured.extra_bytes < EXTRA_BYTES, measured
    return measured


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# -- the four bad configs of the issue -------------------------------------------------------------


def test_an_alias_bomb_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    bomb = alias_bomb()
    assert len(bomb) < 1024
    found = refused(lambda: RailsConfig.from_content(yaml_content=bomb, source="tenant.yml"))
    message = str(found.error)
    assert message.startswith("tenant.yml: line ")
    assert f"more than {MAX_YAML_NODES} YAML nodes" in message and "aliases expanded" in message
    # From a file, the same (the file named, with the line).
    path = write(tmp_path / "config.yml", bomb)
    assert str(refused(lambda: RailsConfig.from_path(tmp_path)).error).startswith(f"{path}: line ")


def test_a_merge_key_bomb_is_refused_too() -> None:
    # `<<: [*a, *a, ...]` makes PyYAML copy the merged pairs: 9**n pairs, built before any check.
    lines = [VALID.rstrip("\n"), "m0: &m0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9}"]
    for i in range(1, 9):
        lines.append(f"m{i}: &m{i} {{<<: [" + ", ".join([f"*m{i - 1}"] * 9) + "]}")
    found = refused(lambda: RailsConfig.from_content("\n".join(lines) + "\n"))
    assert f"more than {MAX_YAML_NODES} YAML nodes" in str(found.error)


def test_a_64_level_nested_mapping_is_refused_at_the_depth_limit(tmp_path: Path) -> None:
    found = refused(lambda: RailsConfig.from_content(nested(64), source="deep.yml"))
    # The top-level mapping is level 1; level n starts on line 4 + n (VALID is 4 lines).
    assert str(found.error).startswith(f"deep.yml: line {4 + MAX_YAML_DEPTH + 1}, column ")
    assert f"mappings and lists nested more than {MAX_YAML_DEPTH} levels deep" in str(found.error)
    # A flow collection that deep too, and one 100,000 deep (PyYAML's composer recurses: without
    # the limit, a RecursionError and a traceback).
    refused(lambda: RailsConfig.from_content(VALID + "x: " + "[" * 64 + "]" * 64 + "\n"))
    deep = refused(lambda: RailsConfig.from_content(VALID + "x: " + "[" * 100_000 + "\n"))
    assert "nested more than" in str(deep.error)
    # At the limit: accepted by the reader (the config then says the key is unknown).
    parse_yaml("x: " + "[" * (MAX_YAML_DEPTH - 1) + "]" * (MAX_YAML_DEPTH - 1) + "\n", "ok.yml")


def test_a_50_mb_yaml_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "config.yml"
    line = b"  - {type: main, engine: openai, model: gpt-4o-mini}\n"
    with path.open("wb") as f:
        f.write(b"models:\n")
        f.write(line * (50 * 1024 * 1024 // len(line)))
    size = path.stat().st_size
    found = refused(lambda: RailsConfig.from_path(tmp_path))
    assert str(found.error) == (
        f"{path}: 50 MB ({size} bytes), over the 1 MB limit for a config file (config files are a few "
        "KB; is this the right file?)"
    )
    # The same text given to from_content: refused by its length, before it is encoded or parsed.
    text = path.read_text(encoding="utf-8")
    found = refused(lambda: RailsConfig.from_content(text, source="big.yml"))
    assert str(found.error).startswith("big.yml: 50 MB (") and "over the 1 MB limit" in str(found.error)
    assert found.extra_bytes < 1024 * 1024


def test_10000_files_in_a_config_folder_are_refused_while_listing(tmp_path: Path) -> None:
    write(tmp_path / "config.yml", VALID)
    many = tmp_path / "many"
    many.mkdir()
    for i in range(10_000):
        (many / f"{i:05}.md").touch()
    found = refused(lambda: RailsConfig.from_path(tmp_path))
    assert str(found.error) == (
        f"{tmp_path}: more than {MAX_ENTRIES} files and folders under the config folder (the limit "
        f"for a config folder, reached while listing {many}); is this the right folder? (NeMo "
        "Guardrails would walk them all: keep a config in a folder of its own)"
    )


# -- more ways to write a config that would not load cheaply ---------------------------------------


def test_a_recursive_alias_is_refused() -> None:
    found = refused(lambda: RailsConfig.from_content(VALID + "x: &loop [1, *loop]\n", source="r.yml"))
    assert str(found.error) == (
        "r.yml: line 5, column 14: a recursive alias: *loop is part of the node &loop names, so it "
        "would expand forever (a config is a tree)"
    )


def test_the_nodes_of_a_load_are_counted_over_all_its_files(tmp_path: Path) -> None:
    # Each file under the limit, together over it: the budget is the load's, not a file's.
    write(tmp_path / "config.yml", VALID)
    half = "x: [" + ", ".join(["1"] * 30) + "]\n"
    write(tmp_path / "a.yml", half.replace("x:", "a:"))
    write(tmp_path / "b.yml", half.replace("x:", "b:"))
    with pytest.raises(ConfigError) as info:
        RailsConfig.from_path(tmp_path, limits=ConfigLimits(yaml_nodes=60))
    assert str(info.value).startswith(f"{tmp_path / 'b.yml'}: line 1, column ")
    assert "more than 60 YAML nodes" in str(info.value)


def test_a_folder_whose_files_come_to_more_than_the_total_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "config.yml", VALID)
    filler = "#" * (MAX_FILE_BYTES - 1) + "\n"  # comments: each file at the file limit, valid YAML
    for name in "abcd":
        write(tmp_path / f"{name}.yml", filler)
    over = tmp_path / "d.yml"
    found = refused(lambda: RailsConfig.from_path(tmp_path))
    assert str(found.error).startswith(f"{over}: 1 MB more would bring this config's files to 4 MB (")
    assert "over the 4 MB limit for one config's files together" in str(found.error)
    # from_content counts its two texts together as well.
    with pytest.raises(ConfigError, match=r"^<prompts>: .* over the 1 KB limit for one config's files"):
        RailsConfig.from_content(
            VALID, prompts="# " + "x" * 1000 + "\n", limits=ConfigLimits(total_bytes=1024)
        )


def test_colang_files_count_toward_the_total(tmp_path: Path) -> None:
    write(tmp_path / "config.yml", VALID)
    for i in range(3):
        write(tmp_path / "rails" / f"{i}.co", "# " + "x" * 600 + "\n")
    with pytest.raises(ConfigError, match=r"rails/1\.co: .* over the 1 KB limit for one config's files"):
        RailsConfig.from_path(tmp_path, limits=ConfigLimits(total_bytes=1024))


# -- what a config folder must not hold: checked in one place --------------------------------------


def _loop(folder: Path) -> Path:
    (folder / "rails").mkdir()
    os.symlink(folder, folder / "rails" / "back")
    return folder / "rails" / "back"


def _fifo(folder: Path) -> Path:
    os.mkfifo(folder / "notes.pipe")  # not even a config file name: a FIFO is an error anywhere
    return folder / "notes.pipe"


def _device(folder: Path) -> Path:
    os.symlink("/dev/zero", folder / "zero.yml")  # a device that never ends
    return folder / "zero.yml"


def _device_folder(folder: Path) -> Path:
    os.symlink("/dev", folder / "devices")  # a link to a folder of devices
    return folder / "devices"


def _binary(folder: Path) -> Path:
    return write(folder / "logo.yml", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX only")
@pytest.mark.parametrize(
    ("make", "problem"),
    [
        pytest.param(_loop, "a symbolic link loop: this folder is ", id="symlink-loop"),
        pytest.param(_fifo, "a FIFO (named pipe) in a config folder, which holds files", id="fifo"),
        pytest.param(_device, "a device in a config folder, which holds files and folders", id="device"),
        # /dev holds devices, and FIFOs (/dev/stderr under a test runner): whichever is met first.
        pytest.param(_device_folder, " in a config folder, which holds files", id="device-folder"),
        pytest.param(_binary, "binary data (a NUL byte at offset 8), not a text config file", id="binary"),
    ],
)
def test_a_folder_holding_what_no_config_holds_is_a_clear_error(
    tmp_path: Path, make: Callable[[Path], Path], problem: str
) -> None:
    folder = tmp_path / "config"
    write(folder / "config.yml", VALID)
    bad = make(folder)
    message = str(refused(lambda: RailsConfig.from_path(folder)).error)
    assert message.startswith(str(bad)) and problem in message, message


# -- the limits ------------------------------------------------------------------------------------


def test_the_limits_have_the_documented_defaults() -> None:
    # docs/configuration.md, "Limits of a config", lists these.
    assert (
        ConfigLimits(
            file_bytes=1024 * 1024,
            total_bytes=4 * 1024 * 1024,
            entries=1_000,
            folder_depth=32,
            yaml_depth=32,
            yaml_nodes=20_000,
        )
        == DEFAULT_LIMITS
    )
    assert (
        DEFAULT_LIMITS.file_bytes,
        DEFAULT_LIMITS.total_bytes,
        DEFAULT_LIMITS.entries,
        DEFAULT_LIMITS.folder_depth,
    ) == (MAX_FILE_BYTES, MAX_TOTAL_BYTES, MAX_ENTRIES, MAX_DEPTH)
    assert (DEFAULT_LIMITS.yaml_depth, DEFAULT_LIMITS.yaml_nodes) == (MAX_YAML_DEPTH, MAX_YAML_NODES)
    assert serve_settings.MAX_CONFIGS_BYTES == 64 * 1024 * 1024
    docs = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")
    for name in ("file_bytes", "total_bytes", "entries", "folder_depth", "yaml_depth", "yaml_nodes"):
        assert f"`{name}`" in docs, name


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "10"])
def test_a_limit_must_be_a_positive_integer(value: object) -> None:
    with pytest.raises(ValueError, match=r"ConfigLimits\.entries must be a positive integer"):
        ConfigLimits(entries=value)  # type: ignore[arg-type]


def test_tighter_limits_refuse_what_the_defaults_accept(tmp_path: Path) -> None:
    write(tmp_path / "config.yml", VALID)
    assert RailsConfig.from_path(tmp_path).model_types == ["main"]
    with pytest.raises(ConfigError, match=r"over the 0\.1 KB limit for a config file"):
        RailsConfig.from_path(tmp_path, limits=ConfigLimits(file_bytes=64))
    with pytest.raises(ConfigError, match=r"more than 3 YAML nodes"):
        RailsConfig.from_content(VALID, limits=ConfigLimits(yaml_nodes=3))
    with pytest.raises(ConfigError, match=r"nested more than 2 levels deep"):
        RailsConfig.from_content(VALID, limits=ConfigLimits(yaml_depth=2))


def test_a_config_says_how_many_bytes_it_read(tmp_path: Path) -> None:
    write(tmp_path / "config.yml", VALID)
    assert RailsConfig.from_path(tmp_path).loaded_bytes == len(VALID)
    assert RailsConfig.from_content(VALID, prompts="prompts: []\n").loaded_bytes == len(VALID) + 12


# -- every command, and serve's folders of configs, read through the same bounds ----------------


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--config", "{config}", "hello"],
        ["cache", "stats", "--config", "{config}"],
        ["serve", "--config", "{config}", "--port", "0"],
    ],
    ids=["check", "cache", "serve"],
)
def test_each_command_refuses_a_bomb_with_exit_2_and_the_file(
    tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "config.yml", alias_bomb())
    started = time.perf_counter()
    assert cli.main([a.replace("{config}", str(tmp_path)) for a in args]) == 2
    assert time.perf_counter() - started < SECONDS
    err = capsys.readouterr().err
    assert f"{path}: line " in err and f"more than {MAX_YAML_NODES} YAML nodes" in err, err


def test_serve_refuses_a_folder_of_configs_with_too_many_entries(tmp_path: Path) -> None:
    for i in range(20):
        write(tmp_path / f"tenant{i}" / "config.yml", VALID)
    assert sorted(load_configs(tmp_path)) == sorted(f"tenant{i}" for i in range(20))
    with pytest.raises(ConfigError) as info:
        load_configs(tmp_path, limits=ConfigLimits(entries=10))
    assert str(info.value) == (
        f"--config {tmp_path}: more than 10 files and folders in the folder of configs (the limit for "
        "a config folder); is this the right folder?"
    )


def test_serve_refuses_configs_that_read_too_much_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        write(tmp_path / f"tenant{i}" / "config.yml", VALID)
    monkeypatch.setattr(serve_settings, "MAX_CONFIGS_BYTES", 2 * len(VALID))
    with pytest.raises(ConfigError) as info:
        load_configs(tmp_path)
    assert str(info.value).startswith(f"--config {tmp_path}: its configs read more than ")
    assert f"when {tmp_path / 'tenant2'} was loaded; the limit for a folder of configs" in str(info.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX only")
def test_serve_names_a_config_file_that_is_a_fifo_instead_of_skipping_its_config(tmp_path: Path) -> None:
    write(tmp_path / "good" / "config.yml", VALID)
    (tmp_path / "piped").mkdir()
    os.mkfifo(tmp_path / "piped" / "config.yml")
    message = str(refused(lambda: load_configs(tmp_path)).error)
    assert message.startswith(f"{tmp_path / 'piped' / 'config.yml'}: a FIFO (named pipe)")
    os.mkfifo(tmp_path / "fifo")
    assert str(refused(lambda: load_configs(tmp_path / "fifo")).error).startswith(
        f"{tmp_path / 'fifo'}: a FIFO (named pipe), not a config folder or file"
    )


def test_the_emulator_reads_its_files_through_the_same_bounds(tmp_path: Path) -> None:
    bomb = alias_bomb().replace(VALID, "")
    config = write(tmp_path / "emulator.yml", bomb)
    found = refused(lambda: EmulatorConfig.from_file(config))
    assert f"more than {MAX_YAML_NODES} YAML nodes" in str(found.error)
    policy = write(tmp_path / "policy.yml", bomb)
    message = str(refused(lambda: Policy.from_file(policy)).error)
    assert message.startswith(f"{policy}: invalid policy syntax: line ") and "YAML nodes" in message
