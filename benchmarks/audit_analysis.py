"""Reading a run back from the database the engine wrote to.

How many of the benchmark's items are idle, and from the audit rows the per-item times
(latency percentiles) and anything that does not look right (anomalies).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from noop_type import DIMENSION, TYPE_NAME
from sqlalchemy import Engine, text
from wq_result import Latency


def count_idle(engine: Engine) -> tuple[int, dict[str, int]]:
    """The benchmark's items that are idle, and how many are in each admission state."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT admission, count(*) FROM work_items WHERE type = :type GROUP BY admission"
            ),
            {"type": TYPE_NAME},
        ).all()
    states = {str(state): int(count) for state, count in rows}
    return states.get("idle", 0), states


def wait_until_idle(engine: Engine, items: int, timeout: float) -> None:
    """Poll until `items` items are idle; TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        idle, states = count_idle(engine)
        if idle >= items:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {idle}/{items} items idle after {timeout:.0f} s: {states}")
        time.sleep(0.1)


AUDIT_TIMES = text(
    """
    SELECT a.work_item_id,
           min(a.at) FILTER (WHERE a.event_type IN ('created', 'queued')) AS queued_at,
           min(a.at) FILTER (WHERE a.event_type = 'admitted') AS admitted_at,
           min(a.at) FILTER (WHERE a.event_type = 'action_completed') AS acted_at,
           max(a.at) FILTER (WHERE a.event_type = 'released'
                             AND a.new_state ->> 'admission' = 'idle') AS idle_at,
           count(*) FILTER (WHERE a.event_type = 'action_completed') AS actions,
           count(*) FILTER (WHERE a.event_type = 'released') AS releases
      FROM audit_log a
      JOIN work_items w ON w.id = a.work_item_id
     WHERE w.type = :type
     GROUP BY a.work_item_id
    """
)


def _timestamp(value: Any) -> Any:
    """SQLite hands text() timestamps back as naive UTC strings."""
    if isinstance(value, str):
        parsed = datetime.fromisoformat(value)
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return value


def _with_times(row: Any) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(
        **{key: _timestamp(value) if key.endswith("_at") else value for key, value in row.items()}
    )


def analyse(engine: Engine, items: int) -> tuple[dict[str, Any], list[str]]:
    """Per-item times from the audit log, and anything that does not look right."""
    with engine.connect() as conn:
        rows = conn.execute(AUDIT_TIMES, {"type": TYPE_NAME}).all()
        dims = conn.execute(
            text(
                "SELECT s.status, count(*) FROM work_item_statuses s "
                "JOIN work_items w ON w.id = s.work_item_id "
                "WHERE w.type = :type AND s.dimension = :dim GROUP BY s.status"
            ),
            {"type": TYPE_NAME, "dim": DIMENSION},
        ).all()
        other = conn.execute(
            text(
                "SELECT event_type, count(*) FROM audit_log a JOIN work_items w "
                "ON w.id = a.work_item_id WHERE w.type = :type AND event_type NOT IN "
                "('created', 'queued', 'admitted', 'action_completed', 'released') "
                "GROUP BY event_type"
            ),
            {"type": TYPE_NAME},
        ).all()
    rows = [_with_times(row._mapping) for row in rows]
    anomalies: list[str] = []
    if len(rows) != items:
        anomalies.append(f"audit rows found for {len(rows)} items, expected {items}")
    extra_actions = sum(1 for row in rows if row.actions != 1)
    if extra_actions:
        anomalies.append(f"{extra_actions} items did not run `noop` exactly once")
    extra_releases = sum(1 for row in rows if row.releases != 1)
    if extra_releases:
        anomalies.append(f"{extra_releases} items were released more than once or never")
    dim_counts = {str(status): int(count) for status, count in dims}
    if dim_counts.get("false", 0) != items or len(dim_counts) != 1:
        anomalies.append(f"needs_noop statuses: {dim_counts}")
    for event_type, count in other:
        anomalies.append(f"unexpected audit events: {event_type} x{count}")
    missing = [row for row in rows if row.queued_at is None or row.idle_at is None]
    if missing:
        anomalies.append(f"{len(missing)} items lack a queued or idle audit row")
    good = [row for row in rows if row.queued_at is not None and row.idle_at is not None]
    times = {
        "first_queued": min((row.queued_at for row in good), default=None),
        "last_queued": max((row.queued_at for row in good), default=None),
        "last_idle": max((row.idle_at for row in good), default=None),
        "first_admitted": min(
            (row.admitted_at for row in good if row.admitted_at is not None), default=None
        ),
    }

    def span(start: str, end: str) -> list[float]:
        values = []
        for row in good:
            first, last = getattr(row, start), getattr(row, end)
            if first is not None and last is not None:
                values.append((last - first).total_seconds())
        return values

    latency = {
        "queued_to_idle": Latency.of(span("queued_at", "idle_at")),
        "queued_to_admitted": Latency.of(span("queued_at", "admitted_at")),
        "queued_to_action_done": Latency.of(span("queued_at", "acted_at")),
        "admitted_to_idle": Latency.of(span("admitted_at", "idle_at")),
    }
    return {"times": times, "latency": latency}, anomalies
