"""The `retry_ci_jobs` executor: retry failed CI jobs the `job_retry` matchers recognise.

Build events append failed jobs to the `needs_ci_retry` jobs list; this executor goes
through the list (oldest build first, each build id once) and decides each job:

- its pipeline is not the MR's head pipeline any more → skipped (stale), dropped;
- no matcher matches → skipped, dropped; a `report` matcher → reported, dropped;
- the trace is read (its tail, at most `job_trace_max_bytes`) only when a matcher
  that needs messages could still win;
- the delay for its attempt (`retries_count`, 0-based, the last delay repeating) has
  not passed since the build finished → it stays, stamped with `not_before`, and the
  dimension is deferred to the earliest `not_before` (the sweep wakes the item);
- safety, from the pipeline's jobs: a newer job of that name exists (someone retried
  it already) → skipped; the retries of that name reached the matcher's
  `retry_limit` → reported; otherwise retried through the Jobs API, dropped.

A 404 drops the job. A transient failure (5xx, 429, timeout) keeps the job: when
nothing was retried in this run the action fails with RetryLater (the engine retries it
with backoff for as long as GitLab fails, never failing the item for it); when
something was, the run is kept (its retries stay audited) and the dimension stays due,
so the next run comes at once. Every retry, skip,
report and deferral is audited with its reason and matcher and counted per matcher.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

from sqlalchemy import select
from sqlalchemy.orm import Session

from wq.engine import on_commit
from wq.engine.audit import AuditRecord, audit
from wq.engine.dimensions import set_dimension
from wq.engine.models import WorkItemStatus
from wq.engine.registry import ActionContext, RetryLater
from wq.types.mr.ci_gitlab import (
    JobGone,
    PipelineJob,
    Refused,
    Transient,
    pipeline_jobs,
    retry_job,
    trace_tail,
)
from wq.types.mr.ci_metrics import count_job
from wq.types.mr.events import parse_time, seen_builds
from wq.types.mr.gitlab import client
from wq.types.mr.job_retry import JobRetryConfig, Matcher, decide, format_duration
from wq.types.mr.models import MrItem
from wq.types.mr.settings import MrSettings

log = logging.getLogger(__name__)
DIMENSION = "needs_ci_retry"
NO_MATCHER = "none"
_COUNT = "ci_retry_count"


@on_commit.handler(_COUNT)
def _count_committed(session: Session, outcomes: list[tuple[str, str]]) -> None:
    # Counted once the run's audit rows are stored, so metrics and audit agree.
    for matcher, outcome in outcomes:
        count_job(session, matcher, outcome)


@dataclass
class _Run:
    """One run of the executor over the jobs list."""

    ctx: ActionContext
    item: MrItem
    settings: MrSettings
    config: JobRetryConfig | None
    retried: int = 0
    transient: Transient | None = None
    _project: Any = None
    _pipelines: dict[int, list[PipelineJob]] = field(default_factory=dict)
    # Written when the run is done: the first database write begins the fenced
    # transaction (and takes its locks), which must not wait on GitLab calls.
    _records: list[tuple[AuditRecord, str, str]] = field(default_factory=list)

    # ------------------------------------------------------------ GitLab, lazily

    def project(self) -> Any:
        """The item's project (python-gitlab, lazy: no request until a call needs one)."""
        if self._project is None:
            gl = client(self.settings, self.item.project)
            self._project = gl.projects.get(self.item.project, lazy=True)
        return self._project

    def jobs_of(self, pipeline_id: int) -> list[PipelineJob]:
        """A pipeline's jobs, listed once per run (the run's retries are added to it)."""
        if pipeline_id not in self._pipelines:
            self._pipelines[pipeline_id] = pipeline_jobs(self.project(), pipeline_id)
        return self._pipelines[pipeline_id]

    # ------------------------------------------------------------ audit and metrics

    def record(
        self,
        event: str,
        job: dict[str, Any],
        reason: str,
        node: Matcher | None = None,
        **state: Any,
    ) -> None:
        """Note one outcome for one job (audited and counted by `write`)."""
        matcher = node.label if node is not None else None
        self._records.append(
            (
                AuditRecord(
                    f"ci_job_{event}",
                    self.ctx.actor,  # the worker that runs the action
                    self.item.id,
                    new_state={
                        "build_id": job.get("build_id"),
                        "build_name": job.get("build_name"),
                        "pipeline_id": job.get("pipeline_id"),
                        **state,
                    },
                    trigger={
                        "source": "worker",
                        "action": "retry_ci_jobs",
                        "reason": reason,
                        "matcher": matcher,
                    },
                ),
                matcher or NO_MATCHER,
                event,
            )
        )

    def write(self) -> None:
        """Audit the run's outcomes; count them once the transaction commits."""
        audit(self.ctx.session, *(record for record, _, _ in self._records))
        for _, matcher, event in self._records:
            on_commit.defer(self.ctx.session, _COUNT, (matcher, event))

    def failed_transiently(self, job: dict[str, Any], err: Transient) -> bool:
        """Keep the job for the next run (True) and remember the first such failure."""
        log.warning(
            "work item %s: job %s: %s; trying again later", self.item.id, job.get("build_id"), err
        )
        self.transient = self.transient or err
        return True

    # ------------------------------------------------------------ one job

    def handle(self, job: dict[str, Any]) -> bool:
        """Decide one job; True keeps it in the list."""
        build_id, pipeline_id = job.get("build_id"), job.get("pipeline_id")
        name = str(job.get("build_name") or "")
        reason = job.get("build_failure_reason")
        reason = reason if isinstance(reason, str) else None
        head = self.item.head_pipeline_id
        if not isinstance(build_id, int) or not isinstance(pipeline_id, int):
            self.record("skipped", job, "malformed job entry")
            return False
        if head is not None and pipeline_id != head:
            self.record("skipped", job, f"pipeline {pipeline_id} is not the head {head}")
            return False
        if self.config is None:
            self.record("skipped", job, "job_retry is not configured")
            return False
        trace: str | None = None
        if self.config.needs_trace(reason, name):
            try:
                trace = trace_tail(self.project(), build_id, self.settings.job_trace_max_bytes)
            except JobGone:
                self.record("skipped", job, "the job is gone (404)")
                return False
            except Transient as err:
                return self.failed_transiently(job, err)
            except Refused as err:
                self.record("skipped", job, f"cannot read the trace: {err}")
                return False
        attempt = _attempt(job)
        verdict = decide(self.config, reason, name, trace, attempt or 0)
        if attempt is None and verdict.node is not None and verdict.node.action == "retry":
            # No retries_count in the event: count this job's earlier runs instead.
            same, keep = self.same_name(job, pipeline_id, name, verdict.node)
            if same is None:
                return keep
            attempt = sum(1 for other in same if other.id < build_id)
            verdict = decide(self.config, reason, name, trace, attempt)
        attempt = attempt or 0
        node = verdict.node
        if node is None:
            self.record("skipped", job, "no matcher matched")
            return False
        if verdict.outcome == "report":
            self.record("reported", job, "a report matcher matched", node)
            return False
        if verdict.outcome == "limit_reached":
            self.record("reported", job, f"retry limit {node.retry_limit} reached", node)
            return False
        if self.wait(job, node, attempt, verdict.delay):
            return True
        return self.retry(job, node, build_id, pipeline_id, name)

    def wait(self, job: dict[str, Any], node: Matcher, attempt: int, delay: float) -> bool:
        """Whether the job's delay has yet to pass (then it is stamped `not_before`)."""
        if delay <= 0:
            return False
        not_before = parse_time(job.get("not_before"))
        if not_before is None:
            finished = parse_time(job.get("build_finished_at")) or self.ctx.now
            not_before = finished + timedelta(seconds=delay)
            if not_before > self.ctx.now:
                job["not_before"] = not_before.isoformat()
                self.record(
                    "deferred",
                    job,
                    f"attempt {attempt} waits {format_duration(delay)}",
                    node,
                    not_before=job["not_before"],
                )
        return not_before > self.ctx.now

    def same_name(
        self, job: dict[str, Any], pipeline_id: int, name: str, node: Matcher
    ) -> tuple[list[PipelineJob] | None, bool]:
        """The pipeline's jobs of that name; else (None, whether to keep the job)."""
        try:
            return [other for other in self.jobs_of(pipeline_id) if other.name == name], False
        except JobGone:
            self.record("skipped", job, f"pipeline {pipeline_id} is gone (404)", node)
            return None, False
        except Transient as err:
            return None, self.failed_transiently(job, err)
        except Refused as err:
            self.record("skipped", job, f"cannot list the pipeline's jobs: {err}", node)
            return None, False

    def retry(
        self, job: dict[str, Any], node: Matcher, build_id: int, pipeline_id: int, name: str
    ) -> bool:
        """The safety checks, then the retry; True keeps the job (a transient failure)."""
        same, keep = self.same_name(job, pipeline_id, name, node)
        if same is None:
            return keep
        newer = [other.id for other in same if other.id > build_id]
        if newer:
            self.record("skipped", job, f"a newer {name} job exists ({max(newer)})", node)
            return False
        retries = max(len(same) - 1, 0)
        if retries >= node.retry_limit:
            self.record("reported", job, f"retry limit {node.retry_limit} reached", node)
            return False
        try:
            created = retry_job(self.project(), build_id)
        except JobGone:
            self.record("skipped", job, "the job is gone (404)", node)
            return False
        except Transient as err:
            return self.failed_transiently(job, err)
        except Refused as err:
            self.record("skipped", job, f"GitLab refused the retry: {err}", node)
            return False
        self._pipelines[pipeline_id].insert(0, created)
        self.retried += 1
        self.record("retried", job, node.description or "matched", node, new_build_id=created.id)
        return False


