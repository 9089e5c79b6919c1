"""Pipelines and jobs: status rules, auto-merge, the API."""

from __future__ import annotations

from typing import Any

from tests.fakes.gitlab.api import Ctx, Response, message_error, ok, param_error, route
from tests.fakes.gitlab.state import (
    ACTIVE_JOB_STATUSES,
    NULL_SHA,
    RETRYABLE_JOB_STATUSES,
    GitLabState,
    Job,
    Pipeline,
    Project,
    now_iso,
)

# CommitStatus::AVAILABLE_STATUSES: the values the jobs lists' `scope` accepts.
JOB_SCOPES = frozenset(
    {
        "created",
        "waiting_for_resource",
        "preparing",
        "waiting_for_callback",
        "pending",
        "running",
        "success",
        "failed",
        "canceling",
        "canceled",
        "skipped",
        "manual",
        "scheduled",
    }
)


class CiMixin(GitLabState):
    """Pipelines and jobs."""

    def _add_job(self, project: Project, pipeline: Pipeline, spec: dict[str, Any]) -> Job:
        status = spec.get("status", "success")
        now = now_iso()
        done = status not in ACTIVE_JOB_STATUSES
        job = Job(
            id=next(self._counters["job"]),
            pipeline_id=pipeline.id,
            name=spec["name"],
            stage=spec.get("stage", "test"),
            status=status,
            ref=pipeline.ref,
            sha=pipeline.sha,
            user=pipeline.user,
            created_at=now,
            trace=spec.get("trace", ""),
            failure_reason=spec.get(
                "failure_reason", "script_failure" if status == "failed" else None
            ),
            allow_failure=spec.get("allow_failure", False),
            started_at=now if status == "running" or done else None,
            finished_at=now if done else None,
        )
        project.jobs[job.id] = job
        pipeline.job_ids.append(job.id)
        return job

    def _pipeline_status(self, project: Project, pipeline: Pipeline) -> str:
        jobs = [project.jobs[job_id] for job_id in pipeline.job_ids]
        latest = [job for job in jobs if not job.retried]
        if not latest:
            return pipeline.status_without_jobs
        statuses = {job.status for job in latest}
        if statuses <= {"skipped"}:
            return "skipped"
        if statuses <= {"created"}:
            return "created"
        if "running" in statuses or (
            statuses & ACTIVE_JOB_STATUSES and statuses & RETRYABLE_JOB_STATUSES
        ):
            return "running"
        if statuses & ACTIVE_JOB_STATUSES:
            return "pending"
        if any(job.status == "failed" and not job.allow_failure for job in latest):
            return "failed"
        if "canceled" in statuses:
            return "canceled"
        if statuses <= {"manual", "skipped"}:
            return "manual"
        return "success"

    def _after_pipeline_change(self, project: Project, pipeline: Pipeline) -> None:
        """Auto-merge ("merge when pipeline succeeds") once the head pipeline succeeds."""
        if self._pipeline_status(project, pipeline) != "success":
            return
        for mr in list(project.merge_requests.values()):
            if not (mr.merge_when_pipeline_succeeds and mr.state == "opened"):
                continue
            head = self._head_pipeline(project, mr)
            if head is not None and head.id == pipeline.id and not self._conflicts(project, mr):
                self._merge(project, mr, mr.author, remove_source=None)

    def _pipeline_json(
        self, project: Project, pipeline: Pipeline, *, detail: bool = False
    ) -> dict[str, Any]:
        status = self._pipeline_status(project, pipeline)
        data: dict[str, Any] = {
            "id": pipeline.id,
            "iid": pipeline.iid,
            "project_id": project.id,
            "sha": pipeline.sha,
            "ref": pipeline.ref,
            "status": status,
            "source": pipeline.source,
            "created_at": pipeline.created_at,
            "updated_at": pipeline.updated_at,
            "web_url": f"{self._web(project)}/-/pipelines/{pipeline.id}",
        }
        if detail:
            finished = status not in ACTIVE_JOB_STATUSES and status != "running"
            data.update(
                {
                    "before_sha": NULL_SHA,
                    "tag": False,
                    "yaml_errors": None,
                    "user": self._user_json(pipeline.user),
                    "started_at": pipeline.created_at,
                    "finished_at": pipeline.updated_at if finished else None,
                    "committed_at": None,
                    "duration": None,
                    "queued_duration": None,
                    "coverage": None,
                    "detailed_status": {
                        "icon": f"status_{status}",
                        "text": status,
                        "label": status,
                        "group": status,
                        "tooltip": status,
                        "has_details": True,
                        "details_path": f"/{project.path}/-/pipelines/{pipeline.id}",
                        "illustration": None,
                        "favicon": f"/assets/ci_favicons/favicon_status_{status}.png",
                    },
                }
            )
        return data

    def _job_json(self, project: Project, job: Job) -> dict[str, Any]:
        pipeline = project.pipelines[job.pipeline_id]
        commit = project.commits.get(job.sha)
        data: dict[str, Any] = {
            "id": job.id,
            "status": job.status,
            "stage": job.stage,
            "name": job.name,
            "ref": job.ref,
            "tag": False,
            "coverage": None,
            "allow_failure": job.allow_failure,
            "created_at": job.created_at,
            "started_at": job.started_at,
            "finished_at": job.finished_at,
            "erased_at": None,
            "duration": 1.0 if job.finished_at else None,
            "queued_duration": 0.1 if job.started_at else None,
            "user": self._user_json(job.user),
            "commit": self._commit_json(project, commit) if commit else None,
            "pipeline": self._pipeline_json(project, pipeline),
            "web_url": f"{self._web(project)}/-/jobs/{job.id}",
            "project": {"ci_job_token_scope_enabled": False},
            "artifacts": [],
            "runner": None,
            "runner_manager": None,
            "artifacts_expire_at": None,
            "archived": False,
            "tag_list": [],
        }
        if job.status == "failed":
            data["failure_reason"] = job.failure_reason
        return data

    def _job(self, ctx: Ctx) -> Job:
        job = ctx.proj.jobs.get(ctx.arg_int("job_id"))
        if job is None:
            raise message_error(404, "404 Not found")
        return job

    @route("GET", "projects/:project/pipelines/:pipeline_id")
    def _get_pipeline(self, ctx: Ctx) -> Response:
        pipeline = ctx.proj.pipelines.get(ctx.arg_int("pipeline_id"))
        if pipeline is None:
            raise message_error(404, "404 Not found")
        return ok(self._pipeline_json(ctx.proj, pipeline, detail=True))

    @route("GET", "projects/:project/pipelines")
    def _list_pipelines(self, ctx: Ctx) -> Response:
        project = ctx.proj
        selected = []
        for pipeline in project.pipelines.values():
            status = self._pipeline_status(project, pipeline)
            if ctx.get("ref") not in (None, pipeline.ref):
                continue
            if ctx.get("sha") not in (None, pipeline.sha):
                continue
            if ctx.get("status") not in (None, status):
                continue
            if ctx.get("source") not in (None, pipeline.source):
                continue
            selected.append(pipeline)
        ascending = ctx.get("sort", "desc") == "asc"
        selected.sort(key=lambda p: p.id, reverse=not ascending)
        return self._paginate(ctx, [self._pipeline_json(project, p) for p in selected])

    def _filter_jobs(self, ctx: Ctx, jobs: list[Job]) -> list[Job]:
        """Jobs newest first, in the statuses `scope` names (one or a list; Grape
        refuses a status GitLab does not know)."""
        jobs = sorted(jobs, key=lambda job: -job.id)
        scope = ctx.get("scope")
        if scope is None:
            return jobs
        scopes = scope if isinstance(scope, list) else [scope]
        if any(value not in JOB_SCOPES for value in scopes):
            raise param_error("scope does not have a valid value")
        return [job for job in jobs if job.status in scopes] if scopes else jobs

    @route("GET", "projects/:project/pipelines/:pipeline_id/jobs")
    def _list_pipeline_jobs(self, ctx: Ctx) -> Response:
        project = ctx.proj
        pipeline = project.pipelines.get(ctx.arg_int("pipeline_id"))
        if pipeline is None:
            raise message_error(404, "404 Not found")
        jobs = [project.jobs[job_id] for job_id in pipeline.job_ids]
        if not ctx.flag("include_retried", False):
            jobs = [job for job in jobs if not job.retried]
        jobs = self._filter_jobs(ctx, jobs)
        return self._paginate(ctx, [self._job_json(project, job) for job in jobs])

    @route("GET", "projects/:project/jobs")
    def _list_jobs(self, ctx: Ctx) -> Response:
        project = ctx.proj
        jobs = self._filter_jobs(ctx, list(project.jobs.values()))
        return self._paginate(ctx, [self._job_json(project, job) for job in jobs])

    @route("GET", "projects/:project/jobs/:job_id")
    def _get_job(self, ctx: Ctx) -> Response:
        return ok(self._job_json(ctx.proj, self._job(ctx)))

    @route("GET", "projects/:project/jobs/:job_id/trace")
    def _get_trace(self, ctx: Ctx) -> Response:
        job = self._job(ctx)
        headers = {
            "Content-Type": "text/plain",
            "Content-Disposition": f'infile; filename="{job.id}.log"',
        }
        return ok(job.trace.encode(), 200, headers)

    @route("POST", "projects/:project/jobs/:job_id/retry")
    def _retry_job(self, ctx: Ctx) -> Response:
        project = ctx.proj
        job = self._job(ctx)
        if job.retried or job.status not in RETRYABLE_JOB_STATUSES:
            raise message_error(403, "403 Forbidden - Job is not retryable")
        pipeline = project.pipelines[job.pipeline_id]
        job.retried = True
        clone = self._add_job(
            project,
            pipeline,
            {
                "name": job.name,
                "stage": job.stage,
                "status": "pending",
                "allow_failure": job.allow_failure,
            },
        )
        clone.user = ctx.token.user
        pipeline.updated_at = now_iso()
        return ok(self._job_json(project, clone), 201)

    @route("POST", "projects/:project/jobs/:job_id/cancel")
    def _cancel_job(self, ctx: Ctx) -> Response:
        project = ctx.proj
        job = self._job(ctx)
        if job.status in ACTIVE_JOB_STATUSES:
            job.status = "canceled"
            job.finished_at = now_iso()
        return ok(self._job_json(project, job), 201)
