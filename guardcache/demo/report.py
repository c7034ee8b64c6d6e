"""The demo's table: the three passes side by side, with ratios, per guard model, per check path
(hit and miss turns apart: where latency comes from) and per rail; then what a refusal looks like
(``render_refusals``) and why caching barely moves p95 (``p95_note``), both from the run's records."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import NamedTuple

from guardcache.demo.runner import GUARDS, MODEL_LABELS, RAIL_LABELS, RAILS, PassResult, percentile

PATH_LABELS = {
    "hit": "hit turns (every check from cache)",
    "input_miss": "input-miss turns (an input check to a NIM)",
    "output_miss": "output-miss turns (only the output check)",
}
"""The check paths of :mod:`guardcache.demo.turns`, as the table names them."""


class Row(NamedTuple):
    """One line: a cell per pass, and the numbers the ratios divide (None: no ratio)."""

    label: str
    cells: tuple[str, ...]
    values: tuple[float | None, ...] = ()


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


def _count(label: str, numbers: Sequence[int], ratio: bool = True) -> Row:
    return Row(label, tuple(str(n) for n in numbers), tuple(numbers) if ratio else ())


def _latency(label: str, seconds: Sequence[float | None]) -> Row:
    return Row(label, tuple(_ms(s) for s in seconds), tuple(seconds))


def _share(tokens: int, share: float | None) -> str:
    return "0" if not tokens else f"{tokens} ({_rate(share)})"


def table_rows(passes: Sequence[PassResult]) -> list[Row]:
    """The rows for ``passes`` (caching off, caching on, caching on + early main)."""
    rows = [Row("guard backend calls", ())]
    rows += [_count(f"  {MODEL_LABELS[g]}", [p.calls[g] for p in passes]) for g in GUARDS]
    rows.append(_count("  total", [p.guard_calls for p in passes]))
    rows.append(_count("main LLM calls (server)", [p.calls["main"] for p in passes], ratio=False))
    rows.append(_count("  cancelled: input blocked", [p.main_work.cancelled for p in passes], ratio=False))
    rows.append(Row("cache hit rate", ()))
    rows += [Row(f"  {MODEL_LABELS[g]}", tuple(_rate(p.hit_rate(g)) for p in passes)) for g in GUARDS]
    rows.append(Row("  all guard checks", tuple(_rate(p.hit_rate()) for p in passes)))
    rows.append(_count("all turns", [p.turns for p in passes], ratio=False))
    for label, q in (("p50", 0.50), ("p95", 0.95), ("p99", 0.99)):
        rows.append(_latency(f"  latency {label}", [p.pct(q) for p in passes]))
    for path, title in PATH_LABELS.items():
        rows.append(_count(title, [p.path_turns(path) for p in passes], ratio=False))
        for label, q in (("p50", 0.50), ("p95", 0.95), ("p99", 0.99)):
            rows.append(_latency(f"  latency {label}", [p.path_pct(path, q) for p in passes]))
    rows.append(_latency("main LLM call alone, p50", [percentile(p.main_seconds, 0.5) for p in passes]))
    rows.append(Row("wall time", tuple(f"{p.wall:.1f} s" for p in passes), tuple(p.wall for p in passes)))
    rows.append(_count("guard prompt tokens (server)", [sum(p.prompt_tokens.values()) for p in passes]))
    rows.append(
        _count(
            "  of which KV-cache reused",
            [sum(p.cached_prompt_tokens.values()) for p in passes],
            ratio=False,
        )
    )
    rows.append(
        Row(
            "main tokens on input-blocked turns",
            tuple(_share(p.wasted_main_tokens, p.wasted_main_share()) for p in passes),
        )
    )
    rows.append(_count("refused turns", [p.refused_total for p in passes], ratio=False))
    rows += [_count(f"  {RAIL_LABELS[r]}", [p.refused.get(r, 0) for p in passes], False) for r in RAILS]
    if any(p.refused.get("?") for p in passes):  # a rail the demo does not know (not expected)
        rows.append(_count("  another rail", [p.refused.get("?", 0) for p in passes], False))
    if any(p.failed_checks for p in passes):
        rows.append(_count("checks without a verdict", [p.failed_checks for p in passes], False))
    return rows


def _ratio(values: tuple[float | None, ...], a: int, b: int) -> str:
    """values[b] / values[a], when both are there and values[a] is not zero."""
    if len(values) <= max(a, b):
        return ""
    x, y = values[a], values[b]
    return f"{y / x:.2f}x" if x and y is not None else ""


def render_table(passes: Sequence[PassResult]) -> str:
    """The passes side by side; ``on/off`` compares the second with the first, ``early/on`` the
    third with the second (the early main start with caching alone)."""
    rows = table_rows(passes)
    width = max(len(r.label) for r in rows)
    names = "".join(f"  {p.name:>13}" for p in passes)
    ratios = f"  {'on/off':>7}" + (f"  {'early/on':>8}" if len(passes) > 2 else "")
    lines = [f"{'':{width}}{names}{ratios}"]
    lines.append("-" * len(lines[0]))
    for row in rows:
        cells = "".join(f"  {c:>13}" for c in row.cells) if row.cells else ""
        ratio = f"  {_ratio(row.values, 0, 1):>7}" + (
            f"  {_ratio(row.values, 1, 2):>8}" if len(passes) > 2 else ""
        )
        lines.append(f"{row.label:{width}}{cells}{ratio if row.cells else ''}".rstrip())
    return "\n".join(lines)


def render_log_lines(on: PassResult) -> str:
    """A pass's ``LFU Cache Statistics`` lines, each after the model whose cache wrote it, grouped by
    model in table order (each group in time order)."""
    width = max(len(MODEL_LABELS[g]) for g in GUARDS) + 1
    out = []
    order = {g: i for i, g in enumerate(GUARDS)}
    for model, line in sorted(on.log_lines, key=lambda ml: order.get(ml[0], len(order))):
        label = MODEL_LABELS.get(model, model)
        out.append(f"  {label + ':':{width}} {line}")
    return "\n".join(out)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


JUDGED = "<- judged"
"""What marks the line of a refusal that holds the text its rail judged."""
JUDGED_WIDTH = 60
"""A judged text is cut to this many characters, on one line."""


def one_line(text: str, width: int = JUDGED_WIDTH) -> str:
    """``text`` on one line (whitespace runs as one space), cut in the middle to ``width``: both ends
    stay, and the end of an answer is often what its rail judged (an answer cut off at "gun")."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    head = (width - 5) // 2
    return f"{flat[:head]} ... {flat[len(flat) - (width - 5 - head) :]}"


