"""``/health/ready`` tells the truth: every guard answers a real check through its rails (key,
model name, prompt, parser) and the main model a 1-token completion, probed in the background;
503 names each failing model and why until it is fixed, then 200. And a key variable that is
unset stops ``guardcache serve`` (and ``guardcache check``) at start with exit 2.

Real sockets: ``guardcache serve`` as a subprocess (``ServeProcess``) in front of emulated NIMs whose
behaviour is flipped while the server runs.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from guardcache.emulator import EmulatorConfig, EmulatorServer, LatencyConfig, ThreadedEmulator
from tests.integration import test_serve as support
from tests.integration.test_serve import (
    GUARD_MODEL,
    INPUT_FLOW,
    MAIN_MODEL,
    OUTPUT_FLOW,
    REPO,
    emulator,
    sample,
)

pytestmark = pytest.mark.integration
serve = support.serve  # the fixture

FAST = ("--ready-interval", "0.3", "--ready-retry", "0.05", "--ready-timeout", "3")


def write_config(folder: Path, main_url: str, guard_url: str, *, guard_key_var: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    key = f"\n    api_key_env_var: {guard_key_var}" if guard_key_var else ""
    (folder / "config.yml").write_text(
        f"""
models:
  - type: main
    engine: nim
    model: {MAIN_MODEL}
    parameters: {{base_url: "{main_url}", max_tokens: 64}}
  - type: content_safety
    engine: nim
    model: {GUARD_MODEL}
    parameters: {{base_url: "{guard_url}"}}{key}
rails:
  input: {{flows: [{INPUT_FLOW}]}}
  output: {{flows: [{OUTPUT_FLOW}]}}
"""
    )
    return folder


def ready(server: Any) -> httpx.Response:
    return support.LOOPBACK.get(f"{server.url}/health/ready", timeout=5)


def wait_for(server: Any, status: int, within: float = 30.0) -> dict[str, Any]:
    """The body of ``/health/ready`` once it answers ``status`` (past the start-up's 'starting')."""
    deadline = time.monotonic() + within
    while True:
        response = ready(server)
        body: dict[str, Any] = response.json()
        if response.status_code == status and body.get("status") != "starting":
            return body
        assert time.monotonic() < deadline, f"/health/ready stayed {response.status_code}: {body}"
        time.sleep(0.05)


def dead_url() -> tuple[str, int]:
    with socket.socket() as sock:  # a port nothing listens on (once closed)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1", port


def test_a_guard_answering_401_is_named_until_its_key_is_accepted(serve: Any, tmp_path: Path) -> None:
    with emulator(model=MAIN_MODEL) as main, emulator(api_key="the-right-key") as guard:
        config = write_config(tmp_path / "c", main.base_url, guard.base_url, guard_key_var="GUARD_KEY")
        server = serve(config, *FAST, ready=False, env={"GUARD_KEY": "a-wrong-key"})
        body = wait_for(server, 503)
        assert body["status"] == "unavailable"
        assert body["backends"]["c/content_safety"].startswith("401 Unauthorized: check the API key")
        assert body["backends"]["c/main"] == "ok"
        assert httpx.get(f"{server.url}/health/live").status_code == 200  # liveness stays trivial
        # The guard now accepts the key the server sends: the next probe says so.
        inner = guard._inner.emulator
        assert inner is not None
        inner.config = dataclasses.replace(inner.config, api_key="a-wrong-key")
        body = wait_for(server, 200)
        assert body["status"] == "ready"
        assert body["backends"] == {"c/main": "ok", "c/content_safety": "ok"}
        assert "c/content_safety" in server.wait_log("401 Unauthorized")  # and the log said why


def test_an_unreachable_main_model_is_named_until_it_answers(serve: Any, tmp_path: Path) -> None:
    with emulator() as guard:
        main_url, port = dead_url()
        server = serve(write_config(tmp_path / "c", main_url, guard.base_url), *FAST, ready=False)
        body = wait_for(server, 503)
        assert body["backends"]["c/main"].startswith("unreachable")
        assert body["backends"]["c/content_safety"] == "ok"
        config = EmulatorConfig(port=port, model=MAIN_MODEL, latency=LatencyConfig(time_scale=0))
        with EmulatorServer(config).in_thread() as main:
            body = wait_for(server, 200)
            assert body["backends"] == {"c/main": "ok", "c/content_safety": "ok"}
            # The probe is a real 1-token completion on the main model.
            assert main.stats().requests_by_endpoint.get("chat.completions", 0) >= 1


def test_a_guard_whose_answer_is_no_verdict_is_named_until_it_answers_one(serve: Any, tmp_path: Path) -> None:
    with emulator(model=MAIN_MODEL) as main, emulator() as guard:
        guard.set_faults(malformed_rate=1.0)  # 200, but the content is not the verdict JSON
        server = serve(write_config(tmp_path / "c", main.base_url, guard.base_url), *FAST, ready=False)
        body = wait_for(server, 503)
        assert body["backends"]["c/content_safety"] == "no verdict: unparseable answer"
        assert body["backends"]["c/main"] == "ok"
        guard.set_faults(malformed_rate=0.0)
        assert wait_for(server, 200)["backends"]["c/content_safety"] == "ok"


def test_probes_run_in_the_background_never_as_turns_nor_through_the_caches(
    serve: Any, tmp_path: Path
) -> None:
    with emulator(model=MAIN_MODEL) as main, emulator() as guard:
        # FAST, but a probe may take 30 s: were the route to wait for one, it would time out.
        schedule = ("--ready-interval", "0.3", "--ready-retry", "0.05", "--ready-timeout", "30")
        server = serve(write_config(tmp_path / "c", main.base_url, guard.base_url), *schedule)
        deadline = time.monotonic() + 30
        while guard.stats().requests_by_endpoint.get("chat.completions", 0) < 6:  # >= 3 rounds x 2 rails
            assert time.monotonic() < deadline, guard.stats()
            time.sleep(0.05)
        metrics = server.metrics()
        assert sample(metrics, "guardcache_turn_seconds_count") == 0
        assert sample(metrics, "guardcache_checks_total") == 0
        for field in ("hits", "misses", "puts"):
            assert sample(metrics, f"guardcache_cache_{field}_total", config="c") == 0, field
        assert sample(metrics, "guardcache_cache_current_size", config="c") == 0
        # The route reads the cached result: a guard that hangs now does not hold it up. Each probe
        # round from now on hangs (up to the 30 s probe timeout); each answer of the route comes
        # within ready()'s 5 s read timeout all the same.
        guard.set_faults(hang_rate=1.0, hang_seconds=60.0)
        hung = guard.stats().faults.get("hang", 0)
        deadline = time.monotonic() + 30
        while guard.stats().faults.get("hang", 0) == hung:  # a probe round is hanging
            assert time.monotonic() < deadline, guard.stats()
            time.sleep(0.05)
        for _ in range(5):
            assert ready(server).status_code in (200, 503)
        guard.set_faults(hang_rate=0.0)


def _run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "guardcache", *cmd],
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_stops_at_start_when_a_key_variable_is_unset(tmp_path: Path, workers: str) -> None:
    config = write_config(
        tmp_path / "c", "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", guard_key_var="GC_UNSET_GUARD_KEY"
    )
    env = {k: v for k, v in os.environ.items() if k != "GC_UNSET_GUARD_KEY"}
    done = _run(["serve", "--config", str(config), "--port", "0", "--workers", workers], env)
    assert done.returncode == 2, done.stderr
    assert "GC_UNSET_GUARD_KEY" in done.stderr and "'content_safety'" in done.stderr
    assert f"{config}:" in done.stderr  # the config it comes from
    assert "Uvicorn running" not in done.stderr


