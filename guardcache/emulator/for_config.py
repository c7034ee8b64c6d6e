"""Point a rails config at emulated NIMs: one emulator per model, for examples and your own tests.

    async with emulated(RailsConfig.from_path("config")) as (config, servers):
        rails = LLMRails(config)

Every model of the config gets its own emulator on a free loopback port (so backend calls can be
counted per model), and the returned config is the same one with its base URLs replaced.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from guardcache.config import RailsConfig

from .config import EmulatorConfig, LatencyConfig
from .server import EmulatorServer


@contextlib.asynccontextmanager
async def emulated(
    config: RailsConfig, *, time_scale: float = 1.0
) -> AsyncIterator[tuple[RailsConfig, dict[str, EmulatorServer]]]:
    """Start an emulator for each model of ``config``; yields the re-pointed config and the servers."""
    async with contextlib.AsyncExitStack() as stack:
        servers: dict[str, EmulatorServer] = {}
        for model in config.models:
            emu_config = EmulatorConfig(
                port=0, model=model.model, latency=LatencyConfig(time_scale=time_scale)
            )
            servers[model.type] = await stack.enter_async_context(EmulatorServer(emu_config))
        yield config.with_base_urls({t: s.base_url for t, s in servers.items()}), servers


__all__ = ["emulated"]
