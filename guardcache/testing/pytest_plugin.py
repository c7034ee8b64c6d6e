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
  ``.kill()``, ``.restart()``, ``.pause()``, ``.resume()``, ``.client()``), killed at teardown. A
  missing binary FAILS the test: a silent skip would hide what the test was for.
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

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any

import pytest
import pytest_asyncio

from guardcache.emulator import EmulatorConfig, EmulatorServer, LatencyConfig
from guardcache.testing.main_model import EchoChatModel
from guardcache.testing.redis_cluster import LocalRedisCluster, SentinelSet
from guardcache.testing.redis_server import RedisServer, RedisServerNotFound

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
    try:
        server = RedisServer(tmp_path_factory.mktemp("redis"))
    except RedisServerNotFound as exc:
        pytest.fail(str(exc), pytrace=False)
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
    try:
        cluster = LocalRedisCluster(tmp_path_factory.mktemp("redis-cluster"))
    except RedisServerNotFound as exc:
        pytest.fail(str(exc), pytrace=False)
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
    try:
        sentinels = SentinelSet(tmp_path_factory.mktemp("redis-sentinel"))
    except RedisServerNotFound as exc:
        pytest.fail(str(exc), pytrace=False)
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
