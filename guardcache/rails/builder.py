"""Start-up: turn a validated config into clients, caches and rails, once.

Everything the per-request path needs is resolved here (prompts selected, namespaces digested,
clients created), so a turn does no config work.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from guardcache.cache import CacheInterface
from guardcache.cache.snapshot import Snapshotter
from guardcache.checks.catalog import BUILDERS, PARSERS
from guardcache.checks.check import Check, LLMCheck
from guardcache.config import RailGroup, RailsConfig
from guardcache.config.models import ModelConfig
from guardcache.errors import ConfigError
from guardcache.flows import KNOWN_FLOWS, FlowRef
from guardcache.llm.client import ChatClient
from guardcache.llm.transport_contract import CHECK_LIMITS, MAIN_LIMITS
from guardcache.rails.caches import build_caches
from guardcache.rails.rail import Rail
from guardcache.rails.snapshots import open_snapshots

PROVIDERS = {"nim": "nim", "nvidia_ai_endpoints": "nim", "openai": "openai", "vllm_openai": "vllm"}


def build_client(model: ModelConfig) -> ChatClient:
    """The OpenAI-compatible client of a model: its transport settings (URL, whole-check timeout,
    retries, headers), parsed from its parameters when the config was validated
    (``ModelConfig.transport``); connections pooled per base URL and event loop."""
    return ChatClient.from_settings(
        model.transport,
        model=model.model,
        api_key=model.api_key(),
        provider=PROVIDERS.get(model.engine, model.engine),
        # A guard's answer is a verdict of a few tokens; the main model's can be long.
        limits=MAIN_LIMITS if model.type == "main" else CHECK_LIMITS,
        key_note=model.unsent_key_note(),
        tool_calls=model.type == "main",  # the main model may call tools; a guard's answer is text
    )


@dataclass
class Runtime:
    """The built pieces of one config."""

    clients: dict[str, ChatClient] = field(default_factory=dict)
    caches: dict[str, CacheInterface] = field(default_factory=dict)
    input_rails: list[Rail] = field(default_factory=list)
    output_rails: list[Rail] = field(default_factory=list)
    tool_input_rails: list[Rail] = field(default_factory=list)  # NeMo's rails.tool_input (tool results)
    tool_output_rails: list[Rail] = field(default_factory=list)  # rails.tool_output (tool calls)
    # Warm restarts: a started snapshotter per cache with cache.snapshot (rails/snapshots.py).
    snapshots: list[Snapshotter] = field(default_factory=list)


def build_check(config: RailsConfig, ref: FlowRef, runtime: Runtime) -> Check:
    """The check of one flow, found generically: the builder its check folder names (the catalog's
    ``BUILDERS``), else an ``LLMCheck`` on the model, prompt and parser its spec names. Every check
    shares the config-wide settings and input limit."""
    spec = KNOWN_FLOWS[ref.name]
    model_type = config.model_type_for(ref)
    # A flow whose model entry is optional (the JailbreakDetect NIM) has a cache under its type
    # without one (caches.planned_caches).
    cache_type = model_type or next(iter(spec.models), None)
    cache = runtime.caches.get(cache_type) if cache_type is not None else None
    limit = config.rails.max_input_chars
    where = config.source or "<config>"
    build = BUILDERS.get(ref.name)  # a check folder that is not a chat check names its builder
    if build is not None:
        return build(config, spec, cache, limit, PARSERS[spec.default_parser or ""])
    if model_type is None or spec.prompt_task is None:  # validated at load; kept for safety
        raise ConfigError(f"{where}: flow {ref.text!r} has no model to run on")
    model = config.model(model_type)
    prompt = config.prompt_for(spec.prompt_task, model_type)
    parser_name = prompt.output_parser or spec.default_parser or ""
    parser = PARSERS.get(parser_name)
    if parser is None:
        known = ", ".join(sorted(PARSERS))
        raise ConfigError(
            f"{where}: prompt {prompt.task!r}: unknown output_parser {prompt.output_parser!r} "
            f"(known: {known})"
        )
    return LLMCheck(
        spec=spec,
        prompt=prompt,
        parser=parser,
        client=runtime.clients[model_type],
        cache=cache,
        model_type=model_type,
        model_name=model.model,
        generation=model.generation,
        settings=config.template_settings(),
        max_input_chars=limit,
        cache_version=model.cache.version,
    )


def _rails(config: RailsConfig, group: RailGroup, runtime: Runtime) -> list[Rail]:
    return [
        Rail(
            ref=ref,
            spec=KNOWN_FLOWS[ref.name],
            check=build_check(config, ref, runtime),
            on_error=group.on_error,
        )
        for ref in group.flow_refs()
    ]


def build_runtime(config: RailsConfig) -> Runtime:
    """Clients for every model, a verdict cache for every guard model (``caches.planned_caches``:
    never the main model's answers), and the input and output rails in config order."""
    runtime = Runtime()
    for model in config.models:
        runtime.clients[model.type] = build_client(model)
    runtime.caches = build_caches(config)
    runtime.input_rails = _rails(config, config.rails.input, runtime)
    runtime.output_rails = _rails(config, config.rails.output, runtime)
    runtime.tool_input_rails = _rails(config, config.rails.tool_input, runtime)
    runtime.tool_output_rails = _rails(config, config.rails.tool_output, runtime)
    # Loaded once the checks exist: a snapshot's identity is their namespaces.
    runtime.snapshots = open_snapshots(
        config,
        runtime.caches,
        [
            *runtime.input_rails,
            *runtime.output_rails,
            *runtime.tool_input_rails,
            *runtime.tool_output_rails,
        ],
    )
    return runtime


__all__ = ["Runtime", "build_client", "build_runtime"]
