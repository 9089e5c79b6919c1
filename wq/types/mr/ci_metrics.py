"""The CI job retry's counter (under the service prefix, served with the engine's at /metrics)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from wq.engine.metrics import declare_counter

CI_JOBS = declare_counter(
    "ci_retry_jobs_total",
    "Failed CI jobs the retry executor handled, by matcher and outcome "
    "(retried, reported, skipped, deferred; matcher 'none' when no matcher applies).",
    ["matcher", "outcome"],
)


def count_job(session: Session, matcher: str, outcome: str) -> None:
    """Count one job outcome of one matcher in the metrics of the session's daemon."""
    CI_JOBS.of(session).labels(matcher=matcher, outcome=outcome).inc()
