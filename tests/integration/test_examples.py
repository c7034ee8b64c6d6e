"""The shipped examples run as written (against emulated NIMs) and show what they promise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from guardcache import RailsConfig

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


@pytest.mark.parametrize("folder", ["minimal_app", "langchain_main", "parallel_rails", "nemo_content_safety"])
def test_example_configs_load(folder: str) -> None:
    assert RailsConfig.from_path(EXAMPLES / folder).model_types
