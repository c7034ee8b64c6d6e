"""pytest fixtures for apps built on guardcache: emulated NIMs, a real redis-server, a fake main model.

Enable them in your root ``conftest.py``::

    pytest_plugins = ["guardcache.testing.pytest_plugin"]

(or import the fixtures you use into a ``conftest.py``: ``from guardcache.testing.pytest_plugin
import emulator, emulator_factory``). The async fixtures need pytest-asyncio (either mode).

- ``emulator``: a started ``EmulatorServer`` on a free loopback port, ``time_scale=0`` (no modelled
  delays), stopped after the test. Change its config with indirect parametrization::

      @pytest.mark.parametrize("emulator", [{"faults": {"error_rate": 1.0}}], indirect=True)

  (a dict is merged into ``TEST_EMULATOR_CONFIG`` with ``EmulatorConfig.merged``; an
  ``EmulatorConfig`` is used as is).
- ``emulator_factory``: ``await emulator_factory(config=None, **changes)`` starts one more emulator
  (all stopped at teardown), e.g. one per model or with ``api_key="k"``.
- ``redis_server`` / ``redis_url``: a fresh ``redis-server`` for one test (``RedisServer``: ``.url``,
  ``.kill()``, ``.restart()``, ``.pause()``, ``.resume()``, ``.client()``), killed at teardown.
  Without a ``redis-server`` binary every test that needs one (through these fixtures or by starting
  ``RedisServer``/``LocalRedisCluster`` itself) is reported as not run, all of them in one line of the
  summary that names the package to install, instead of a traceback each; under ``CI`` (set to
  anything) they fail instead, in that one line each: a CI that lost its redis-server must not pass.
- ``redis_cluster``: a local Redis Cluster (3 primaries + 3 replicas, ``LocalRedisCluster``: ``.url``,
  ``.urls``, ``.kill_primary()``, ``.wait_for_failover()``, ``.heal()``, ``.flushall()``,
  ``.client()``) and ``redis_sentinel``: a primary, 2 replicas and 3 Sentinels (``SentinelSet``:
  ``.sentinel_addresses``, ``.service_name``, ``.kill_primary()``, ``.wait_for_failover()``,
  ``.heal()``). Each is started once per session, on first use (~2 s), and healed before every test
  that asks for it (a node an earlier test killed is back, the set whole); tests keep their data
  apart with their own key prefixes, or ``flushall()``.
- ``echo_llm``: an ``EchoChatModel`` to pass as ``LLMRails(config, llm=echo_llm)``.

To point a whole config at emulators instead, use ``guardcache.testing.emulated``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator, Mapping
from typing import Any

import pytest
import pytest_asyncio

from guardcache.emulator import EmulatorConfig, EmulatorServer, LatencyConfig
from guardcache.testing.main_model import EchoChatModel
from guardcache.testing.redis_cluster import LocalRedisCluster, SentinelSet
from guardcache.testing.redis_server import INSTALL_HINT, RedisServer, RedisServerNotFound

EmulatorFactory = Callable[..., Awaitable[EmulatorServer]]
"""The type of the ``emulator_factory`` fixture."""

TEST_EMULATOR_CONFIG = EmulatorConfig(port=0, latency=LatencyConfig(time_scale=0))
"""The fixtures' emulator: a free port, no modelled latency."""


@pytest_asyncio.fixture
async def emulator_factory() -> AsyncIterator[EmulatorFactory]:
    """``await factory(config=None, **changes)`` -> a started emulator, stopped at teardown."""
    started: list[EmulatorServer] = []

    async def factory(config: EmulatorConfig | None = None, /, **changes: Any) -> EmulatorServer:
        base = config if config is not None else TEST_EMULATOR_CONFIG
        server = EmulatorServer(base.merged(**changes) if changes else base)
        await server.start()
        started.append(server)
        return server

    yield factory
    for server in reversed(started):
        await server.stop()


@pytest_asyncio.fixture
async def emulator(request: pytest.FixtureRequest, emulator_factory: EmulatorFactory) -> EmulatorServer:
    """A started emulator at ``time_scale=0`` (see the module docstring to change its config)."""
    param = getattr(request, "param", None)
    if isinstance(param, EmulatorConfig):
        return await emulator_factory(param)
    if isinstance(param, Mapping):
        return await emulator_factory(**param)
    return await emulator_factory()


@pytest.fixture
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A fresh ``redis-server`` for one test (started, PING answered), killed at teardown."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start_on_free_port()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The URL of ``redis_server``."""
    return redis_server.url


@pytest.fixture(scope="session")
def _redis_cluster_of_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRedisCluster]:
    cluster = LocalRedisCluster(tmp_path_factory.mktemp("redis-cluster"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def redis_cluster(_redis_cluster_of_session: LocalRedisCluster) -> LocalRedisCluster:
    """A local Redis Cluster, 3 primaries + 3 replicas (one per session, healed for each test)."""
    _redis_cluster_of_session.heal()
    return _redis_cluster_of_session


@pytest.fixture(scope="session")
def _redis_sentinel_of_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSet]:
    sentinels = SentinelSet(tmp_path_factory.mktemp("redis-sentinel"))
    sentinels.start()
    try:
        yield sentinels
    finally:
        sentinels.stop()


@pytest.fixture
def redis_sentinel(_redis_sentinel_of_session: SentinelSet) -> SentinelSet:
    """A primary, 2 replicas and 3 Sentinels (one set per session, healed for each test)."""
    _redis_sentinel_of_session.heal()
    return _redis_sentinel_of_session


NO_REDIS_SERVER = f"not run: {INSTALL_HINT}"
"""The one line a test that needed ``redis-server`` reports when there is none."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A missing ``redis-server`` is one fact about the machine, not a failure of each test that
    needs it: its tests are reported with the same one-line reason and location, so the summary
    folds them into one line (``SKIPPED [N] ...: not run: redis-server is not installed ...``).
    Under ``CI`` they stay failures (with that line, no traceback)."""
    report = yield
    if call.excinfo is not None and call.excinfo.errisinstance(RedisServerNotFound):
        if os.environ.get("CI"):
            report.outcome = "failed"
            report.longrepr = NO_REDIS_SERVER
        else:
            report.outcome = "skipped"
            report.longrepr = (__file__, 0, NO_REDIS_SERVER)
    return report


@pytest.fixture
def echo_llm() -> EchoChatModel:
    """A fake main model that echoes the last message."""
    return EchoChatModel()


__all__ = [
    "TEST_EMULATOR_CONFIG",
    "EmulatorFactory",
    "echo_llm",
    "emulator",
    "emulator_factory",
    "redis_cluster",
    "redis_sentinel",
    "redis_server",
    "redis_url",
]
