"""The shipped examples run as written (against emulated NIMs) and show what they promise."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from guardcache import REFUSAL, RailsConfig
from tests.integration.quickstart_support import QUICKSTART, emulator, free_port, quickstart, run_python

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name / "app.py"), "--time-scale", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_minimal_app_blocks_the_unsafe_turn_and_serves_the_repeat_from_cache() -> None:
    out = run_example("minimal_app")
    assert out.count("I'm sorry, I can't respond to that.") == 1
    assert "3 LLM calls (2 from cache)" in out
    assert "LFU Cache Statistics - Size: 3/50000 | Hits: 2 | Misses: 3" in out


def test_langchain_main_model_example_hits_the_cache_on_the_repeat() -> None:
    out = run_example("langchain_main")
    assert "(0 of 2 checks from cache)" in out and "(2 of 2 checks from cache)" in out


def test_parallel_rails_example_blocks_with_one_of_its_rails() -> None:
    out = run_example("parallel_rails")
    assert "blocked (Controlled/Regulated Substances)" in out


@pytest.mark.parametrize(
    "folder", ["quickstart/config", "minimal_app", "langchain_main", "parallel_rails", "nemo_content_safety"]
)
def test_example_configs_load(folder: str) -> None:
    assert RailsConfig.from_path(EXAMPLES / folder).model_types


def quickstart_commands() -> list[str]:
    """The commands of the quickstart's README, in order, without their comments."""
    text = (QUICKSTART / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text, re.DOTALL)
    assert block, "the quickstart's README has no bash block"
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def masked(output: str) -> str:
    """Output with its timings masked (they vary), everything else as printed."""
    return re.sub(r"\d+\.\d ms", "N ms", output).strip()


def test_the_quickstart_runs_as_its_readme_says(tmp_path: Path) -> None:
    # The README's commands: install, start the emulator, run the app. The test environment is the
    # installed one; the other two run as written, on the emulator's default port when it is free.
    assert quickstart_commands() == [
        "pip install -e '.[server]'",
        "guardcache emulate &",
        "python examples/quickstart/app.py",
    ]
    qs = quickstart(tmp_path)
    with emulator(qs, tmp_path / "emulate.log"):
        proc = run_python([str(qs.folder / "app.py")] if not qs.as_is else ["examples/quickstart/app.py"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    turns = out.strip().split("\n\n")
    assert len(turns) == 3, out
    allowed, refused, again = turns
    assert "bot:  You said: Hello! What can you help me with?\n      allowed\n" in allowed
    assert allowed.count("asked the model") == 3 and "from cache" not in allowed
    assert f"bot:  {REFUSAL}\n      refused by content safety check input $model=content_safety (" in refused
    assert "general" not in refused  # the input rail blocked before the main model
    assert again.replace("from cache", "x").count("x, 0.0 ms") == 2 and again.count("asked the model") == 1
    assert "general: asked the model" in again  # a hit turn costs the main call alone
    # The README shows the same output (timings aside).
    readme = (QUICKSTART / "README.md").read_text(encoding="utf-8")
    shown = re.findall(r"```\n(user: .*?)```", readme, re.DOTALL)
    assert len(shown) == 1 and masked(shown[0]) == masked(out)


def test_the_quickstart_says_when_the_emulator_is_not_running(tmp_path: Path) -> None:
    folder = tmp_path / "quickstart"
    shutil.copytree(QUICKSTART, folder)
    config = folder / "config" / "config.yml"
    config.write_text(
        config.read_text(encoding="utf-8").replace("127.0.0.1:8001", f"127.0.0.1:{free_port()}"),
        encoding="utf-8",
    )
    proc = run_python([str(folder / "app.py")])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("is `guardcache emulate` running on port 8001?") == 3
    assert proc.stdout.count(REFUSAL) == 3  # no guard, no answer: blocked (on_error: block)
