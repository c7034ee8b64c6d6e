"""The demo's table: the two passes side by side, with the ratio."""

from __future__ import annotations

from guardcache.demo.runner import PassResult


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def render_table(off: PassResult, on: PassResult) -> str:
    def hit(r: PassResult) -> str:
        return "-" if r.hit_rate is None else f"{r.hit_rate:.2%}"

    rows = [
        ("guard backend calls", str(off.guard_calls), str(on.guard_calls), off.guard_calls, on.guard_calls),
        ("main LLM calls", str(off.main_calls), str(on.main_calls), None, None),
        ("cache hit rate", hit(off), hit(on), None, None),
        ("turn latency p50", _ms(off.pct(0.50)), _ms(on.pct(0.50)), off.pct(0.50), on.pct(0.50)),
        ("turn latency p95", _ms(off.pct(0.95)), _ms(on.pct(0.95)), off.pct(0.95), on.pct(0.95)),
        ("turn latency p99", _ms(off.pct(0.99)), _ms(on.pct(0.99)), off.pct(0.99), on.pct(0.99)),
        ("wall time", f"{off.wall:.1f} s", f"{on.wall:.1f} s", off.wall, on.wall),
        (
            "guard prompt tokens (server)",
            str(off.guard_prompt_tokens),
            str(on.guard_prompt_tokens),
            off.guard_prompt_tokens,
            on.guard_prompt_tokens,
        ),
        (
            "  of which KV-cache reused",
            str(off.cached_prompt_tokens),
            str(on.cached_prompt_tokens),
            None,
            None,
        ),
        ("refused turns", str(off.refused), str(on.refused), None, None),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"{'':{width}}  {'caching off':>14}  {'caching on':>14}  {'on/off':>7}"]
    lines.append("-" * len(lines[0]))
    for label, a, b, x, y in rows:
        ratio = f"{y / x:.2f}x" if isinstance(x, int | float) and isinstance(y, int | float) and x else ""
        lines.append(f"{label:{width}}  {a:>14}  {b:>14}  {ratio:>7}")
    return "\n".join(lines)


__all__ = ["render_table"]
