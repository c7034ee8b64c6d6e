"""Config folders read as NeMo Guardrails reads them: subfolders, .railsignore, hidden files, the
knowledge base, Colang anywhere refused, and bad input (loops, FIFOs, huge or binary files) refused
with an error naming the path.

NeMo's behaviour matched here is ``_load_path`` in ``nemoguardrails/rails/llm/config.py`` (an
``os.walk(followlinks=True)`` of the folder, ``.yml``/``.yaml`` merged, ``.co`` parsed, paths starting
with ``kb`` read as documents) and ``get_railsignore_path``/``is_ignored_by_railsignore`` in
``nemoguardrails/utils.py`` (the first ``.railsignore`` in the folder or above, ``fnmatch`` on names).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from guardcache.config import ConfigLimits, RailsConfig
from guardcache.config.files import (
    MAX_DEPTH,
    MAX_ENTRIES,
    MAX_FILE_BYTES,
    find_config_files,
    merge_yaml,
    read_text,
)
from guardcache.errors import ConfigError

NEMO_CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_configs"

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
PROMPT = """\
prompts:
  - task: content_safety_check_input $model=content_safety
    output_parser: nemoguard_parse_prompt_safety
    max_tokens: 20
    content: "Is this safe? {{ user_input }}"
"""
COLANG_1 = """\
define user ask about cooking
  "How can I cook pasta?"

define bot refuse to respond about cooking
  "I cannot talk about cooking."

define flow check blocked terms
  user ask about cooking
  bot refuse to respond about cooking

define subflow   check   output words  # a comment
  $allowed = execute check_words
"""
COLANG_2 = """\
import guardrails

@active
flow check blocked terms $text
  pass
