"""Small numeric helpers shared by the benchmarks: percentiles as the README reports them."""

from __future__ import annotations

import math


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 100): a value that was actually observed."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary_ms(seconds: list[float]) -> dict:
    """p50 / p99 / max of latencies given in seconds, in milliseconds (rounded for the README)."""
    return {
        "count": len(seconds),
        "p50_ms": round(percentile(seconds, 50) * 1000, 1),
        "p99_ms": round(percentile(seconds, 99) * 1000, 1),
        "max_ms": round(max(seconds) * 1000, 1) if seconds else float("nan"),
    }
