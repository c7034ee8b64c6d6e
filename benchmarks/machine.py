"""A CPU speed probe, printed by the benchmarks next to their absolute figures.

Shared VMs change speed by up to ~2x within minutes (a noisy host, frequency scaling), which the load
average does not show. Absolute targets (us per check, turns/s) move with it; ratios measured side by
side in one round do not. The probe lets a reader tell a slow machine from a slow change.
"""

from __future__ import annotations

import timeit


def speed_probe_us() -> float:
    """Microseconds for ``sum(range(1000))``, best of 5 (~7-10 us on a fast desktop core)."""
    return min(timeit.repeat("sum(range(1000))", number=2000, repeat=5)) / 2000 * 1e6


def describe_speed() -> str:
    return f"speed probe sum(range(1000)) = {speed_probe_us():.1f} us (lower is faster)"


__all__ = ["describe_speed", "speed_probe_us"]
