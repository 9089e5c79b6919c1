"""What one wq run measured: the result record and its latency percentiles."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an already sorted list (NaN when empty)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass
class Latency:
    """Percentiles of one interval, in milliseconds."""

    count: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, seconds: list[float]) -> Latency:
        """The percentiles of these durations, given in seconds."""
        values = sorted(seconds)
        return cls(
            count=len(values),
            p50_ms=percentile(values, 0.50) * 1000,
            p90_ms=percentile(values, 0.90) * 1000,
            p99_ms=percentile(values, 0.99) * 1000,
            max_ms=(values[-1] if values else math.nan) * 1000,
        )


@dataclass
class WqResult:
    """What one wq run measured."""

    phase: str
    items: int
    projects: int
    workers: int
    batch: int
    rate: float | None
    replicas: int
    processes: int
    cheap: bool
    submit_seconds: float
    submit_per_second: float
    process_seconds: float
    items_per_second: float
    wall_seconds: float
    cpu_seconds: float
    cpu_ms_per_item: float
    database_cpu_ms_per_item: float
    machine_cores_busy: float | None
    latency: dict[str, Latency]
    statements_per_item: dict[str, dict[str, float]] = field(default_factory=dict)
    anomalies: list[str] = field(default_factory=list)
