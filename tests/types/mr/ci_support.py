"""The CI retry tests' stage: an MR item with its MR on the fake GitLab, failed jobs
delivered as build events while no worker runs, then one processing run."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from tests.conftest import Store
from tests.fakes.gitlab import FakeGitLab
from tests.fakes.gitlab.state import Job, Pipeline
from tests.types.mr.events_support import deliver
from tests.types.mr.harness import PROJECT, Harness
from tests.types.mr.helpers import mr_registry
from wq.engine.models import AuditEntry, WorkItem
from wq.engine.sweep import sweep_once
from wq.types.mr.ci_metrics import CI_JOBS
from wq.types.mr.ci_retry import DIMENSION
from wq.types.mr.models import MrItem

TRACES = Path(__file__).parent / "traces"
BRANCH = "wq/sync-1"


def trace(name: str) -> str:
    """A recorded trace from tests/types/mr/traces."""
    return (TRACES / f"{name}.log").read_text()


def counted(matcher: str, outcome: str) -> float:
    """The CI retry counter's value for one matcher and outcome."""
    return CI_JOBS.of(None).labels(matcher=matcher, outcome=outcome)._value.get()


class CiStage:
    """An MR item whose MR exists, and the fake GitLab's pipelines on its branch."""

    def __init__(
        self,
        store: Store,
        gitlab: FakeGitLab,
        monkeypatch: pytest.MonkeyPatch,
        job_retry: dict[str, Any] | None,
        processing: dict[str, Any] | None = None,
        **settings: Any,
    ) -> None:
        self.store, self.gitlab = store, gitlab
        self.processing = processing
        extra = settings if job_retry is None else {"job_retry": job_retry, **settings}
        self.registry = mr_registry(monkeypatch, gitlab_url=gitlab.url, **extra)
        harness = self._harness()
        harness.manager.start()
        try:
            _, self.item_id = harness.submit()
            harness.settled(self.item_id)
        finally:
            harness.manager.stop(grace=2)

    def _harness(self) -> Harness:
        return Harness(self.store, self.registry, self.processing)

    def pipeline(self, *jobs: dict[str, Any]) -> Pipeline:
        """A pipeline on the item's branch with these jobs (see FakeGitLab.add_pipeline)."""
        return self.gitlab.add_pipeline(PROJECT, BRANCH, jobs=jobs)

    def job(self, pipeline: Pipeline, name: str) -> Job:
        """The newest job of that name in the pipeline."""
        jobs = [j for j in self.gitlab.jobs(PROJECT, pipeline.id) if j.name == name]
        return max(jobs, key=lambda j: j.id)

    def history(self, pipeline: Pipeline, name: str, runs: int, **last: Any) -> Job:
        """A job that ran `runs` times: the earlier runs failed and were retried."""
        for _ in range(runs - 1):
            old = self.gitlab.add_job(PROJECT, pipeline.id, name=name, status="failed")
            self.gitlab.set_job(PROJECT, old.id, retried=True)
        return self.gitlab.add_job(PROJECT, pipeline.id, name=name, status="failed", **last)

    def fail(self, *jobs: Job, retries: int | dict[int, int] = 0, **overrides: Any) -> None:
        """Deliver the build events of failed jobs (no worker runs meanwhile)."""
        for job in jobs:
            count = retries.get(job.id, 0) if isinstance(retries, dict) else retries
            event = {
                "object_kind": "build",
                "project": {"path_with_namespace": PROJECT},
                "ref": BRANCH,
                "tag": False,
                "build_id": job.id,
                "build_name": job.name,
                "build_status": "failed",
                "build_failure_reason": job.failure_reason,
                "build_finished_at": job.finished_at,
                "retries_count": count,
                "pipeline_id": job.pipeline_id,
                **overrides,
            }
            deliver(self.store, self.registry, event)

    def deliver(self, event: dict[str, Any]) -> None:
        """Deliver any event."""
        deliver(self.store, self.registry, event)

    def run(self, meanwhile: Callable[[], None] | None = None) -> MrItem:
        """Let a worker process the item until it is idle again (calling `meanwhile`
        once the worker runs)."""
        harness = self._harness()
        harness.manager.start()
        try:
            if meanwhile is not None:
                meanwhile()
            return harness.settled(self.item_id)
        finally:
            harness.manager.stop(grace=2)

    def item(self) -> MrItem:
        """The item as stored now."""
        return self._harness().item(self.item_id)

    def jobs_list(self) -> list[dict[str, Any]]:
        """The `needs_ci_retry` jobs list as stored now."""
        row = self.item().status(DIMENSION)
        return [] if row is None or not row.detail else list(row.detail["jobs"])

    def audits(self, prefix: str = "ci_job_") -> list[AuditEntry]:
        """The item's audit rows whose type starts with `prefix`, oldest first."""
        with self.store.sessions() as session:
            rows = session.execute(
                select(AuditEntry)
                .where(AuditEntry.work_item_id == self.item_id)
                .order_by(AuditEntry.id)
            ).scalars()
            found = [row for row in rows if row.event_type.startswith(prefix)]
            session.expunge_all()
            return found

    def outcomes(self) -> list[tuple[str, int, str | None, str]]:
        """(outcome, build id, matcher, reason) of every CI retry audit row."""
        return [
            (
                row.event_type.removeprefix("ci_job_"),
                (row.new_state or {})["build_id"],
                (row.trigger or {}).get("matcher"),
                (row.trigger or {}).get("reason", ""),
            )
            for row in self.audits()
        ]

    def retries_of(self, pipeline: Pipeline, name: str) -> list[Job]:
        """The jobs of that name, oldest first."""
        jobs = [j for j in self.gitlab.jobs(PROJECT, pipeline.id) if j.name == name]
        return sorted(jobs, key=lambda j: j.id)

    def travel(self, seconds: float) -> None:
        """Move the stored job times and deferral back by `seconds` (as if that much
        time had passed), then run the sweep."""
        with self.store.sessions.begin() as session:
            item = session.get(WorkItem, self.item_id)
            assert item is not None
            row = item.status(DIMENSION)
            assert row is not None and row.pending_until is not None
            jobs = []
            for job in row.detail["jobs"]:
                moved = dict(job)
                for key in ("build_finished_at", "not_before"):
                    if moved.get(key):
                        when = datetime.fromisoformat(moved[key].replace("Z", "+00:00"))
                        moved[key] = (when - timedelta(seconds=seconds)).isoformat()
                jobs.append(moved)
            row.detail = {"jobs": jobs}
            row.pending_until = row.pending_until - timedelta(seconds=seconds)
        harness = self._harness()
        sweep_once(self.store.sessions, self.registry, harness.manager.config)


def trace_requests(gitlab: FakeGitLab) -> list[str]:
    """The paths of the trace requests the fake saw."""
    return [r.path for r in gitlab.requests if r.path.endswith("/trace")]
