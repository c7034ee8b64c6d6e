"""A warm restart of ``guardcache serve`` as an operator does it: verdicts cached, SIGTERM (a graceful
stop writes the snapshot), the same command again: the same texts are answered from the loaded
cache, the guard not asked. A snapshot file changed on disk while the server was down loads nothing,
with one WARNING naming the setting, and the server serves as ever (it asks the guard again).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from guardcache.emulator import ThreadedEmulator
from tests.integration.test_serve import MAIN_MODEL, ServeProcess, emulator, write_config

pytestmark = pytest.mark.integration

KEY = "an operator's snapshot key, at least 32 bytes long"
TEXTS = [f"Warm restart question {i}: how do tides work on planet {i}?" for i in range(30)]
SETTING = "models[1].cache.snapshot"


@pytest.fixture
def nims() -> Iterator[tuple[ThreadedEmulator, ThreadedEmulator]]:
    with emulator(model=MAIN_MODEL) as main, emulator() as guard:
        yield main, guard


def guard_calls(guard: ThreadedEmulator) -> int:
    return guard.stats(prompts=False).requests_by_endpoint.get("chat.completions", 0)


def serve(config: Path) -> ServeProcess:
    return ServeProcess(
        config,
        "--no-warm-up",
        "--ready-interval",
        "3600",  # one readiness round, then none while the test counts guard calls
        env={"GUARDCACHE_SNAPSHOT_KEY": KEY},
    ).start()


def ask_all(server: ServeProcess) -> None:
    with httpx.Client(timeout=30) as client:
        for text in TEXTS:
            reply = client.post(
                f"{server.url}/v1/chat/completions",
                json={"model": "x", "messages": [{"role": "user", "content": text}]},
            )
            assert reply.status_code == 200, reply.text


def stop(server: ServeProcess) -> None:
    server.terminate()
    # uvicorn re-raises the SIGTERM it handled, after the graceful shutdown
    assert server.wait(60) in (0, -signal.SIGTERM), server.log()
    assert "Application shutdown complete" in server.log()


def snapshot_warnings(server: ServeProcess) -> list[str]:
    return [line for line in server.log().splitlines() if "WARNING" in line and SETTING in line]


def test_a_restarted_server_answers_from_the_snapshot_its_stop_wrote(
    tmp_path: Path, nims: tuple[ThreadedEmulator, ThreadedEmulator]
) -> None:
    main, guard = nims
    path = tmp_path / "content_safety.snapshot"
    cache = f'{{enabled: true, snapshot: "{path}", snapshot_interval: 3600}}'
    config = write_config(tmp_path / "config", main.base_url, guard.base_url, outputs=False, cache=cache)

    first = serve(config)
    before = guard_calls(guard)
    ask_all(first)
    assert guard_calls(guard) == before + len(TEXTS)  # each text judged once
    stop(first)  # SIGTERM: the graceful stop writes the snapshot (the interval never came round)
    assert path.is_file() and snapshot_warnings(first) == []

    second = serve(config)
    before = guard_calls(guard)
    ask_all(second)
    assert guard_calls(guard) == before, "a restarted server asked the guard for verdicts it had"
    assert snapshot_warnings(second) == []
    stop(second)

    # Changed on disk while the server was down (one byte of the middle flipped): loaded nothing.
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    third = serve(config)
    before = guard_calls(guard)
    ask_all(third)
    assert guard_calls(guard) == before + len(TEXTS)  # cold: every text judged again
    third.wait_log(SETTING)
    assert len(snapshot_warnings(third)) == 1, third.log()
    stop(third)
