"""The demo's table: the two passes side by side, with the ratio, per guard model and per rail."""

from __future__ import annotations

from guardcache.demo.runner import GUARDS, MODEL_LABELS, RAIL_LABELS, RAILS, PassResult

Row = tuple[str, str, str, float | None, float | None]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


def _count(label: str, off: int, on: int, ratio: bool = True) -> Row:
    return (label, str(off), str(on), off if ratio else None, on if ratio else None)


def _heading(label: str) -> Row:
    return (label, "", "", None, None)


def table_rows(off: PassResult, on: PassResult) -> list[Row]:
    """(label, caching off, caching on, ratio numerator/denominator or None)."""
    rows: list[Row] = [_heading("guard backend calls")]
    rows += [_count(f"  {MODEL_LABELS[g]}", off.calls[g], on.calls[g]) for g in GUARDS]
    rows.append(_count("  total", off.guard_calls, on.guard_calls))
    rows.append(_count("main LLM calls", off.calls["main"], on.calls["main"], ratio=False))
    rows.append(_heading("cache hit rate"))
    rows += [
        (f"  {MODEL_LABELS[g]}", _rate(off.hit_rate(g)), _rate(on.hit_rate(g)), None, None) for g in GUARDS
    ]
    rows.append(("  all guard checks", _rate(off.hit_rate()), _rate(on.hit_rate()), None, None))
    for label, q in (("p50", 0.50), ("p95", 0.95), ("p99", 0.99)):
        rows.append((f"turn latency {label}", _ms(off.pct(q)), _ms(on.pct(q)), off.pct(q), on.pct(q)))
    rows.append(("wall time", f"{off.wall:.1f} s", f"{on.wall:.1f} s", off.wall, on.wall))
    off_tokens, on_tokens = sum(off.prompt_tokens.values()), sum(on.prompt_tokens.values())
    rows.append(_count("guard prompt tokens (server)", off_tokens, on_tokens))
    rows.append(
        _count(
            "  of which KV-cache reused",
            sum(off.cached_prompt_tokens.values()),
            sum(on.cached_prompt_tokens.values()),
            ratio=False,
        )
    )
    rows.append(_count("refused turns", off.refused_total, on.refused_total, ratio=False))
    rows += [_count(f"  {RAIL_LABELS[r]}", off.refused.get(r, 0), on.refused.get(r, 0), False) for r in RAILS]
    if off.refused.get("?") or on.refused.get("?"):  # a rail the demo does not know (not expected)
        rows.append(_count("  another rail", off.refused.get("?", 0), on.refused.get("?", 0), False))
    if off.failed_checks or on.failed_checks:
        rows.append(_count("checks without a verdict", off.failed_checks, on.failed_checks, False))
    return rows


def render_table(off: PassResult, on: PassResult) -> str:
    rows = table_rows(off, on)
    width = max(len(r[0]) for r in rows)
    lines = [f"{'':{width}}  {'caching off':>14}  {'caching on':>14}  {'on/off':>7}"]
    lines.append("-" * len(lines[0]))
    for label, a, b, x, y in rows:
        ratio = f"{y / x:.2f}x" if x and y is not None else ""
        lines.append(f"{label:{width}}  {a:>14}  {b:>14}  {ratio:>7}".rstrip())
    return "\n".join(lines)


def render_log_lines(on: PassResult) -> str:
    """The caching-on pass's ``LFU Cache Statistics`` lines, each after the model whose cache wrote it,
    grouped by model in table order (each group in time order)."""
    width = max(len(MODEL_LABELS[g]) for g in GUARDS) + 1
    out = []
    order = {g: i for i, g in enumerate(GUARDS)}
    for model, line in sorted(on.log_lines, key=lambda ml: order.get(ml[0], len(order))):
        label = MODEL_LABELS.get(model, model)
        out.append(f"  {label + ':':{width}} {line}")
    return "\n".join(out)


__all__ = ["render_log_lines", "render_table", "table_rows"]
