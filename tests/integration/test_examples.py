"""The shipped examples run as written (against emulated NIMs) and show what they promise.

The quickstart runs as its README says, as separate processes (``guardcache emulate`` in the
background, then ``python examples/quickstart/app.py``). The other apps, and the quickstart against
an emulator that is not running, run as their ``__main__`` in this process (``runpy``: the file
itself, with its own argv and ``asyncio.run``): what they print is the point, and a child
interpreter would add only its start-up.
"""

from __future__ import annotations

import re
import runpy
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from guardcache import REFUSAL, RailsConfig
from tests.integration.quickstart_support import (
    QUICKSTART,
    emulator,
    free_port,
    quickstart,
    run_python,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def run_app(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """``run_app(path, *args)``: ``python path *args`` as ``__main__`` in this process; what it
    printed on stdout (a non-zero exit fails the test with its stderr)."""

    def run(app: Path, *args: str) -> str:
        monkeypatch.setattr(sys, "argv", [str(app), *args])
        capsys.readouterr()
        try:
            runpy.run_path(str(app), run_name="__main__")
        except SystemExit as exc:  # argparse's usage error, or an app's own exit status
            assert exc.code in (0, None), capsys.readouterr().err
        return capsys.readouterr().out

    return run


def run_example(run_app: Callable[..., str], name: str) -> str:
    return run_app(EXAMPLES / name / "app.py", "--time-scale", "0")


def test_minimal_app_blocks_the_unsafe_turn_and_serves_the_repeat_from_cache(
    run_app: Callable[..., str],
) -> None:
    out = run_example(run_app, "minimal_app")
    assert out.count("I'm sorry, I can't respond to that.") == 1
    assert "3 LLM calls (2 from cache)" in out
    assert "LFU Cache Statistics - Size: 3/50000 | Hits: 2 | Misses: 3" in out


def test_langchain_main_model_example_hits_the_cache_on_the_repeat(run_app: Callable[..., str]) -> None:
    out = run_example(run_app, "langchain_main")
    assert "(0 of 2 checks from cache)" in out and "(2 of 2 checks from cache)" in out


def test_parallel_rails_example_blocks_with_one_of_its_rails(run_app: Callable[..., str]) -> None:
    out = run_example(run_app, "parallel_rails")
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
    # The README's commands: a virtual environment, install, start the emulator, run the app. The
    # test environment is the installed one; the other two run as written, on the emulator's default
    # port when it is free.
    assert quickstart_commands() == [
        "python3 -m venv .venv && . .venv/bin/activate",
        "pip install -e '.[server]'",
        "guardcache emulate &",
        "python examples/quickstart/app.py",
    ]
    with quickstart(tmp_path) as qs, emulator(qs, tmp_path / "emulate.log"):
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
    # Both checks from the cache (what a read took is the machine's business, not this test's).
    assert len(re.findall(r"from cache, \d+\.\d ms", again)) == 2 and again.count("asked the model") == 1
    assert "general: asked the model" in again  # a hit turn costs the main call alone
    # The README shows the same output (timings aside).
    readme = (QUICKSTART / "README.md").read_text(encoding="utf-8")
    shown = re.findall(r"```\n(user: .*?)```", readme, re.DOTALL)
    assert len(shown) == 1 and masked(shown[0]) == masked(out)


def test_the_quickstart_says_when_the_emulator_is_not_running(
    tmp_path: Path, run_app: Callable[..., str]
) -> None:
    folder = tmp_path / "quickstart"
    shutil.copytree(QUICKSTART, folder)
    config = folder / "config" / "config.yml"
    config.write_text(
        config.read_text(encoding="utf-8").replace("127.0.0.1:8001", f"127.0.0.1:{free_port()}"),
        encoding="utf-8",
    )
    out = run_app(folder / "app.py")
    assert out.count("is `guardcache emulate` running on port 8001?") == 3
    assert out.count(REFUSAL) == 3  # no guard, no answer: blocked (on_error: block)
