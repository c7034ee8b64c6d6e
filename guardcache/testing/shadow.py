"""A config with live content-safety rails and shadow ones (another model type, another prompt): what
guardcache's shadow-rail tests and ``benchmarks/bench_shadow.py`` run, and a starting point for
trying a new guard as a shadow (docs/operations.md)."""

from __future__ import annotations

from typing import Any

from guardcache.config.prompts import default_prompts

MAIN_MODEL = "meta/llama-3.1-8b-instruct"
GUARD_MODEL = "nvidia/llama-3.1-nemoguard-8b-content-safety"
SHADOW_IN = "content safety check input $model=content_safety_v2"
SHADOW_OUT = "content safety check output $model=content_safety_v2"
LIVE_IN = "content safety check input $model=content_safety"
LIVE_OUT = "content safety check output $model=content_safety"
SHADOW_POLICY = "categories:\n  Violence: [pineapple]\n"
"""The shadow guard's emulator policy: it calls "pineapple" violent, which the live guard's does not."""


def shadow_yaml(
    main_url: str,
    live_url: str,
    shadow_url: str,
    *,
    sample: float = 1.0,
    max_concurrency: int = 4,
    shadow_timeout: float | None = None,
    close_timeout: float | None = None,
    max_tokens: int = 64,
) -> str:
    """``config.yml`` text: a main model, a live ``content_safety`` guard and a shadow
    ``content_safety_v2`` one (input and output), each at its URL; with :func:`shadow_prompts` as
    its ``prompts.yml``. ``shadow_timeout``: the shadow model's ``parameters.timeout``."""
    timeout = f", timeout: {shadow_timeout}" if shadow_timeout is not None else ""
    close = f", close_timeout: {close_timeout}" if close_timeout is not None else ""
    return f"""
models:
  - type: main
    engine: nim
    model: {MAIN_MODEL}
    parameters: {{base_url: "{main_url}", max_tokens: {max_tokens}}}
  - type: content_safety
    engine: nim
    model: {GUARD_MODEL}
    parameters: {{base_url: "{live_url}"}}
  - type: content_safety_v2
    engine: nim
    model: {GUARD_MODEL}
    parameters: {{base_url: "{shadow_url}"{timeout}}}
rails:
  input: {{flows: [{LIVE_IN}], shadow_flows: [{SHADOW_IN}]}}
  output: {{flows: [{LIVE_OUT}], shadow_flows: [{SHADOW_OUT}]}}
  shadow: {{sample: {sample}, max_concurrency: {max_concurrency}{close}}}
"""


def shadow_prompts() -> list[dict[str, Any]]:
    """content_safety_v2's prompts: NemoGuard's, with a changed first line (a new prompt version)."""
    prompts = []
    for p in default_prompts():
        if p.base_task in ("content_safety_check_input", "content_safety_check_output"):
            prompt = p.model_dump(exclude_none=True)
            prompt["task"] = f"{p.base_task} $model=content_safety_v2"
            assert p.content is not None and p.content.startswith("Task: ")
            prompt["content"] = "Task (prompt v2): " + p.content.removeprefix("Task: ")
            prompts.append(prompt)
    return prompts


def user(text: str) -> list[dict[str, Any]]:
    """One user message, as ``generate_async(messages=...)`` takes it."""
    return [{"role": "user", "content": text}]
