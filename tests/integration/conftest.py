"""Integration tests: real servers (NIM emulators, redis-server) on loopback.

The fixtures (``emulator``, ``emulator_factory``, ``redis_server``, ``redis_url``, ``echo_llm``) come
from ``guardcache.testing.pytest_plugin``, enabled for the whole suite in ``tests/conftest.py``, the
way an app enables them for its own tests; every test here is marked ``integration`` there too.

The scripted-server fixtures below serve the transport contract, the hostile-network tests and the
rails' "no verdict" tests (tests/transport_support.py has the servers).

Under pytest-xdist (``.ci/run``: ``-n 2``) a session-scoped fixture is set up once per worker that
uses it (the plugin's Redis Cluster and Sentinel set, ~2 s each): no test relies on which worker runs
it, or with whom.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest

from guardcache.llm.transport_contract import WirePool
from tests.transport_support import (
    NO_PROXY_VARS,
    PROXY_VARS,
    TRANSPORTS,
    ScriptServer,
    ServerFactory,
    Step,
    new_pool,
)


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner's proxy settings must not send 127.0.0.1 through a proxy (tests that want a
    proxy set their own)."""
    for name in (*PROXY_VARS, *NO_PROXY_VARS):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def scripted() -> AsyncIterator[ServerFactory]:
    """Starts scripted servers on 127.0.0.1 (``await scripted(script)``); all closed at the end."""
    started: list[ScriptServer] = []

    async def start(script: Step | Sequence[Step]) -> ScriptServer:
        server = await ScriptServer(script).start()
        started.append(server)
        return server

    yield start
    for server in started:
        await server.aclose()


@pytest.fixture(params=TRANSPORTS)
async def pool(request: pytest.FixtureRequest) -> AsyncIterator[WirePool]:
    """Each network transport the project ships, in turn."""
    wire = new_pool(request.param)
    yield wire
    await wire.aclose_all()
