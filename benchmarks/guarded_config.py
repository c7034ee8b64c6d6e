"""The YAML of a main model and content-safety rails on one emulator, for the benchmarks that compare a
guarded turn with the same turn without rails (``bench_overhead.py``, ``bench_turn_memory.py``).

A module of its own, importing nothing: ``bench_turn_memory.py``'s measured child processes read it
without loading any other benchmark's imports (which would change the heap they measure).
"""

from __future__ import annotations

MAIN = "meta/llama-3.1-8b-instruct"
GUARD = "nvidia/llama-3.1-nemoguard-8b-content-safety"


def config_yaml(url: str, *, inputs: bool, outputs: bool, main: bool = True, cache: bool = True) -> str:
    """A main model on ``url`` (or none), and the content-safety rails asked for; ``cache``: the
    guard's cache on (maxsize 10,000), or ``enabled: false``."""
    cache_block = "{enabled: true, maxsize: 10000}" if cache else "{enabled: false}"
    main_block = (
        f"""
  - type: main
    engine: nim
    model: {MAIN}
    parameters: {{base_url: "{url}", max_tokens: 24}}"""
        if main
        else ""
    )
    guard_block = (
        f"""
  - type: content_safety
    engine: nim
    model: {GUARD}
    parameters: {{base_url: "{url}"}}
    cache: {cache_block}"""
        if inputs or outputs
        else ""
    )
    flows_in = "[content safety check input $model=content_safety]" if inputs else "[]"
    flows_out = "[content safety check output $model=content_safety]" if outputs else "[]"
    return f"""
models:{main_block}{guard_block}
rails:
  input: {{flows: {flows_in}}}
  output: {{flows: {flows_out}}}
"""


__all__ = ["GUARD", "MAIN", "config_yaml"]
