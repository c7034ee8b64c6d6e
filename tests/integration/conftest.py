"""Shared fixtures for integration tests: a real NIM emulator on a free loopback port.

``emulator``: a started in-process ``EmulatorServer`` at ``time_scale=0`` (no modelled delays),
stopped after the test. Override its config with indirect parametrization, e.g.::

    @pytest.mark.parametrize("emulator", [{"kv_cache": {"reuse": "off"}}], indirect=True)

(a dict is merged into the test default with ``EmulatorConfig.merged``; an ``EmulatorConfig`` is used
as is). ``emulator_factory``: start any number of emulators in one test::

    emu = await emulator_factory(latency={"time_scale": 0.5}, api_key="k")
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import pytest

from guardcache.emulator import EmulatorConfig, EmulatorServer, LatencyConfig
from tests.integration.redis_support import redis_server, redis_url  # noqa: F401  (fixtures for every test)

EmulatorFactory = Callable[..., Awaitable[EmulatorServer]]

TEST_DEFAULT_CONFIG = EmulatorConfig(port=0, latency=LatencyConfig(time_scale=0))


@pytest.fixture
async def emulator_factory() -> AsyncIterator[EmulatorFactory]:
    """``await factory(config=None, **changes)`` -> a started emulator, stopped at teardown."""
    started: list[EmulatorServer] = []

    async def factory(config: EmulatorConfig | None = None, /, **changes: Any) -> EmulatorServer:
        base = config if config is not None else TEST_DEFAULT_CONFIG
        server = EmulatorServer(base.merged(**changes) if changes else base)
        await server.start()
        started.append(server)
        return server

    yield factory
    for server in reversed(started):
        await server.stop()


@pytest.fixture
async def emulator(request: pytest.FixtureRequest, emulator_factory: EmulatorFactory) -> EmulatorServer:
    """A started emulator at ``time_scale=0`` (see the module docstring to change its config)."""
    param = getattr(request, "param", None)
    if isinstance(param, EmulatorConfig):
        return await emulator_factory(param)
    if isinstance(param, Mapping):
        return await emulator_factory(**param)
    return await emulator_factory()
