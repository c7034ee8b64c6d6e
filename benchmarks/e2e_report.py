"""Results of ``bench_e2e.py``: what a workload implies, what one pass measured, and the tables.

Kept apart from the runner so each file stays small; nothing here is imported by the library or tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from e2e_micro import Cost, FleetThroughput, Throughput
from e2e_support import MODE_NAMES, MODES, answer_for, norm, pct, ratio, table

from guardcache.demo.workload import Turn


@dataclass(frozen=True, slots=True)
class Expected:
    """What the workload implies: distinct checks (the floor of backend calls) and blocked turns."""

    distinct_input: int
    distinct_output: int
    unsafe_turns: int
    unique_turns: int

    @property
    def distinct(self) -> int:
        return self.distinct_input + self.distinct_output

    @classmethod
    def of(cls, workload: Sequence[Turn]) -> Expected:
        """Input keys: normalized user texts. Output keys: normalized (user, bot) pairs of the turns
        the input rail lets through (the emulator's policy blocks exactly the ``unsafe`` ones)."""
        inputs = {norm(t.text) for t in workload}
        outputs = {(norm(t.text), norm(answer_for(t.text))) for t in workload if not t.unsafe}
        return cls(
            len(inputs), len(outputs), sum(t.unsafe for t in workload), sum(t.unique for t in workload)
        )


@dataclass
class Cell:
    """One mode's measurements on one workload."""

    mode: str
    alpha: float
    concurrency: int
    turns: int
    wall: float = 0.0
    latencies: list[float] = field(default_factory=list)
    calls: int = 0
    failed_calls: int = 0
    refused: int = 0
    hits: int = 0
    misses: int = 0
    coalesced: int = 0
    client_cpu: float = 0.0  # seconds of this process's CPU during the pass
    guard_cpu: float | None = None  # seconds of the emulator process's CPU (Linux /proc), if known
    retries: int = 0  # client retry warnings during the pass (a retried call is one emulator request)
    other_cores: float | None = None  # cores other processes kept busy during the pass (noise)
    pass_calls: list[int] = field(default_factory=list)  # with --repeat: every pass's backend calls
    pass_tput: list[float] = field(default_factory=list)  # with --repeat: every pass's turns/s

    def exact(self, exp: Expected) -> bool:
        """Every pass made exactly one backend call per distinct check, and none failed."""
        return not self.failed_calls and all(n == exp.distinct for n in self.pass_calls or [self.calls])

    @property
    def tput_text(self) -> str:
        """Turns/s, with the range over passes when there were several."""
        if len(self.pass_tput) > 1:
            return f"{self.throughput:.1f} ({min(self.pass_tput):.0f}-{max(self.pass_tput):.0f})"
        return f"{self.throughput:.1f}"

    @property
    def hit_rate(self) -> float | None:
        total = self.hits + self.misses
        return self.hits / total if total else None

    @property
    def throughput(self) -> float:
        return self.turns / self.wall if self.wall else 0.0

    @property
    def cpu_ms_per_turn(self) -> float:
        return self.client_cpu / self.turns * 1000

    @property
    def p50_ms(self) -> float:
        return pct(self.latencies, 0.50) * 1000

    @property
    def p99_ms(self) -> float:
        return pct(self.latencies, 0.99) * 1000


# -- reporting ----------------------------------------------------------------------------------------


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def cell_table(cells: dict[str, Cell], exp: Expected) -> str:
    rows: list[list[object]] = []
    for mode in MODES:
        c = cells[mode]
        rows.append(
            [
                MODE_NAMES[mode],
                c.calls,
                f"{c.calls / c.turns:.2f}",
                f"{c.calls - exp.distinct:+d}",
                _rate(c.hit_rate),
                c.coalesced if mode == "c" else "-",
                f"{c.p50_ms:.1f}",
                f"{c.p99_ms:.1f}",
                c.tput_text,
                f"{c.cpu_ms_per_turn:.2f}",
                "-" if c.guard_cpu is None else f"{c.guard_cpu / max(c.calls, 1) * 1000:.2f}",
                c.refused,
                c.retries,
                "-" if c.other_cores is None else f"{c.other_cores:.2f}",
            ]
        )
    a, b, c = cells["a"], cells["b"], cells["c"]
    for name, den in (("(c)/(a)", a), ("(c)/(b)", b)):
        rows.append(
            [
                name,
                ratio(c.calls, den.calls),
                "",
                "",
                "",
                "",
                ratio(c.p50_ms, den.p50_ms),
                ratio(c.p99_ms, den.p99_ms),
                ratio(c.throughput, den.throughput),
                ratio(c.cpu_ms_per_turn, den.cpu_ms_per_turn),
                "",
                "",
                "",
                "",
            ]
        )
    headers = ["mode", "calls", "calls/turn", "vs distinct", "hit rate", "coalesced"]
    headers += ["p50 ms", "p99 ms", "turns/s", "client cpu ms/turn", "guard cpu ms/call", "refused"]
    headers += ["retries", "other cores"]
    return table(headers, rows)


def overview(all_cells: list[tuple[dict[str, Cell], Expected]]) -> str:
    rows: list[list[object]] = []
    for cells, exp in all_cells:
        a, b, c = cells["a"], cells["b"], cells["c"]
        rows.append(
            [
                f"{a.alpha:g}",
                a.concurrency,
                a.turns,
                exp.distinct,
                a.calls,
                b.calls,
                c.calls,
                f"{b.calls - exp.distinct:+d}",
                _rate(b.hit_rate),
                _rate(c.hit_rate),
                f"{a.p50_ms:.0f}/{b.p50_ms:.0f}/{c.p50_ms:.0f}",
                f"{a.throughput:.0f}/{b.throughput:.0f}/{c.throughput:.0f}",
                ratio(c.throughput, a.throughput),
                ratio(c.throughput, b.throughput),
                "PASS" if c.exact(exp) else "FAIL",
            ]
        )
    headers = ["alpha", "conc", "turns", "distinct", "calls a", "calls b", "calls c", "b excess"]
    headers += ["hit b", "hit c", "p50 ms a/b/c", "turns/s a/b/c", "thr c/a", "thr c/b", "1:exact"]
    return table(headers, rows)


def cost_table(costs: Sequence[Cost]) -> str:
    rows = [[c.layer, f"{c.p50_us:.2f}", f"{c.p99_us:.2f}", f"{c.mean_us:.2f}", c.calls] for c in costs]
    return table(["layer (warm cache, one call at a time)", "p50 us", "p99 us", "mean us", "calls"], rows)


def throughput_table(rows: Sequence[Throughput]) -> str:
    out = [
        [
            r.model,
            r.concurrency,
            r.turns,
            f"{r.guarded:,.0f}",
            f"{r.no_rails:,.0f}",
            f"{r.bare:,.0f}",
            f"{r.middleware_us:.0f}",
            f"{(1 / r.guarded - 1 / r.no_rails) * 1e6:.0f}",
        ]
        for r in rows
    ]
    headers = ["main model", "conc", "turns", "guarded/s", "no-rails/s", "bare/s"]
    return table([*headers, "us/turn added", "of which checks"], out)


def fleet_table(rows: Sequence[FleetThroughput]) -> str:
    out = []
    for r in rows:
        rate, per_process = f"{r.guarded:,.0f}", f"{r.guarded / r.procs:,.0f}"
        out.append([r.procs, r.concurrency, r.procs * r.concurrency, r.turns, rate, per_process])
    headers = ["processes", "conc/process", "conc", "turns/process", "guarded/s", "per process"]
    return table(headers, out)


__all__ = ["Cell", "Expected", "cell_table", "cost_table", "fleet_table", "overview", "throughput_table"]
