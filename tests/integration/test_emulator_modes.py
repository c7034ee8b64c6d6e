"""The other ways to run the emulator: a thread for sync code, a child process for benchmarks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import openai
import pytest

from guardcache.emulator import (
    EmulatorConfig,
    EmulatorProcess,
    EmulatorServer,
    EmulatorStartError,
    LatencyConfig,
    parse_ready_line,
)
from guardcache.emulator.samples import as_messages, content_safety_input

pytestmark = pytest.mark.integration

FAST = EmulatorConfig(latency=LatencyConfig(time_scale=0))
PROMPT = as_messages(content_safety_input("I will kill you"))
UNSAFE = '{"User Safety": "unsafe", "Safety Categories": "Violence, Threat"}'


def test_threaded_emulator_serves_sync_clients_and_admin_calls() -> None:
    with EmulatorServer(FAST).in_thread() as emu:
        assert emu.base_url == f"http://127.0.0.1:{emu.port}/v1"
        client = openai.OpenAI(base_url=emu.base_url, api_key="k", max_retries=0)
        with client:
            result = client.chat.completions.create(model="m", messages=PROMPT)
        assert result.choices[0].message.content.strip() == UNSAFE
        assert emu.stats().calls_for(PROMPT) == 1
        emu.set_down(True)
        assert httpx.get(f"{emu.base_url}/health/ready", trust_env=False).status_code == 503
        emu.set_down(False)
        emu.set_faults(error_rate=1.0)
        r = httpx.post(
            f"{emu.base_url}/chat/completions",
            json={"model": "m", "messages": PROMPT},
            trust_env=False,
        )
        assert r.status_code == 500
        emu.reset()
        assert emu.stats().requests_total == 0
        port = emu.port
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/v1/health/ready", trust_env=False)


def test_a_taken_port_is_a_clear_start_error() -> None:
    with EmulatorServer(FAST).in_thread() as first, pytest.raises(EmulatorStartError, match=str(first.port)):
        EmulatorServer(FAST.merged(port=first.port)).in_thread().start()


async def test_child_process_mode_starts_serves_and_stops() -> None:
    async with EmulatorProcess(FAST) as emu:
        pid = emu.pid
        assert pid != os.getpid()
        async with httpx.AsyncClient(base_url=emu.base_url, trust_env=False) as client:
            r = await client.post("/chat/completions", json={"model": "m", "messages": PROMPT})
        assert r.status_code == 200
        assert r.json()["choices"][0]["message"]["content"].strip() == UNSAFE
        stats = await emu.astats()
        assert stats.requests_total == 1 and stats.calls_for(PROMPT) == 1
        assert emu.stats() == stats  # the sync twin reads the same document
        base_url = emu.base_url
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # exited and reaped
    async with httpx.AsyncClient(trust_env=False) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"{base_url}/health/ready")


def test_cli_prints_a_ready_line_and_exits_cleanly_on_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "guardcache.emulator", "--port", "0", "--time-scale", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        info = parse_ready_line(proc.stdout.readline().strip())
        assert info is not None and info["port"] > 0
        r = httpx.get(f"{info['base_url']}/models", trust_env=False)
        assert r.json()["data"][0]["id"] == EmulatorConfig().model
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode in (0, -signal.SIGTERM), err
    assert "Traceback" not in err
