"""Prometheus metrics of one daemon: the instruments, their names, and how code finds them.

Names follow the reference service's convention: generic operational metrics (HTTP)
under one prefix, `hummingbird_` by default, and the work queue's own metrics under
another, `hummingbird_workqueue_` by default; both come from `metrics.*` in the config.
Each `Metrics` has its own `CollectorRegistry` (never prometheus-client's global one),
so two daemons in one process (tests) never share or clash over a series.

Code reaches the instruments through the session it already has: the runtime puts its
`Metrics` into its sessionmakers' `info` (as it does the wake-up hub), and
`metrics_of(session)` finds it; sessions without one count into `DEFAULT`, which
nobody serves. Counts that describe a database change are taken once the change has
committed (`after_commit`), so a rolled-back transaction counts nothing.

Gauges that are counts in the database (pools, queue age, items) are not kept here:
`wq.engine.metrics_db` computes them when Prometheus scrapes.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from sqlalchemy.orm import Session, sessionmaker

from wq.engine import on_commit

METRICS_KEY = "wq_metrics"
DEFAULT_PREFIX = "hummingbird_"
DEFAULT_SERVICE_PREFIX = "hummingbird_workqueue_"
# A prefix is the start of a metric name and ends in "_" so that names stay readable.
PREFIX_PATTERN = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*_$")

# Seconds: API calls are milliseconds, executors call GitLab or start runs (seconds).
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
EXECUTOR_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
# An admission wait is immediate when a slot is free, hours behind a long backlog.
WAIT_BUCKETS = (0.05, 0.25, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 4 * 3600.0)
CLAIM_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100)


@dataclass(frozen=True)
class CounterSpec:
    """A counter that a work-item type brings (the engine knows no type's metrics).

    Declared once at import with `declare_counter`; every `Metrics` built afterwards
    has it from the start, so it is exported at zero before its first increment.
    """

    name: str
    documentation: str
    labels: tuple[str, ...] = ()

    def of(self, holder: Session | sessionmaker[Session] | None) -> Counter:
        """This counter in the metrics of the session's daemon."""
        return metrics_of(holder).counter(self)


_declared: list[CounterSpec] = []


def declare_counter(name: str, documentation: str, labels: Iterable[str] = ()) -> CounterSpec:
    """Declare a type's counter; its full name is the service prefix plus `name`."""
    spec = CounterSpec(name, documentation, tuple(labels))
    _declared.append(spec)
    return spec


class Metrics:
    """Every instrument of one daemon, registered in its own registry."""

    def __init__(
        self,
        prefix: str = DEFAULT_PREFIX,
        service_prefix: str = DEFAULT_SERVICE_PREFIX,
        *,
        process: bool = True,
    ) -> None:
        for key, value in (("prefix", prefix), ("service_prefix", service_prefix)):
            if not PREFIX_PATTERN.match(value):
                raise ValueError(f"metrics {key} {value!r} is not a metric name prefix ending _")
        self.prefix = prefix
        self.service_prefix = service_prefix
        self.registry = CollectorRegistry(auto_describe=True)
        if process:
            # The standard process_* and python_* series, unprefixed as everywhere.
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        self._type_counters: dict[str, Counter] = {}
        self._lock = threading.Lock()
        g, s, r = prefix, service_prefix, self.registry

        # ---- generic: HTTP
        self.http_requests = Counter(
            f"{g}http_requests_total",
            "HTTP requests answered, by method, route template and status code.",
            ["method", "route", "status"],
            registry=r,
        )
        self.http_duration = Histogram(
            f"{g}http_request_duration_seconds",
            "Time to answer an HTTP request, by method and route template.",
            ["method", "route"],
            buckets=HTTP_BUCKETS,
            registry=r,
        )
        self.http_in_progress = Gauge(
            f"{g}http_requests_in_progress",
            "HTTP requests being answered right now, by method and route template.",
            ["method", "route"],
            registry=r,
        )
        self.http_shed = Counter(
            f"{g}http_requests_shed_total",
            "HTTP requests answered 503 at once: too many waited for a handler thread.",
            registry=r,
        )

        # ---- intake and admission
        self.submissions = Counter(
            f"{s}submissions_total",
            "Submissions through the API by type and outcome (created, unchanged, "
            "updated, retried, dedup, capped).",
            ["type", "outcome"],
            registry=r,
        )
        self.admission_wait = Histogram(
            f"{s}admission_wait_seconds",
            "Time from entering the queue to admission into a pool slot, by lane.",
            ["lane"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.phase_transitions = Counter(
            f"{s}phase_transitions_total",
            "Items that entered a phase (completed, failed, cancelled, active on retry).",
            ["type", "phase"],
            registry=r,
        )

        # ---- processing
        self.executor_runs = Counter(
            f"{s}executor_runs_total",
            "Executor actions run, by type, action and outcome (succeeded, error, "
            "requeued, lease_lost).",
            ["type", "action", "outcome"],
            registry=r,
        )
        self.executor_duration = Histogram(
            f"{s}executor_run_duration_seconds",
            "How long one executor action ran, by type and action.",
            ["type", "action"],
            buckets=EXECUTOR_BUCKETS,
            registry=r,
        )
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        self.claims_per_pass = Histogram(
            f"{s}claims_per_pass",
            "Admitted items claimed by one scheduler pass or batch (the sum is all items claimed).",
            buckets=CLAIM_BUCKETS,
            registry=r,
        )
        self.lease_rescues = Counter(
            f"{s}lease_rescues_total",
            "Expired leases recovered, by who found them (sweep, claim).",
            ["via"],
            registry=r,
        )
        self.sweep_runs = Counter(
            f"{s}sweep_runs_total",
            "Periodic sweeps run, by outcome (ok, error).",
            ["outcome"],
            registry=r,
        )

        # ---- events
        self.events = Counter(
            f"{s}events_total",
            "Events taken in, by source (sqs, webhook) and outcome (received, stored, "
            "unmatched, future, undecodable, unstorable, transient, delete_failed).",
            ["source", "outcome"],
            registry=r,
        )
        self.event_applications = Counter(
            f"{s}event_applications_total",
            "Stored events dealt with, by outcome (applied, discarded, failed).",
            ["outcome"],
            registry=r,
        )
        self.sqs_receive_errors = Counter(
            f"{s}sqs_receive_errors_total",
            "Failed SQS receive calls (the consumer backs off and tries again).",
            registry=r,
        )

        # ---- auth and audit
        self.auth_decisions = Counter(
            f"{s}auth_decisions_total",
            "Authentication and authorization decisions, by tier and outcome "
            "(allowed, denied, failed, unavailable).",
            ["tier", "outcome"],
            registry=r,
        )
        # Incremented by the audit archival (S3): one per object written / given up.
        self.audit_s3_uploads = Counter(
            f"{s}audit_s3_uploads_total",
            "Audit entries archived to S3.",
            registry=r,
        )
        self.audit_s3_upload_failures = Counter(
            f"{s}audit_s3_upload_failures_total",
            "Failed attempts to archive an audit entry to S3 (retried later).",
            registry=r,
        )
        for spec in list(_declared):
            self.counter(spec)

    def counter(self, spec: CounterSpec) -> Counter:
        """A type's counter (see `declare_counter`), created on first use."""
        with self._lock:
            if spec.name not in self._type_counters:
                self._type_counters[spec.name] = Counter(
                    f"{self.service_prefix}{spec.name}",
                    spec.documentation,
                    list(spec.labels),
                    registry=self.registry,
                )
            return self._type_counters[spec.name]

    def exposition(self) -> bytes:
        """Everything in Prometheus' text format (what `/metrics` serves)."""
        return generate_latest(self.registry)

    # ---- helpers for the call sites that count

    def child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, remembered: `labels()` hashes, checks and locks on
        every call, and the hot paths count several times per request or item. The
        children stay the same (nothing here removes labels)."""
        key = (metric, labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def count_event(self, source: str, outcome: str, amount: int = 1) -> None:
        """Count events taken in from one source with one outcome."""
        if amount:
            self.child(self.events, source, outcome).inc(amount)

    def count_run(self, item_type: str, action: str, outcome: str, seconds: float) -> None:
        """Count one executor action that ran, with its outcome and duration."""
        self.child(self.executor_runs, item_type, action, outcome).inc()
        self.child(self.executor_duration, item_type, action).observe(seconds)

    def count_applications(self, outcome: str, amount: int = 1) -> None:
        """Count stored events applied, discarded or failed."""
        if amount:
            self.child(self.event_applications, outcome).inc(amount)


DEFAULT = Metrics(process=False)


def metrics_of(holder: Session | sessionmaker[Session] | None) -> Metrics:
    """The metrics of the daemon a session (or sessionmaker) belongs to, else `DEFAULT`."""
    if isinstance(holder, Session):
        info: Any = holder.info
    elif isinstance(holder, sessionmaker):
        info = holder.kw.get("info") or {}
    else:
        info = {}
    found = info.get(METRICS_KEY)
    return found if isinstance(found, Metrics) else DEFAULT


def after_commit(session: Session, count: Callable[[Metrics], None]) -> None:
    """Count once the session's root transaction commits (nothing if it rolls back)."""
    on_commit.defer(session, "metrics", count)


@on_commit.handler("metrics")
def _count_committed(session: Session, counts: list[Callable[[Metrics], None]]) -> None:
    metrics = metrics_of(session)
    for count in counts:
        count(metrics)