def _attempt(job: dict[str, Any]) -> int | None:
    """The job's attempt (its retries so far, from the build event), None when unknown."""
    count = job.get("retries_count")
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None


def _unique(jobs: Any) -> list[dict[str, Any]]:
    """The list's entries, each build id once (the first), oldest build first."""
    seen: set[Any] = set()
    unique = []
    for job in jobs if isinstance(jobs, list) else []:
        if isinstance(job, dict) and job.get("build_id") not in seen:
            seen.add(job.get("build_id"))
            unique.append(dict(job))
    return sorted(
        unique, key=lambda job: job["build_id"] if isinstance(job["build_id"], int) else 0
    )


def _jobs(row: WorkItemStatus | None) -> list[dict[str, Any]]:
    detail = row.detail if row is not None and isinstance(row.detail, dict) else {}
    return _unique(detail.get("jobs"))


def _fresh_row(ctx: ActionContext, item: MrItem) -> WorkItemStatus | None:
    """The dimension as stored now, read under the lease fence (the item's row is
    locked from here to the commit, so no build event slips in before we write)."""
    return ctx.session.execute(
        select(WorkItemStatus)
        .where(
            WorkItemStatus.work_item_id == item.id,
            WorkItemStatus.dimension == DIMENSION,
            WorkItemStatus.variant == "",
        )
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()


def retry_ci_jobs(ctx: ActionContext) -> None:
    """Retry (or report, skip, defer) every job of the `needs_ci_retry` list."""
    item, settings = cast(MrItem, ctx.item), cast(MrSettings, ctx.settings)
    run = _Run(ctx, item, settings, settings.job_retry_config)
    # GitLab is called with the list as last read, outside the fenced transaction.
    seen = _jobs(item.status(DIMENSION))
    kept = [job for job in seen if run.handle(job)]
    if run.transient is not None and run.retried == 0:
        # The MR is open: its jobs are retried once GitLab answers, however long that takes.
        raise RetryLater(
            str(run.transient), retry_after=run.transient.retry_after, keep_trying=True
        )
    run.write()
    # Jobs a build event added meanwhile stay for the next run.
    done = {job["build_id"] for job in seen}
    fresh = _fresh_row(ctx, item)
    arrived = [job for job in _jobs(fresh) if job["build_id"] not in done]
    kept = _unique(kept + arrived)
    # The build ids already handled stay remembered: a redelivered event is a no-op.
    remembered = seen_builds(fresh.detail if fresh is not None else None)
    if not kept:
        set_dimension(ctx.session, item, DIMENSION, False, detail={"jobs": [], "seen": remembered})
        return
    waits = [parse_time(job.get("not_before")) for job in kept]
    due = (
        arrived
        or run.transient is not None
        or any(wait is None or wait <= ctx.now for wait in waits)
    )
    pending = None if due else min(wait for wait in waits if wait is not None)
    set_dimension(
        ctx.session,
        item,
        DIMENSION,
        True,
        detail={"jobs": kept, "seen": remembered},
        pending_until=pending,
    )