def test_serve_takes_an_empty_key_variable_for_unset(tmp_path: Path) -> None:
    # (once: it ran after each case above, both times the same one-worker command)
    config = write_config(
        tmp_path / "c", "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", guard_key_var="GC_UNSET_GUARD_KEY"
    )
    done = _run(["serve", "--config", str(config), "--port", "0"], {**os.environ, "GC_UNSET_GUARD_KEY": " "})
    assert done.returncode == 2 and "GC_UNSET_GUARD_KEY" in done.stderr
    assert "Uvicorn running" not in done.stderr


def test_check_stops_at_start_when_a_key_variable_is_unset(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "c", "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", guard_key_var="GC_UNSET_GUARD_KEY"
    )
    env = {k: v for k, v in os.environ.items() if k != "GC_UNSET_GUARD_KEY"}
    done = _run(["check", "--config", str(config), "hello"], env)
    assert done.returncode == 2
    assert done.stderr.startswith("guardcache check: ") and "GC_UNSET_GUARD_KEY" in done.stderr


def test_the_emulator_key_flip_is_real(tmp_path: Path) -> None:
    """The 401 test's flip works on the emulator itself (so that test fails for the right reason)."""
    with emulator(api_key="k1") as guard:
        assert isinstance(guard, ThreadedEmulator)
        url = f"{guard.base_url}/chat/completions"
        body = {"model": GUARD_MODEL, "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(url, json=body, headers={"Authorization": "Bearer k2"}).status_code == 401
        inner = guard._inner.emulator
        assert inner is not None
        inner.config = dataclasses.replace(inner.config, api_key="k2")
        assert httpx.post(url, json=body, headers={"Authorization": "Bearer k2"}).status_code == 200
