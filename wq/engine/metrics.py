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


AUDIT_S3_UPLOADS = Counter(
    "wq_audit_s3_uploads_total",
    "Audit entries written to S3 by the archiver or a re-archive.",
)
AUDIT_S3_UPLOAD_FAILURES = Counter(
    "wq_audit_s3_upload_failures_total",
    "Attempts to write an audit entry to S3 that failed (the entry is retried).",
)


def count_audit_upload(outcome: str, amount: int = 1) -> None:
    """Count audit entries uploaded ("uploaded") or failed to upload ("failed")."""
    if amount:
        (AUDIT_S3_UPLOADS if outcome == "uploaded" else AUDIT_S3_UPLOAD_FAILURES).inc(amount)
