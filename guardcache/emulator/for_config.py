"""Point a rails config at emulated NIMs: one emulator per model, for examples and your own tests.

    async with emulated(RailsConfig.from_path("config")) as (config, servers):
        rails = LLMRails(config)

Every model of the config (and a JailbreakDetect NIM named in ``rails.config``) gets its own
emulator on a free loopback port (so backend calls can be counted per model), and the returned
config is the same one with its base URLs replaced.
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
        names = {model.type: model.model for model in config.models}
        for endpoint in config.endpoint_types():  # the models, and a JailbreakDetect NIM if used
            emu_config = EmulatorConfig(
                port=0,
                model=names.get(endpoint, "nvidia/nemoguard-jailbreak-detect"),
                latency=LatencyConfig(time_scale=time_scale),
            )
            servers[endpoint] = await stack.enter_async_context(EmulatorServer(emu_config))
        yield config.with_base_urls({t: s.base_url for t, s in servers.items()}), servers


__all__ = ["emulated"]
