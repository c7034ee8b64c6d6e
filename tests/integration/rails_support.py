"""Helpers for runtime integration tests: configs pointing at emulators on loopback."""

from __future__ import annotations

from typing import Any

from guardcache import LLMRails, RailsConfig
from guardcache.config.prompts import default_prompts


def guard_config(
    guard_url: str,
    *,
    main_url: str | None = None,
    cache: bool = True,
    maxsize: int = 1000,
    on_error: str = "block",
    timeout: float | None = None,
    extra_models: str = "",
    input_flows: str = "[content safety check input $model=content_safety]",
    output_flows: str = "[content safety check output $model=content_safety]",
    parallel: bool = False,
    prompts_for: tuple[str, ...] = (),
) -> RailsConfig:
    """A config whose content-safety model(s) point at emulators; ``prompts_for`` lists extra model
    types that get the default NemoGuard prompts (NeMo requires a prompt per ``$model=`` type)."""
    main = (
        f"""
  - type: main
    engine: nim
    model: meta/llama-3.1-8b-instruct
    parameters: {{base_url: "{main_url}", max_tokens: 16}}"""
        if main_url
        else ""
    )
    params = f'base_url: "{guard_url}"' + (f", timeout: {timeout}" if timeout else "")
    return RailsConfig.from_content(
        yaml_content=f"""
models:{main}
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    parameters: {{{params}}}
    cache: {{enabled: {str(cache).lower()}, maxsize: {maxsize}, stats: {{enabled: true}}}}
{extra_models}
rails:
  input: {{parallel: {str(parallel).lower()}, on_error: {on_error}, flows: {input_flows}}}
  output: {{on_error: {on_error}, flows: {output_flows}}}
""",
        prompts=[
            {**p.model_dump(exclude_none=True), "task": f"{p.base_task} $model={model_type}"}
            for model_type in prompts_for
            for p in default_prompts()
        ]
        or None,
        source="<test>",
    )


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def rails_for(config: RailsConfig, **kw: Any) -> LLMRails:
    return LLMRails(config, **kw)