def render_refusals(result: PassResult) -> str:
    """The first refused turn of each rail that refused one, as its user saw it: the message, the
    reply given instead of an answer, and the refusing verdict's categories and source (cache or
    NIM); and the text the rail judged, marked (the message for an input rail; for an output rail,
    the main model's answer, on a line of its own). The counts in the table say how often the rails
    refused; this says what a refusal is, and why."""
    if not result.refusals:
        return f"No turn was refused in the {result.name} pass."
    width = max(len(RAIL_LABELS.get(rail, rail)) for rail in result.refusals) + 1
    lines = [
        f"A refused turn of each rail ({result.name} pass, the first in the workload, as its user saw it;",
        f"{JUDGED} marks the text the rail judged: the user's message, or the main model's answer):",
    ]
    for rail in (*RAILS, *sorted(set(result.refusals) - set(RAILS))):
        shown = result.refusals.get(rail)
        if shown is None:
            continue
        source = "from cache" if shown.from_cache else "from the NIM"
        why = f"{', '.join(shown.categories)}; {source}" if shown.categories else source
        label = RAIL_LABELS.get(rail, rail) + ":"
        if shown.judged_from == "user":
            lines.append(f"  {label:{width}} user: {one_line(shown.text)}  {JUDGED}")
        else:
            lines.append(f"  {label:{width}} user: {_clip(' '.join(shown.text.split()), 72)}")
            lines.append(f"  {'':{width}} main: {one_line(shown.judged) or '(no answer recorded)'}  {JUDGED}")
        lines.append(f"  {'':{width}} bot:  {_clip(shown.reply, 48)}  [{why}]")
    return "\n".join(lines)


def p95_note(off: PassResult, on: PassResult) -> str:
    """Why caching barely moves p95 while it cuts p50, told with this run's numbers.

    p95 is the latency the slowest 5% of turns reach. Caching turns repeated texts into hits, which
    cost about the main call alone, but a text seen for the first time (or a new answer) still asks
    its NIM: while such misses are more than 5% of the turns, the turns at and above p95 are misses
    and p95 stays a miss turn's latency (input check, main call, output check). The note counts the
    misses and the turns at or above p95 in the caching-on pass rather than asserting this, and says
    so when a run comes out the other way.
    """
    if not on.turns or not off.turns:
        return ""
    p95_off, p95_on = off.pct(0.95), on.pct(0.95)
    moves = (
        f"caching off -> on: p95 {_ms(p95_off)} -> {_ms(p95_on)}{_times(p95_off, p95_on)}; "
        f"p50 {_ms(off.pct(0.5))} -> {_ms(on.pct(0.5))}{_times(off.pct(0.5), on.pct(0.5))}"
    )
    misses = on.turns - on.path_turns("hit")
    share = f"{misses} of {on.turns} turns ({misses / on.turns:.0%})"
    at_or_above = sum(x >= p95_on for x in on.latencies)
    slow_misses = at_or_above - sum(x >= p95_on for x in on.by_path.get("hit", []))
    if 2 * slow_misses >= at_or_above:
        steady = p95_off and 0.8 <= p95_on / p95_off <= 1.25
        text = (
            f"{'Why p95 barely moves' if steady else 'What sets p95'} ({moves}): {share} still asked "
            f"a NIM with caching on (a text or an answer seen for the first time), more than the 5% "
            f"above p95, so {slow_misses} of the {at_or_above} turns at or above p95 are misses, which "
            "wait for input check, main call and output check in turn; hit turns' p95 is "
            f"{_ms(on.path_pct('hit', 0.95))}, and p95 falls toward it only once under 5% of turns miss."
        )
    else:
        text = (
            f"Why p95 moves ({moves}): only {share} asked a NIM with caching on, so "
            f"{at_or_above - slow_misses} of the {at_or_above} turns at or above p95 are hits."
        )
    return textwrap.fill(text, width=100)


def _times(before: float, after: float) -> str:
    return f", {after / before:.2f}x" if before else ""


__all__ = [
    "JUDGED",
    "JUDGED_WIDTH",
    "PATH_LABELS",
    "Row",
    "one_line",
    "p95_note",
    "render_log_lines",
    "render_refusals",
    "render_table",
    "table_rows",
]
