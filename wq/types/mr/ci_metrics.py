"""Prometheus counter of the CI job retry (served with the engine's at /metrics)."""

from __future__ import annotations

from prometheus_client import Counter

CI_JOBS = Counter(
    "wq_ci_retry_jobs_total",
    "Failed CI jobs the retry executor handled, by matcher and outcome "
    "(retried, reported, skipped, deferred; matcher 'none' when no matcher applies).",
    ["matcher", "outcome"],
)


def count_job(matcher: str, outcome: str) -> None:
    """Count one job outcome of one matcher."""
    CI_JOBS.labels(matcher=matcher, outcome=outcome).inc()
