"""``POST /admin/cache/clear`` of ``guardcache serve``: every worker process's caches emptied, with its
own key (``--admin-key-env``), absent without it.

The proof that a worker was cleared is the guard asked again for a text that worker had cached: each
worker asks the guard at most once per text while it holds the verdict, so with two workers the guard
sees a text twice once both cached it, and twice more only once both were cleared.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from guardcache.emulator import ThreadedEmulator
from tests.integration.test_serve import MAIN_MODEL, ServeProcess, emulator, write_config

pytestmark = pytest.mark.integration

ADMIN_KEY = "admin-s3cret-0123456789"
CLEAR = "/admin/cache/clear"
TEXT = "What is the deepest lake in the world?"
DEADLINE_S = 60  # generous: a busy 2-core machine


@pytest.fixture
def nims() -> Iterator[tuple[ThreadedEmulator, ThreadedEmulator]]:
    with emulator(model=MAIN_MODEL) as main, emulator() as guard:
        yield main, guard


@pytest.fixture
def servers() -> Iterator[list[ServeProcess]]:
    started: list[ServeProcess] = []
    yield started
    for server in started:
        server.stop()


def start(servers: list[ServeProcess], config: Path, *args: str, workers: int = 2) -> ServeProcess:
    server = ServeProcess(
        config,
        "--workers",
        str(workers),
        "--no-warm-up",
        "--ready-interval",
        "3600",  # one readiness round per worker, then none while the test counts guard calls
        *args,
        env={"SERVE_ADMIN_KEY": ADMIN_KEY, "SERVE_CLIENT_KEY": "client-key"},
    )
    servers.append(server)
    return server.start()


def guard_calls(guard: ThreadedEmulator) -> int:
    return guard.stats(prompts=False).requests_by_endpoint.get("chat.completions", 0)


def wait_for(what: str, done: Callable[[], bool], poll_s: float = 0.0) -> None:
    """Until ``done()``, within the deadline (``poll_s`` between looks that cost nothing)."""
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(poll_s)


def ask(server: ServeProcess) -> None:
    """One turn on a new connection (so that the turns spread over the workers)."""
    with httpx.Client(timeout=30) as client:
        reply = client.post(
            f"{server.url}/v1/chat/completions",
            json={"model": "x", "messages": [{"role": "user", "content": TEXT}]},
            headers={"Authorization": "Bearer client-key"},
        )
    assert reply.status_code == 200, reply.text


def until_the_guard_saw(server: ServeProcess, guard: ThreadedEmulator, calls: int) -> None:
    """Turns until the guard was asked ``calls`` times (each worker asks once per text it does not
    hold), within the deadline; never more."""

    def done() -> bool:
        ask(server)
        return guard_calls(guard) >= calls

    wait_for(f"the guard was asked {calls} times", done)
    assert guard_calls(guard) == calls


def post_clear(server: ServeProcess, key: str | None, **kw: object) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return httpx.post(f"{server.url}{CLEAR}", headers=headers, timeout=30, **kw)  # type: ignore[arg-type]


def test_the_admin_route_clears_every_worker_of_a_memory_only_server(
    tmp_path: Path, nims: tuple[ThreadedEmulator, ThreadedEmulator], servers: list[ServeProcess]
) -> None:
    main, guard = nims
    config = write_config(tmp_path / "c", main.base_url, guard.base_url, outputs=False)
    server = start(servers, config, "--admin-key-env", "SERVE_ADMIN_KEY", "--api-key-env", "SERVE_CLIENT_KEY")
    wait_for("each worker's readiness round", lambda: guard_calls(guard) >= 2, poll_s=0.02)
    guard.reset()

    until_the_guard_saw(server, guard, 2)  # both workers hold the verdict now
    for _ in range(6):
        ask(server)
    assert guard_calls(guard) == 2  # served from the workers' caches

    # the client key does not open the admin route; a wrong or missing admin key: 401
    for key in (None, "client-key", ADMIN_KEY + "x"):
        refused = post_clear(server, key, json={})
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_admin_key"
    assert guard_calls(guard) == 2  # nothing was cleared

    cleared = post_clear(server, ADMIN_KEY, json={"models": ["content_safety"]})
    assert cleared.status_code == 200, cleared.text
    report = cleared.json()
    assert report["cleared"] == ["content_safety"]
    assert report["workers"] == {"acknowledged": 2, "expected": 2}

    until_the_guard_saw(server, guard, 4)  # each worker asked the guard again: both were cleared

    # no body: every cached model; a bad one: 400 naming the field
    assert post_clear(server, ADMIN_KEY).json()["cleared"] == ["content_safety"]
    bad = post_clear(server, ADMIN_KEY, json={"models": ["nope"]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "models"
    big = post_clear(server, ADMIN_KEY, content=b'{"models": ["' + b"a" * (2 << 20) + b'"]}')
    assert big.status_code == 413  # bounded as every body route


def test_without_admin_key_env_there_is_no_admin_route(
    tmp_path: Path, nims: tuple[ThreadedEmulator, ThreadedEmulator], servers: list[ServeProcess]
) -> None:
    main, guard = nims
    config = write_config(tmp_path / "c", main.base_url, guard.base_url, outputs=False)
    server = start(servers, config, workers=1)
    for key in (None, ADMIN_KEY):
        assert post_clear(server, key, json={}).status_code == 404
