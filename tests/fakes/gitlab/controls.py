"""What tests do to the fake directly: users, tokens, projects, pushes, pipelines, jobs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tests.fakes.gitlab.api import ApiError
from tests.fakes.gitlab.rules import DF_CONFLICT_MESSAGE, branch_conflicts, branch_name_error
from tests.fakes.gitlab.state import (
    ACTIVE_JOB_STATUSES,
    MERGE_STATUSES,
    GitLabState,
    Job,
    MergeRequest,
    Pipeline,
    Project,
    Token,
    User,
    now_iso,
    parse_labels,
    to_bytes,
)


class ControlsMixin(GitLabState):
    """Test setup and out-of-band changes (as other people or runners would make)."""

    def add_user(self, username: str, name: str | None = None) -> User:
        """The user with this username (created on first use)."""
        with self._lock:
            if username not in self.users:
                user_id = next(self._counters["user"])
                self.users[username] = User(user_id, username, name or username)
            return self.users[username]

    def add_token(
        self,
        token: str,
        *,
        projects: Iterable[str | int] | None = None,
        access: str = "write",
        username: str = "wq-bot",
    ) -> Token:
        """A valid PRIVATE-TOKEN. `projects`: paths (or group prefixes, or ids) it can
        see, None for every project. `access`: "write", or "read" (writes answer 403)."""
        if access not in ("write", "read"):
            raise ValueError("access must be 'write' or 'read'")
        with self._lock:
            scope = None if projects is None else tuple(str(entry) for entry in projects)
            entry = Token(token, self.add_user(username), scope, access)
            self.tokens[token] = entry
            return entry

    def add_project(
        self,
        path: str,
        *,
        files: dict[str, str | bytes] | None = None,
        default_branch: str = "main",
        project_id: int | None = None,
        empty: bool = False,
    ) -> Project:
        """A project whose default branch has one commit with `files` (a README.md
        when not given), or no commit at all when `empty`."""
        _check_pushed_branch({}, default_branch)
        for name in files or {}:
            _check_pushed_path(name)
        with self._lock:
            if self._find_project(path) is not None:
                raise ValueError(f"project {path} exists")
            pid = project_id if project_id is not None else next(self._counters["project"])
            project = Project(pid, path.strip("/"), default_branch)
            self.projects[pid] = project
            if not empty:
                initial = files if files is not None else {"README.md": f"# {project.name}\n"}
                tree = {name: to_bytes(content) for name, content in initial.items()}
                commit = self._new_commit(project, [], tree, "Initial commit", None)
                project.branches[default_branch] = commit.id
            return project

    def project(self, ref: str | int) -> Project:
        """A project by path or id (KeyError when unknown)."""
        with self._lock:
            project = self._find_project(str(ref))
            if project is None:
                raise KeyError(ref)
            return project

    def merge_request(self, project: str | int, iid: int) -> MergeRequest:
        """An MR by project and iid (KeyError when unknown)."""
        with self._lock:
            return self.project(project).merge_requests[iid]

    def push(
        self,
        project: str | int,
        branch: str,
        files: dict[str, str | bytes | None],
        *,
        message: str = "Update files",
        start: str | None = None,
        force: bool = False,
        author: str = "someone-else",
    ) -> str:
        """Commit straight to a branch as another user would (None deletes a file).
        `start` creates the branch from that ref; `force` replaces the branch with
        `start` + files. Returns the new commit sha. Branch names and paths git or
        GitLab would refuse on a push raise ValueError."""
        with self._lock:
            proj = self.project(project)
            if branch not in proj.branches:
                _check_pushed_branch(proj.branches, branch)
            for path in files:
                _check_pushed_path(path)
            base_ref = start if (start and (force or branch not in proj.branches)) else branch
            parent = proj.resolve(base_ref)
            tree = dict(proj.commits[parent].tree) if parent else {}
            for path, content in files.items():
                if content is None:
                    tree.pop(path, None)
                else:
                    tree[path] = to_bytes(content)
            commit = self._new_commit(
                proj, [parent] if parent else [], tree, message, self.add_user(author)
            )
            self._set_branch(proj, branch, commit.id)
            return commit.id

    def set_merge_status(self, project: str | int, iid: int, status: str | None) -> None:
        """Force the MR's detailed_merge_status while it is open (None: derive it again)."""
        if status is not None and status not in MERGE_STATUSES:
            raise ValueError(f"unknown detailed_merge_status {status!r}")
        with self._lock:
            self.merge_request(project, iid).merge_status_override = status

    def update_merge_request(self, project: str | int, iid: int, **changes: Any) -> None:
        """Change an MR as a person in the web UI would: title, description, labels,
        target_branch, state ("closed", "opened", "merged" merges it) ... What GitLab
        would refuse raises ValueError with GitLab's message (a second open MR for the
        same branches, reopening without the source branch)."""
        with self._lock:
            proj = self.project(project)
            mr = proj.merge_requests[iid]
            actor = self.add_user("someone-else")
            state = changes.pop("state", None)
            if "labels" in changes:
                changes["labels"] = parse_labels(changes["labels"])
            if state == "opened" and mr.state == "closed" and not self._reopenable(proj, mr):
                raise ValueError("the source branch is gone: GitLab does not reopen this MR")
            try:
                self._check_branches(
                    proj,
                    mr,
                    source=changes.get("source_branch", mr.source_branch),
                    target=changes.get("target_branch", mr.target_branch),
                    opened=state == "opened" or (mr.state == "opened" and state is None),
                )
            except ApiError as err:
                raise ValueError(str(err.body)) from None
            self._apply_mr_fields(mr, changes, actor)
            if state == "merged":
                self._merge(proj, mr, actor, remove_source=None)
            elif state == "closed":
                self._close(mr, actor)
            elif state == "opened":
                self._reopen(mr, actor)

    def add_pipeline(
        self,
        project: str | int,
        ref: str,
        *,
        sha: str | None = None,
        jobs: Iterable[dict[str, Any] | str] = (),
        status: str = "success",
        source: str = "push",
    ) -> Pipeline:
        """A pipeline for `ref` (at `sha`, default the ref's head). Each job is a name
        or a dict: name, status (default "success"), stage, trace, failure_reason,
        allow_failure. Without jobs the pipeline has `status`; with jobs its status is
        derived from its latest jobs, like GitLab's."""
        with self._lock:
            proj = self.project(project)
            head = sha or proj.resolve(ref)
            if head is None:
                raise KeyError(ref)
            user = self.add_user("wq-bot")
            pipeline_id = next(self._counters["pipeline"])
            now = now_iso()
            pipeline = Pipeline(
                pipeline_id, len(proj.pipelines) + 1, ref, head, source, user, now, now
            )
            pipeline.status_without_jobs = status
            proj.pipelines[pipeline_id] = pipeline
            for spec in jobs:
                self._add_job(proj, pipeline, {"name": spec} if isinstance(spec, str) else spec)
            return pipeline

    def add_job(self, project: str | int, pipeline_id: int, **spec: Any) -> Job:
        """Add a job (see `add_pipeline` for the spec) to a pipeline."""
        with self._lock:
            proj = self.project(project)
            return self._add_job(proj, proj.pipelines[pipeline_id], spec)

    def job(self, project: str | int, job_id: int) -> Job:
        """A job by id (KeyError when unknown)."""
        with self._lock:
            return self.project(project).jobs[job_id]

    def jobs(self, project: str | int, pipeline_id: int | None = None) -> list[Job]:
        """The project's jobs, or one pipeline's."""
        with self._lock:
            proj = self.project(project)
            return [
                job
                for job in proj.jobs.values()
                if pipeline_id is None or job.pipeline_id == pipeline_id
            ]

    def set_job(self, project: str | int, job_id: int, **changes: Any) -> Job:
        """Change a job (status, trace, failure_reason ...) as a runner would."""
        with self._lock:
            proj = self.project(project)
            job = proj.jobs[job_id]
            for key, value in changes.items():
                if not hasattr(job, key):
                    raise AttributeError(key)
                setattr(job, key, value)
            if "status" in changes:
                now = now_iso()
                if changes["status"] == "running":
                    job.started_at = job.started_at or now
                elif changes["status"] not in ACTIVE_JOB_STATUSES:
                    job.started_at = job.started_at or now
                    job.finished_at = now
            pipeline = proj.pipelines[job.pipeline_id]
            pipeline.updated_at = now_iso()
            self._after_pipeline_change(proj, pipeline)
            return job

    def pipeline_status(self, project: str | int, pipeline_id: int) -> str:
        """A pipeline's status as GitLab derives it from its jobs."""
        with self._lock:
            proj = self.project(project)
            return self._pipeline_status(proj, proj.pipelines[pipeline_id])


def _check_pushed_branch(branches: dict[str, str], name: str) -> None:
    """A push creating branch `name` is refused by git or GitLab: ValueError."""
    error = branch_name_error(name)
    if error is None and branch_conflicts(branches, name):
        error = DF_CONFLICT_MESSAGE
    if error is not None:
        raise ValueError(f"{name!r}: {error}")


def _check_pushed_path(path: str) -> None:
    """A tree path git's fsck (on GitLab's receive) refuses: ValueError."""
    parts = path.split("/")
    if not path or any(part in ("", ".", "..") or part.lower() == ".git" for part in parts):
        raise ValueError(f"{path!r}: not a path git stores in a tree")
