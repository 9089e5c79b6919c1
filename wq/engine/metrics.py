"""Prometheus metrics of the engine (served by the daemon at /metrics)."""

from __future__ import annotations

from prometheus_client import Counter

EVENTS = Counter(
    "wq_events_total",
    "Events by outcome (see the README: received, stored, unmatched, applied, ...).",
    ["outcome"],
)


def count_event(outcome: str, amount: int = 1) -> None:
    """Count events with one outcome."""
    if amount:
        EVENTS.labels(outcome=outcome).inc(amount)
