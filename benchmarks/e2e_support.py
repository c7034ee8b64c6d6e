"""Building blocks of ``bench_e2e.py``: the fake main model, the get-then-put cache, configs, stats.

Kept apart from the runner so each file stays small; nothing here is imported by the library or tests.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any

from guardcache import LLMRails, RailsConfig
from guardcache.cache import MISSING, CacheInterface, CacheStats, ComputeFn, LFUCache, normalize_text
from guardcache.testing import EchoChatModel as TestingEchoChatModel

GUARD_MODEL = "nvidia/llama-3.1-nemoguard-8b-content-safety"
CACHE_MAXSIZE = 100_000  # larger than any workload: no eviction may blur the call counts
INPUT_FLOW = "content safety check input $model=content_safety"
OUTPUT_FLOW = "content safety check output $model=content_safety"

MODES: tuple[str, ...] = ("a", "b", "c")
MODE_NAMES: dict[str, str] = {"a": "(a) no cache", "b": "(b) get+put", "c": "(c) guardcache"}


# -- the main model -----------------------------------------------------------------------------


ANSWER_PREFIX = "Happy to help. Here are a few practical steps for: "


def answer_for(text: str) -> str:
    """The fake main model's deterministic, safe reply (it echoes the question, whitespace and all)."""
    return ANSWER_PREFIX + text


class EchoChatModel(TestingEchoChatModel):
    """``guardcache.testing.EchoChatModel`` answering :func:`answer_for`: a native ``_agenerate``
    that sleeps ``delay_s`` (never when 0) then echoes, so its cost is LangChain's ``ainvoke`` only."""

    prefix: str = ANSWER_PREFIX


# -- mode (b): the peer library's get -> call -> put ----------------------------------------------


class GetThenPutCache(CacheInterface):
    """An ``LFUCache`` used the way NeMo Guardrails uses its model cache: ``get``, on a miss await the
    call, then ``put``. No single flight: N concurrent askers of one missing key make N calls (and
    N misses, N-1 of them followed by an update of the same key)."""

    def __init__(self, maxsize: int) -> None:
        self.inner = LFUCache(maxsize, track_stats=True)

    def get(self, key: Hashable, default: Any = None) -> Any:
        return self.inner.get(key, default)

    def put(self, key: Hashable, value: Any) -> None:
        self.inner.put(key, value)

    def contains(self, key: Hashable) -> bool:
        return self.inner.contains(key)

    def size(self) -> int:
        return self.inner.size()

    def clear(self) -> None:
        self.inner.clear()

    @property
    def maxsize(self) -> int:
        return self.inner.maxsize

    def get_stats(self) -> CacheStats:
        return self.inner.get_stats()

    def reset_stats(self) -> None:
        self.inner.reset_stats()

    def log_stats_now(self) -> None:
        self.inner.log_stats_now()

    def supports_stats_logging(self) -> bool:
        return False

    async def get_or_compute(self, key: Hashable, compute_fn: ComputeFn, default: Any = MISSING) -> Any:
        value = self.inner.get(key, MISSING)
        if value is not MISSING:
            return value
        try:
            value = compute_fn()
            if inspect.isawaitable(value):
                value = await value
        except Exception:
            if default is not MISSING:
                return default
            raise
        self.inner.put(key, value)
        return value


def install_get_then_put(rails: LLMRails) -> None:
    """Swap every model cache of ``rails`` for a :class:`GetThenPutCache`.

    Benchmark-only surgery: ``LLMRails`` builds its caches at construction (``rails._runtime.caches``,
    the same dict as ``rails.model_caches``) and hands each ``LLMCheck`` its model's cache as
    ``check.cache``. Both references are replaced, so checks and stats see the same store.
    """
    rails_list = [*rails._runtime.input_rails, *rails._runtime.output_rails]
    for model_type, old in list(rails.model_caches.items()):
        new = GetThenPutCache(old.maxsize)
        rails.model_caches[model_type] = new  # the same dict object as rails._runtime.caches
        for rail in rails_list:
            if rail.check.cache is old:
                rail.check.cache = new
        close = getattr(old, "close", None)
        if close is not None:
            close()


# -- configs --------------------------------------------------------------------------------------


def rails_config(guard_url: str, *, cache: bool, output: bool = True, input_: bool = True) -> RailsConfig:
    """Content-safety input (and output) rails on the guard emulator; no main model (passed as llm=)."""
    cache_block = f"{{enabled: true, maxsize: {CACHE_MAXSIZE}}}" if cache else "{enabled: false}"
    inputs = f"[{INPUT_FLOW}]" if input_ else "[]"
    outputs = f"[{OUTPUT_FLOW}]" if output else "[]"
    return RailsConfig.from_content(
        yaml_content=f"""
models:
  - type: content_safety
    engine: nim
    model: {GUARD_MODEL}
    parameters: {{base_url: "{guard_url}"}}
    cache: {cache_block}
rails:
  input: {{flows: {inputs}}}
  output: {{flows: {outputs}}}
""",
        source="<bench_e2e>",
    )


def make_rails(mode: str, guard_url: str, llm: Any | None, *, output: bool = True) -> LLMRails:
    """Rails for one mode: (a) ``cache.enabled: false``, (b) get-then-put, (c) guardcache as shipped."""
    rails = LLMRails(rails_config(guard_url, cache=mode != "a", output=output), llm=llm)
    if mode == "b":
        install_get_then_put(rails)
    return rails


def user_turn(rails: LLMRails) -> Callable[[str], Awaitable[Any]]:
    """``turn(text)``: one ``generate_async`` turn of ``rails`` with ``text`` as the user message."""

    async def turn(text: str) -> Any:
        return await rails.generate_async([{"role": "user", "content": text}])

    return turn


def close_caches(rails: LLMRails) -> None:
    """Stop any periodic reporting of the rails' caches (none is configured; kept for hygiene)."""
    for cache in rails.model_caches.values():
        close = getattr(cache, "close", None)
        if close is not None:
            close()


# -- numbers --------------------------------------------------------------------------------------


def norm(text: str) -> str:
    """The library's own whitespace normalization (what cache keys are built from)."""
    return normalize_text(text)


def pct(data: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of ``data`` (0 for no data); ``q`` in [0, 1]."""
    if not data:
        return 0.0
    ordered = sorted(data)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def ratio(num: float | None, den: float | None) -> str:
    """``num/den`` as ``x0.31``, or ``-`` when undefined."""
    if num is None or den is None or den == 0:
        return "-"
    return f"x{num / den:.2f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "  ") -> str:
    """Right-aligned columns (the first left-aligned), one header rule."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        first = values[0].ljust(widths[0])
        rest = [v.rjust(w) for v, w in zip(values[1:], widths[1:], strict=True)]
        return indent + "  ".join([first, *rest])

    out = [line(list(headers)), indent + "  ".join("-" * w for w in widths)]
    out.extend(line(r) for r in cells)
    return "\n".join(out)


__all__ = [
    "MODES",
    "MODE_NAMES",
    "EchoChatModel",
    "GetThenPutCache",
    "answer_for",
    "close_caches",
    "install_get_then_put",
    "make_rails",
    "norm",
    "pct",
    "rails_config",
    "ratio",
    "table",
]