"""


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def refusal(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        RailsConfig.from_path(path)
    return str(info.value)


def valid_folder(root: Path) -> Path:
    write(root / "config.yml", MODELS + RAILS)
    return root


# -- Colang anywhere refuses the config ------------------------------------------------------------


def test_colang_in_a_subfolder_refuses_naming_the_file_and_its_flows(tmp_path: Path) -> None:
    # The issue: rails/disallowed.co was never read and the config ran without its topical rails.
    valid_folder(tmp_path)
    write(tmp_path / "rails" / "disallowed.co", COLANG_1)
    message = refusal(tmp_path)
    assert message.startswith(f"{tmp_path}: Colang files declare rails that guardcache does not run: ")
    assert (
        "rails/disallowed.co (flows: check blocked terms, check output words; "
        "2 user/bot message definitions)" in message
    )
    assert "guardcache does not run Colang" in message and ".railsignore" in message
    assert "fewer rails than it declares" in message


@pytest.mark.parametrize(
    "where",
    [
        "flows/main.co",
        "a/b/c/d/rails.co",
        ".hidden/rails.co",  # NeMo's os.walk skips no hidden folder
        ".rails.co",  # nor hidden file
        "x.yml/rails.co",  # a folder named x.yml is a folder (os.walk walks into it)
    ],
)
def test_a_colang_file_anywhere_refuses_the_config(tmp_path: Path, where: str) -> None:
    valid_folder(tmp_path)
    write(tmp_path / where, COLANG_2)
    assert f"{where} (flows: check blocked terms $text)" in refusal(tmp_path)


def test_a_colang_file_that_defines_only_dialog_still_refuses(tmp_path: Path) -> None:
    # NeMo example configs ship .co files with dialog flows that no rails list names: NeMo runs them.
    valid_folder(tmp_path)
    write(tmp_path / "rails" / "dialog.co", "define flow\n  user express greeting\n  bot express greeting\n")
    assert "rails/dialog.co (1 unnamed flow)" in refusal(tmp_path)


def test_a_listed_flow_defined_only_in_a_subfolder_colang_file_is_named_as_such(tmp_path: Path) -> None:
    # Before: "unknown flow 'check blocked terms'", as if it were a typo; it is a Colang rail.
    write(
        tmp_path / "config.yml",
        MODELS + RAILS + "      - check blocked terms\n  output:\n    flows: [check output words]\n",
    )
    write(tmp_path / "rails" / "blocked.co", COLANG_1)
    message = refusal(tmp_path)
    config = tmp_path / "config.yml"
    assert (
        f"{config}: rails.input.flows[1]: 'check blocked terms' is defined only in rails/blocked.co"
        in message
    )
    assert f"{config}: rails.output.flows[0]: 'check output words' is defined only in rails/blocked.co" in (
        message
    )
    assert "unknown flow" not in message


def test_a_colang_2_flow_with_arguments_matches_the_listed_name(tmp_path: Path) -> None:
    write(tmp_path / "config.yml", MODELS + "rails:\n  input:\n    flows: [check blocked terms]\n")
    write(tmp_path / "flows" / "main.co", COLANG_2)
    assert "rails.input.flows[0]: 'check blocked terms' is defined only in flows/main.co" in refusal(tmp_path)


def test_a_single_colang_file_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "rails.co", COLANG_1)
    assert "rails.co (flows: check blocked terms, check output words;" in refusal(path)


# -- a config split across subfolders --------------------------------------------------------------


def test_a_config_split_across_subfolders_is_merged(tmp_path: Path) -> None:
    write(tmp_path / "config.yml", MODELS)
    write(tmp_path / "rails" / "rails.yml", RAILS)
    write(tmp_path / "prompts" / "prompts.yml", PROMPT)
    config = RailsConfig.from_path(tmp_path)
    assert config.model_types == ["main", "content_safety"]
    assert [r.text for r in config.rails.input.flow_refs()] == [
        "content safety check input $model=content_safety"
    ]
    assert config.prompt_for("content_safety_check_input", "content_safety").content == (
        "Is this safe? {{ user_input }}"
    )


def test_an_error_in_a_subfolder_file_names_that_file(tmp_path: Path) -> None:
    write(tmp_path / "config.yml", MODELS + RAILS)
    write(tmp_path / "prompts" / "prompts.yml", PROMPT.replace("max_tokens: 20", "max_tokens: 0"))
    message = refusal(tmp_path)
    assert message == (
        f"{tmp_path / 'prompts' / 'prompts.yml'}: prompts[0].max_tokens: must be greater than 0 (got 0)"
    )


def test_one_setting_with_two_values_in_two_subfolders_names_both_files(tmp_path: Path) -> None:
    write(tmp_path / "config.yml", MODELS + RAILS)
    write(tmp_path / "a" / "input.yml", "rails:\n  input: {parallel: false}\n")
    write(tmp_path / "b" / "input.yaml", "rails:\n  input: {parallel: true}\n")
    assert refusal(tmp_path) == (
        f"{tmp_path / 'b' / 'input.yaml'}: rails.input.parallel: also set in "
        f"{tmp_path / 'a' / 'input.yml'} (false there, true here); set it in one file only"
    )


def test_files_are_read_in_a_fixed_order(tmp_path: Path) -> None:
    # config.yml first, then the folder's files by name, then each subfolder (by name) in turn.
    write(tmp_path / "config.yml", "models:\n  - {type: main, engine: openai, model: m}\n")
    write(tmp_path / "zz.yml", "models:\n  - {type: zz, engine: openai, model: m}\n")
    write(tmp_path / "b" / "x.yml", "models:\n  - {type: b, engine: openai, model: m}\n")
    write(tmp_path / "a" / "deep" / "x.yml", "models:\n  - {type: a_deep, engine: openai, model: m}\n")
    write(tmp_path / "a" / "z.yml", "models:\n  - {type: a, engine: openai, model: m}\n")
    write(tmp_path / "a.yml", "models:\n  - {type: top, engine: openai, model: m}\n")
    assert RailsConfig.from_path(tmp_path).model_types == ["main", "top", "zz", "a", "a_deep", "b"]


def test_a_symlinked_subfolder_is_followed_as_nemo_follows_it(tmp_path: Path) -> None:
    shared = write(tmp_path / "shared" / "prompts.yml", PROMPT).parent
    config = valid_folder(tmp_path / "config")
    (config / "prompts").symlink_to(shared, target_is_directory=True)
    loaded = RailsConfig.from_path(config)
    assert loaded.prompt_for("content_safety_check_input", "content_safety").max_tokens == 20


def test_only_yml_yaml_and_co_suffixes_count(tmp_path: Path) -> None:
    valid_folder(tmp_path)
    for name in ("notes.txt", "config.yml.bak", "RAILS.CO", "x.YML", "actions.py", "README.md"):
        write(tmp_path / "sub" / name, "not: [valid")
    assert RailsConfig.from_path(tmp_path).model_types == ["main", "content_safety"]


# -- .railsignore, hidden files, the knowledge base ------------------------------------------------


def test_a_railsignored_colang_file_does_not_refuse_the_config(tmp_path: Path) -> None:
    valid_folder(tmp_path)
    write(tmp_path / "rails" / "disallowed.co", COLANG_1)
    write(tmp_path / "drafts" / "broken.yml", "not: [valid")
    write(tmp_path / ".railsignore", "# NeMo skips these too\n\ndisallowed.co\n*.yml.draft\nbroken.*\n")
    assert RailsConfig.from_path(tmp_path).model_types == ["main", "content_safety"]


def test_railsignore_patterns_match_file_names_not_paths(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # NeMo compares each pattern with a file's name only: "rails/*.co" excludes nothing.
    valid_folder(tmp_path)
    write(tmp_path / "rails" / "disallowed.co", COLANG_1)
    write(tmp_path / ".railsignore", "rails/*.co\nrails/\n")
    with caplog.at_level(logging.WARNING, logger="guardcache.config"):
        assert "rails/disallowed.co (flows:" in refusal(tmp_path)
    warnings = [r.getMessage() for r in caplog.records]
    assert any("'rails/*.co' never matches" in w for w in warnings)


def test_the_nearest_railsignore_in_the_folder_or_above_applies(tmp_path: Path) -> None:
    config = valid_folder(tmp_path / "configs" / "guard")
    write(config / "rails" / "dialog.co", COLANG_1)
    write(tmp_path / ".railsignore", "*.co\n")  # above the config folder: applies
    assert RailsConfig.from_path(config).model_types == ["main", "content_safety"]
    write(tmp_path / "configs" / ".railsignore", "other.co\n")  # nearer: it alone applies
    assert "rails/dialog.co" in refusal(config)


def test_a_listed_flow_defined_in_a_railsignored_colang_file_names_that_file(tmp_path: Path) -> None:
    write(tmp_path / "config.yml", MODELS + RAILS + "      - check blocked terms\n")
    write(tmp_path / "rails" / "blocked.co", COLANG_1)
    write(tmp_path / ".railsignore", "blocked.co\n")
    message = refusal(tmp_path)
    assert message.startswith(
        f"{tmp_path / 'config.yml'}: rails.input.flows[1]: flow 'check blocked terms' is defined only "
        f"in Colang, in rails/blocked.co, which is not loaded (excluded by {tmp_path / '.railsignore'};"
    )
    assert "unknown flow" not in message


def test_hidden_yaml_files_are_read_as_nemo_reads_them(tmp_path: Path) -> None:
    valid_folder(tmp_path)
    write(tmp_path / ".extra.yml", "models:\n  - {type: hidden, engine: openai, model: m}\n")
    write(tmp_path / ".cache" / "x.yaml", "models:\n  - {type: hidden_folder, engine: openai, model: m}\n")
    assert RailsConfig.from_path(tmp_path).model_types == [
        "main",
        "content_safety",
        "hidden",
        "hidden_folder",
    ]
    # To keep a hidden file out, name it in .railsignore (NeMo then skips it too).
    write(tmp_path / ".railsignore", ".*.yml\nx.yaml\n")
    assert RailsConfig.from_path(tmp_path).model_types == ["main", "content_safety"]


def test_the_knowledge_base_is_not_config(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # NeMo reads a file whose relative path starts with "kb" as a document (.md only), never as
    # YAML or Colang: guardcache neither merges nor refuses those, and reports the documents unused.
    valid_folder(tmp_path)
    write(tmp_path / "kb" / "handbook.md", "# Handbook\n")
    write(tmp_path / "kb" / "rails.co", COLANG_1)
    write(tmp_path / "kb" / "settings.yml", "not: [valid")
    write(tmp_path / "kb_extra.yml", "not: [valid")
    with caplog.at_level(logging.WARNING, logger="guardcache.config"):
        config = RailsConfig.from_path(tmp_path)
    assert config.ignored_keys == ("kb (knowledge-base documents)",)
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "kb_extra.yml: not read" in logged and "kb/rails.co: not read" in logged


# -- bad input -------------------------------------------------------------------------------------


def test_a_symlink_loop_is_an_error_naming_it(tmp_path: Path) -> None:
    valid_folder(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "loop").symlink_to("..", target_is_directory=True)
    message = refusal(tmp_path)
    assert message.startswith(f"{tmp_path / 'sub' / 'loop'}: a symbolic link loop: this folder is {tmp_path}")


def test_a_folder_reached_twice_through_a_symlink_is_an_error(tmp_path: Path) -> None:
    valid_folder(tmp_path)
    write(tmp_path / "prompts" / "prompts.yml", PROMPT)
    (tmp_path / "again").symlink_to(tmp_path / "prompts", target_is_directory=True)
    assert refusal(tmp_path).startswith(
        f"{tmp_path / 'prompts'}: the same folder as {tmp_path / 'again'} (through a symbolic link)"
    )


def test_a_broken_symlink_is_an_error_naming_it(tmp_path: Path) -> None:
    valid_folder(tmp_path)
    (tmp_path / "prompts.yml").symlink_to(tmp_path / "gone.yml")
    assert refusal(tmp_path).startswith(f"{tmp_path / 'prompts.yml'}: a broken symbolic link (to ")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_an_error_not_a_hang(tmp_path: Path) -> None:
    # Opening a FIFO for reading blocks until a writer comes: NeMo would hang here for ever.
    valid_folder(tmp_path)
    os.mkfifo(tmp_path / "x.yml")
    assert refusal(tmp_path) == (
        f"{tmp_path / 'x.yml'}: a FIFO (named pipe) in a config folder, which holds files and folders "
        "only (reading it would block or never end); remove it or keep the config elsewhere"
    )
    assert refusal(tmp_path / "x.yml").startswith(f"{tmp_path / 'x.yml'}: a FIFO (named pipe), not a config")


def test_an_unreadable_file_is_an_error_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests run as root, where chmod 000 does not stop a read: the open fails as it would for a user.
    valid_folder(tmp_path)
    secret = write(tmp_path / "rails" / "secret.yml", RAILS)
    real_open = os.open

    def deny(path: object, *args: object, **kwargs: object) -> int:
        if Path(str(path)) == secret:
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", deny)
    assert refusal(tmp_path) == f"{secret}: cannot read (Permission denied)"


def test_an_unlistable_folder_is_an_error_not_a_silent_skip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # NeMo's os.walk skips a folder it cannot list without a word (and the Colang in it).
    valid_folder(tmp_path)
    locked = tmp_path / "rails"
    locked.mkdir()
    real_scandir = os.scandir

    def deny(path: Path) -> object:
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", deny)
    assert refusal(tmp_path) == f"{locked}: cannot list this folder (Permission denied)"


def test_a_huge_file_is_refused_before_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    valid_folder(tmp_path)
    huge = tmp_path / "rails" / "huge.yml"
    huge.parent.mkdir()
    with huge.open("wb") as f:
        f.truncate(100 * 1024 * 1024)  # 100 MB, sparse: takes no disk
    real_open = os.open

    def no_open(path: object, *args: object, **kwargs: object) -> int:
        assert Path(str(path)) != huge, "the size is checked before the file is opened"
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", no_open)
    assert refusal(tmp_path) == (
        f"{huge}: 100 MB (104857600 bytes), over the 1 MB limit for a config file "
        "(config files are a few KB; is this the right file?)"
    )
    assert MAX_FILE_BYTES == 1024 * 1024


def test_a_file_at_the_limit_is_read_and_one_byte_more_is_not(tmp_path: Path) -> None:
    at_limit = write(tmp_path / "at.yml", "#" * (MAX_FILE_BYTES - 1) + "\n")
    assert len(read_text(at_limit)) == MAX_FILE_BYTES
    over = write(tmp_path / "over.yml", "#" * MAX_FILE_BYTES + "\n")
    with pytest.raises(ConfigError, match=r"over\.yml: 1 MB \(1048577 bytes\), over the 1 MB limit"):
        read_text(over)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"models: []\n\x00\x01\x02", "binary data (a NUL byte at offset 11), not a text config file"),
        (b"\x89PNG\r\n\x1a\n", "not UTF-8 text (byte 0x89 at offset 0)"),
        (b"models: []\n# caf\xe9\n", "not UTF-8 text (byte 0xe9 at offset 16)"),
        ("models: []\n".encode("utf-16"), "binary data (a NUL byte at offset 3), not a text config file"),
    ],
)
def test_a_binary_or_non_utf8_yml_file_is_an_error_naming_it(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    valid_folder(tmp_path)
    path = write(tmp_path / "rails" / "image.yml", content)
    assert refusal(tmp_path) == f"{path}: {problem}"


def test_crlf_files_read_like_lf_files(tmp_path: Path) -> None:
    lf = valid_folder(tmp_path / "lf")
    write(lf / "prompts.yml", PROMPT)
    crlf = tmp_path / "crlf"
    write(crlf / "config.yml", (MODELS + RAILS).replace("\n", "\r\n").encode())
    write(crlf / "prompts.yml", PROMPT.replace("\n", "\r\n").encode())
    assert RailsConfig.from_path(crlf).prompts == RailsConfig.from_path(lf).prompts


def test_a_folder_deeper_than_the_limit_is_an_error(tmp_path: Path) -> None:
    valid_folder(tmp_path)
    deep = tmp_path.joinpath(*(["d"] * (MAX_DEPTH + 1)))
    deep.mkdir(parents=True)
    assert refusal(tmp_path).startswith(
        f"{deep}: more than {MAX_DEPTH} folder levels below the config folder {tmp_path}"
    )
    shutil.rmtree(deep)
    write(tmp_path.joinpath(*(["d"] * MAX_DEPTH), "x.yml"), "")  # exactly at the limit: read
    assert RailsConfig.from_path(tmp_path).model_types == ["main", "content_safety"]


def test_a_folder_with_too_many_entries_is_an_error(tmp_path: Path) -> None:
    assert MAX_ENTRIES == 1_000
    valid_folder(tmp_path)
    for i in range(30):
        write(tmp_path / "a" / f"{i}.txt", "")
        write(tmp_path / "b" / f"{i}.txt", "")
    with pytest.raises(ConfigError) as info:
        RailsConfig.from_path(tmp_path, limits=ConfigLimits(entries=50))
    assert str(info.value) == (
        f"{tmp_path}: more than 50 files and folders under the config folder (the limit for a config "
        f"folder, reached while listing {tmp_path / 'b'}); is this the right folder? (NeMo Guardrails "
        "would walk them all: keep a config in a folder of its own)"
    )


def test_a_path_that_is_neither_file_nor_folder_is_an_error(tmp_path: Path) -> None:
    assert refusal(tmp_path / "nope").startswith(f"{tmp_path / 'nope'}: no such file or folder")
    (tmp_path / "empty").mkdir()
    write(tmp_path / "empty" / "notes.txt", "")
    assert refusal(tmp_path / "empty") == (
        f"{tmp_path / 'empty'}: no config.yml (or other .yml/.yaml file) in this folder"
    )


# -- real NeMo Guardrails configs ------------------------------------------------------------------


def test_nemo_abc_bot_with_colang_in_rails_folder_is_refused() -> None:
    # NeMo's ABC bot: self check rails in config.yml, topical dialog rails in rails/disallowed.co.
    folder = NEMO_CONFIGS / "abc"
    message = refusal(folder)
    assert message.startswith(
        f"{folder}: Colang files declare rails that guardcache does not run: rails/disallowed.co "
        "(21 unnamed flows; 41 user/bot message definitions)."
    )


def test_nemo_abc_bot_with_its_colang_railsignored_is_validated_as_any_config(tmp_path: Path) -> None:
    # Excluding the .co (which NeMo then skips too) is a decision to run without the dialog rails:
    # the config is then checked like any other (this one lacks its self_check_output prompt).
    folder = shutil.copytree(NEMO_CONFIGS / "abc", tmp_path / "abc")
    write(folder / ".railsignore", "disallowed.co\n")
    message = refusal(folder)
    assert "Colang" not in message
    assert "rails.output.flows[0]: flow 'self check output' needs a prompt with task 'self_check_output" in (
        message
    )


def test_nemo_example_with_its_config_in_a_subfolder_loads() -> None:
    # NeMo's gs_content_safety example keeps its config in config/, next to demo.py: NeMo loads the
    # example folder by walking into config/; guardcache used to find "no config.yml".
    folder = NEMO_CONFIGS / "gs_content_safety"
    config = RailsConfig.from_path(folder)
    assert config.model_types == ["main", "content_safety"]
    assert config.model("content_safety").model == "nvidia/llama-3.1-nemoguard-8b-content-safety"
    assert [r.text for r in config.rails.output.flow_refs()] == [
        "content safety check output $model=content_safety"
    ]
    found = find_config_files(folder)
    assert found.yaml == [folder / "config" / "config.yml"] and found.colang == []
    assert merge_yaml(found).file_of(("models", 1)) == str(folder / "config" / "config.yml")
