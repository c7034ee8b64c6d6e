"""Point a rails config at emulated NIMs: one emulator per model, for examples and your own tests.

    async with emulated(RailsConfig.from_path("config")) as (config, servers):
        rails = LLMRails(config)

Every model of the config (and a JailbreakDetect NIM named in ``rails.config``) gets its own
emulator on a free loopback port (so backend calls can be counted per model), and the returned
config is the same one with its base URLs replaced. A model a vision rail runs on (its prompt passes
``{{ user_input }}`` whole: NeMo's ``content_safety_vision``) gets a vision safety guard
(``vision``, ``safety_guard``), and the main model of such a config takes images too (``vision``:
the images the rails judged reach it).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from guardcache.config import RailsConfig
from guardcache.config.prompts import judges_images
from guardcache.flows import KNOWN_FLOWS

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
        vision = vision_model_types(config)
        for endpoint in config.endpoint_types():  # the models, and a JailbreakDetect NIM if used
            emu_config = EmulatorConfig(
                port=0,
                model=names.get(endpoint, "nvidia/nemoguard-jailbreak-detect"),
                latency=LatencyConfig(time_scale=time_scale),
                vision=endpoint in vision or (endpoint == "main" and bool(vision)),
                safety_guard=endpoint in vision,
            )
            servers[endpoint] = await stack.enter_async_context(EmulatorServer(emu_config))
        yield config.with_base_urls({t: s.base_url for t, s in servers.items()}), servers


def vision_model_types(config: RailsConfig) -> set[str]:
    """The model types a vision rail of ``config`` runs on (``config.prompts.judges_images``)."""
    found: set[str] = set()
    for group in config.rail_groups():
        for ref in group.flow_refs():
            spec = KNOWN_FLOWS[ref.name]
            model_type = config.model_type_for(ref)
            if model_type is None or spec.prompt_task is None:
                continue
            if judges_images(spec, config.prompt_for(spec.prompt_task, model_type)):
                found.add(model_type)
    return found


__all__ = ["emulated", "vision_model_types"]
