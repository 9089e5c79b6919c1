"""A fake GitLab: a real HTTP server on loopback that python-gitlab talks to unchanged.

Start one per test (the ``fake_gitlab`` fixture below, importable from a conftest.py) or by
hand::

    with FakeGitLab() as fake:
        fake.add_token("glpat-rpms", projects=["group/rpms"])
        fake.add_project("group/rpms", files={"README.md": "hello\\n"})
        gl = gitlab.Gitlab(fake.url, private_token="glpat-rpms")
        project = gl.projects.get("group/rpms")

It serves the REST API v4 subset the ``mr`` work-item type and the CI-retry work need:
projects (by numeric id or URL-encoded path), branches, files, commits with actions,
compare, merge requests with their notes, pipelines and jobs. State lives in memory as
plain Python objects that tests read and change directly (``fake.project(...)``,
``fake.merge_request(...)``, ``fake.push(...)``, ``fake.add_pipeline(...)``), every
request is logged (``fake.requests``), and failures or latency can be injected per
method and path (``fake.fail_next``, ``fake.drop_next``, ``fake.add_latency``).

Repositories are modelled as commits holding full file trees (``{path: bytes}``) with
parent links, so merge bases, compare, force pushes and merges behave like git for the
cases tests need. Error status codes and bodies follow GitLab's (Grape) conventions:
``{"message": ...}`` for domain errors, ``{"error": ...}`` for parameter validation.

Known differences from GitLab (kept deliberately small):

- Every project is private: a request without a token is answered 401 (GitLab answers
  404 for a private project and a GET without a token), a token without access 404.
- Rename detection in diffs only recognises exact renames (same content); file modes are
  not tracked (``chmod`` is accepted and validated, but changes nothing).
- ``detailed_merge_status`` is derived (``not_open``, ``draft_status``, ``broken_status``,
  ``conflict``, ``mergeable``) unless a test sets it with ``set_merge_status``; approvals,
  discussions and CI-must-pass rules are not modelled. Merges always create a merge
  commit (merge method "merge"); scoped labels are not exclusive (a Premium feature).
- ``merge_when_pipeline_succeeds`` merges when a test moves the head pipeline to success
  through ``set_job``; there is no other background processing.
- System notes are a simplified subset (title/description changes, close, reopen, merge,
  "added N commits" on push), with shorter bodies than GitLab's.
- ``last_commit_id`` in commit actions and protected branches are not enforced.
- Diff text is difflib's unified diff with git's hunk headers; the "No newline at end of
  file" marker is only added for the new side.
"""

from __future__ import annotations

import base64
import contextlib
import difflib
import hashlib
import itertools
import json
import re
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

import pytest

__all__ = [
    "Commit",
    "FakeGitLab",
    "Job",
    "LoggedRequest",
    "MergeRequest",
    "Note",
    "Pipeline",
    "Project",
    "fake_gitlab",
]

API_PREFIX = "/api/v4/"
NULL_SHA = "0" * 40

# GitLab's Gitlab::Regex.merge_request_draft: the title alone decides whether an MR is a draft.
DRAFT_TITLE = re.compile(r"\A(\[draft\]|\(draft\)|draft:)", re.IGNORECASE)

ACTIVE_JOB_STATUSES = frozenset(
    {"created", "waiting_for_resource", "preparing", "pending", "running", "scheduled"}
)
RETRYABLE_JOB_STATUSES = frozenset({"success", "failed", "canceled"})
MERGE_STATUSES = frozenset(
    {
        "approvals_syncing",
        "checking",
        "ci_must_pass",
        "ci_still_running",
        "commits_status",
        "conflict",
        "discussions_not_resolved",
        "draft_status",
        "jira_association_missing",
        "mergeable",
        "merge_request_blocked",
        "merge_time",
        "need_rebase",
        "not_approved",
        "not_open",
        "preparing",
        "requested_changes",
        "security_policy_violations",
        "status_checks_must_pass",
        "unchecked",
        "locked_paths",
        "locked_lfs_files",
        "title_regex",
        "broken_status",
    }
)

_INJECTED_BODIES: dict[int, Any] = {
    400: {"message": "400 Bad request"},
    401: {"message": "401 Unauthorized"},
    403: {"message": "403 Forbidden"},
    404: {"message": "404 Not Found"},
    409: {"message": "409 Conflict"},
    422: {"message": "422 Unprocessable Entity"},
    429: "Retry later\n",
    500: {"message": "500 Internal Server Error"},
    502: "<html><body><h1>502 Bad Gateway</h1>GitLab is not responding.</body></html>\n",
    503: "<html><body><h1>503 Service Unavailable</h1></body></html>\n",
    504: "<html><body><h1>504 Gateway Time-out</h1></body></html>\n",
}


def _now() -> str:
    moment = datetime.now(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _blob_sha(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content, usedforsecurity=False).hexdigest()


def _to_bytes(content: str | bytes) -> bytes:
    return content.encode() if isinstance(content, str) else content


def _is_binary(content: bytes | None) -> bool:
    if not content:
        return False
    if b"\0" in content:
        return True
    try:
        content.decode()
    except UnicodeDecodeError:
        return True
    return False


def _diff_text(old: bytes | None, new: bytes | None) -> str:
    """A unified diff body as GitLab's API returns it (no ---/+++ header lines)."""
    if _is_binary(old) or _is_binary(new):
        return "Binary files differ\n"
    old_text = (old or b"").decode()
    new_text = (new or b"").decode()
    lines = list(
        difflib.unified_diff(old_text.splitlines(), new_text.splitlines(), lineterm="", n=3)
    )[2:]
    if lines and new_text and not new_text.endswith("\n"):
        lines.append("\\ No newline at end of file")
    return "\n".join(lines) + "\n" if lines else ""


def _line_stats(diff: str) -> tuple[int, int]:
    added = removed = 0
    for line in diff.splitlines():
        if line.startswith("+"):
            added += 1
        elif line.startswith("-"):
            removed += 1
    return added, removed


def _tree_diff(old: dict[str, bytes], new: dict[str, bytes]) -> list[dict[str, Any]]:
    """GitLab's diff entries between two trees; exact renames are detected as renames."""
    removed = sorted(path for path in old if path not in new)
    added = sorted(path for path in new if path not in old)
    entries: list[dict[str, Any]] = []
    for path in list(added):
        source = next((p for p in removed if old[p] == new[path]), None)
        if source is not None:
            removed.remove(source)
            added.remove(path)
            entries.append(_diff_entry(source, path, old[source], new[path], renamed=True))
    entries.extend(_diff_entry(path, path, None, new[path], new_file=True) for path in added)
    entries.extend(_diff_entry(path, path, old[path], None, deleted=True) for path in removed)
    entries.extend(
        _diff_entry(path, path, old[path], new[path])
        for path in old
        if path in new and old[path] != new[path]
    )
    return sorted(entries, key=lambda entry: entry["new_path"])


def _diff_entry(
    old_path: str,
    new_path: str,
    old: bytes | None,
    new: bytes | None,
    *,
    new_file: bool = False,
    deleted: bool = False,
    renamed: bool = False,
) -> dict[str, Any]:
    return {
        "old_path": old_path,
        "new_path": new_path,
        "a_mode": "0" if new_file else "100644",
        "b_mode": "0" if deleted else "100644",
        "new_file": new_file,
        "renamed_file": renamed,
        "deleted_file": deleted,
        "generated_file": False,
        "diff": "" if renamed and old == new else _diff_text(old, new),
    }


def _labels(value: Any) -> list[str]:
    """Labels as GitLab accepts them: a comma-separated string or a list of strings."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else [str(item) for item in value]
    seen: dict[str, None] = {}
    for item in items:
        if item.strip():
            seen.setdefault(item.strip(), None)
    return list(seen)


def _valid_branch_name(name: str) -> bool:
    return not (
        not name
        or name.startswith(("-", "/"))
        or name.endswith(("/", ".lock", "."))
        or ".." in name
        or "//" in name
        or "@{" in name
        or any(char in name for char in " ~^:?*[\\\x7f")
        or any(ord(char) < 32 for char in name)
    )


class ApiError(Exception):
    """An error answer: status, JSON (or text) body and extra headers."""

    def __init__(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{status} {body}")
        self.status = status
        self.body = body
        self.headers = headers or {}


def _message(status: int, message: Any) -> ApiError:
    return ApiError(status, {"message": message})


def _param_error(message: str) -> ApiError:
    return ApiError(400, {"error": message})


def _not_found(what: str) -> ApiError:
    return _message(404, f"404 {what} Not Found")


# --------------------------------------------------------------------------- state


@dataclass
class User:
    id: int
    username: str
    name: str


@dataclass
class Token:
    value: str
    user: User
    projects: tuple[str, ...] | None  # None: every project
    access: str  # "write" or "read"

    def can_see(self, project: Project) -> bool:
        if self.projects is None:
            return True
        path = project.path.lower()
        for entry in self.projects:
            prefix = entry.strip("/").lower()
            if entry == str(project.id) or path == prefix or path.startswith(prefix + "/"):
                return True
        return False


@dataclass
class Commit:
    id: str
    parent_ids: list[str]
    tree: dict[str, bytes]
    message: str
    author_name: str
    author_email: str
    created_at: str
    seq: int

    @property
    def title(self) -> str:
        return self.message.split("\n", 1)[0]


@dataclass
class Note:
    id: int
    body: str
    author: User
    internal: bool
    system: bool
    created_at: str
    updated_at: str


@dataclass
class MergeRequest:
    id: int
    iid: int
    title: str
    description: str
    source_branch: str
    target_branch: str
    author: User
    labels: list[str]
    created_at: str
    updated_at: str
    state: str = "opened"
    sha: str | None = None
    base_sha: str | None = None
    start_sha: str | None = None
    merged_at: str | None = None
    merged_by: User | None = None
    closed_at: str | None = None
    closed_by: User | None = None
    merge_commit_sha: str | None = None
    force_remove_source_branch: bool = False
    should_remove_source_branch: bool | None = None
    squash: bool = False
    merge_when_pipeline_succeeds: bool = False
    merge_status_override: str | None = None
    notes: list[Note] = field(default_factory=list)

    @property
    def draft(self) -> bool:
        return bool(DRAFT_TITLE.match(self.title))

    def user_notes(self) -> list[Note]:
        return [note for note in self.notes if not note.system]


@dataclass
class Job:
    id: int
    pipeline_id: int
    name: str
    stage: str
    status: str
    ref: str
    sha: str
    user: User
    created_at: str
    trace: str = ""
    failure_reason: str | None = None
    allow_failure: bool = False
    retried: bool = False
    started_at: str | None = None
    finished_at: str | None = None


@dataclass
class Pipeline:
    id: int
    iid: int
    ref: str
    sha: str
    source: str
    user: User
    created_at: str
    updated_at: str
    job_ids: list[int] = field(default_factory=list)
    status_without_jobs: str = "success"


@dataclass
class Project:
    id: int
    path: str  # path_with_namespace
    default_branch: str
    branches: dict[str, str] = field(default_factory=dict)
    commits: dict[str, Commit] = field(default_factory=dict)
    merge_requests: dict[int, MergeRequest] = field(default_factory=dict)
    pipelines: dict[int, Pipeline] = field(default_factory=dict)
    jobs: dict[int, Job] = field(default_factory=dict)
    created_at: str = field(default_factory=_now)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def namespace(self) -> str:
        return self.path.rsplit("/", 1)[0] if "/" in self.path else ""

    def resolve(self, ref: str | None) -> str | None:
        """The commit sha a branch name, full sha or unique sha prefix (>= 7) points to."""
        if not ref:
            return None
        if ref in self.branches:
            return self.branches[ref]
        if ref in self.commits:
            return ref
        if len(ref) >= 7 and re.fullmatch(r"[0-9a-f]+", ref):
            matches = [sha for sha in self.commits if sha.startswith(ref)]
            if len(matches) == 1:
                return matches[0]
        return None

    def tree(self, ref: str) -> dict[str, bytes] | None:
        sha = self.resolve(ref)
        return dict(self.commits[sha].tree) if sha else None

    def file(self, ref: str, path: str) -> bytes | None:
        tree = self.tree(ref)
        return None if tree is None else tree.get(path)

    def text(self, ref: str, path: str) -> str | None:
        content = self.file(ref, path)
        return None if content is None else content.decode()

    def ancestors(self, sha: str) -> set[str]:
        seen: set[str] = set()
        stack = [sha]
        while stack:
            current = stack.pop()
            if current not in seen:
                seen.add(current)
                stack.extend(self.commits[current].parent_ids)
        return seen

    def merge_base(self, left: str, right: str) -> str | None:
        common = self.ancestors(left) & self.ancestors(right)
        return max(common, key=lambda sha: self.commits[sha].seq) if common else None

    def commits_between(self, base: str | None, head: str) -> list[Commit]:
        """Commits reachable from head but not from base, oldest first (git log base..head)."""
        excluded = self.ancestors(base) if base else set()
        return sorted(
            (self.commits[sha] for sha in self.ancestors(head) - excluded),
            key=lambda commit: commit.seq,
        )

    def last_commit_touching(self, sha: str, path: str) -> str:
        content = self.commits[sha].tree.get(path)
        current = sha
        while True:
            parents = self.commits[current].parent_ids
            if not parents or self.commits[parents[0]].tree.get(path) != content:
                return current
            current = parents[0]


@dataclass
class LoggedRequest:
    """One request as the fake saw it; token header values are redacted."""

    method: str
    path: str  # as sent, still percent-encoded, without the query string
    query: dict[str, Any]
    json: Any
    headers: dict[str, str]
    status: int = 0
    injected: bool = False


@dataclass
class _Rule:
    method: str | None
    pattern: re.Pattern[str]
    remaining: int | None
    status: int | None = None
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False

    def matches(self, method: str, path: str) -> bool:
        return (self.method in (None, "*", method)) and bool(self.pattern.search(path))


@dataclass
class _Ctx:
    method: str
    raw_path: str
    query: dict[str, Any]
    params: dict[str, Any]
    token: Token
    args: dict[str, str]
    project: Project | None = None

    def get(self, name: str, default: Any = None) -> Any:
        value = self.params.get(name, default)
        return default if value is None else value

    def require(self, name: str) -> Any:
        value = self.params.get(name)
        if value is None:
            raise _param_error(f"{name} is missing")
        if isinstance(value, str | list) and not value:
            raise _param_error(f"{name} is empty")
        return value

    def flag(self, name: str, default: bool | None = None) -> bool | None:
        value = self.params.get(name)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes", "t"):
            return True
        if text in ("false", "0", "no", "f"):
            return False
        raise _param_error(f"{name} is invalid")

    def integer(self, name: str, default: int | None = None) -> int | None:
        value = self.params.get(name)
        if value is None or value == "":
            return default
        try:
            return int(value)
        except (TypeError, ValueError):
            raise _param_error(f"{name} is invalid") from None

    def arg_int(self, name: str) -> int:
        try:
            return int(self.args[name])
        except ValueError:
            raise _param_error(f"{name} is invalid") from None

    @property
    def proj(self) -> Project:
        assert self.project is not None
        return self.project


_Response = tuple[int, Any, dict[str, str]]
_Handler = Callable[["FakeGitLab", _Ctx], _Response]
_ROUTES: list[tuple[str, tuple[str, ...], _Handler]] = []


def _route(method: str, pattern: str) -> Callable[[_Handler], _Handler]:
    def register(handler: _Handler) -> _Handler:
        _ROUTES.append((method, tuple(pattern.split("/")), handler))
        return handler

    return register


def _ok(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> _Response:
    return status, body, headers or {}


# --------------------------------------------------------------------------- the fake


class FakeGitLab:
    """The fake GitLab server and its in-memory state (see the module docstring)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.RLock()
        self._counters = {
            "project": itertools.count(101),
            "user": itertools.count(11),
            "mr": itertools.count(5001),
            "note": itertools.count(9001),
            "pipeline": itertools.count(7001),
            "job": itertools.count(30001),
            "seq": itertools.count(1),
        }
        self.projects: dict[int, Project] = {}
        self.tokens: dict[str, Token] = {}
        self.users: dict[str, User] = {}
        self.requests: list[LoggedRequest] = []
        self._rules: list[_Rule] = []

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> FakeGitLab:
        """Listen on the loopback address (an ephemeral port unless one was given)."""
        if self._server is not None:
            return self
        server = _Server((self._host, self._port), _RequestHandler)
        server.fake = self
        self._port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-gitlab:{self._port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and cut open connections; `start()` again reuses the same port."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.close_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeGitLab:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The base URL to give python-gitlab, e.g. ``http://127.0.0.1:41234``."""
        if not self._port:
            raise RuntimeError("FakeGitLab is not started")
        return f"http://{self._host}:{self._port}"

    # ----------------------------------------------------------------- setup for tests

    def add_user(self, username: str, name: str | None = None) -> User:
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
        with self._lock:
            if self._find_project(path) is not None:
                raise ValueError(f"project {path} exists")
            pid = project_id if project_id is not None else next(self._counters["project"])
            project = Project(pid, path.strip("/"), default_branch)
            self.projects[pid] = project
            if not empty:
                initial = files if files is not None else {"README.md": f"# {project.name}\n"}
                tree = {name: _to_bytes(content) for name, content in initial.items()}
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
        `start` + files. Returns the new commit sha."""
        with self._lock:
            proj = self.project(project)
            base_ref = start if (start and (force or branch not in proj.branches)) else branch
            parent = proj.resolve(base_ref)
            tree = dict(proj.commits[parent].tree) if parent else {}
            for path, content in files.items():
                if content is None:
                    tree.pop(path, None)
                else:
                    tree[path] = _to_bytes(content)
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
        state ("closed", "opened", "merged" merges it) ..."""
        with self._lock:
            proj = self.project(project)
            mr = proj.merge_requests[iid]
            actor = self.add_user("someone-else")
            state = changes.pop("state", None)
            if "labels" in changes:
                changes["labels"] = _labels(changes["labels"])
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
            now = _now()
            pipeline = Pipeline(
                pipeline_id, len(proj.pipelines) + 1, ref, head, source, user, now, now
            )
            pipeline.status_without_jobs = status
            proj.pipelines[pipeline_id] = pipeline
            for spec in jobs:
                self._add_job(proj, pipeline, {"name": spec} if isinstance(spec, str) else spec)
            return pipeline

    def add_job(self, project: str | int, pipeline_id: int, **spec: Any) -> Job:
        with self._lock:
            proj = self.project(project)
            return self._add_job(proj, proj.pipelines[pipeline_id], spec)

    def job(self, project: str | int, job_id: int) -> Job:
        with self._lock:
            return self.project(project).jobs[job_id]

    def jobs(self, project: str | int, pipeline_id: int | None = None) -> list[Job]:
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
                now = _now()
                if changes["status"] == "running":
                    job.started_at = job.started_at or now
                elif changes["status"] not in ACTIVE_JOB_STATUSES:
                    job.started_at = job.started_at or now
                    job.finished_at = now
            pipeline = proj.pipelines[job.pipeline_id]
            pipeline.updated_at = _now()
            self._after_pipeline_change(proj, pipeline)
            return job

    def pipeline_status(self, project: str | int, pipeline_id: int) -> str:
        with self._lock:
            proj = self.project(project)
            return self._pipeline_status(proj, proj.pipelines[pipeline_id])

    # ----------------------------------------------------------------- failure injection

    def fail_next(
        self,
        method: str | None,
        path: str,
        status: int = 500,
        *,
        times: int | None = 1,
        retry_after: int | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer the next `times` requests (None: all) whose method matches (None or
        "*" for any) and whose percent-encoded path matches the regex `path`
        (re.search) with `status`, before any authentication or state change."""
        extra = dict(headers or {})
        if retry_after is not None:
            extra["Retry-After"] = str(retry_after)
        if status == 429:
            extra.setdefault("Retry-After", "0")
            extra.setdefault("RateLimit-Limit", "600")
            extra.setdefault("RateLimit-Remaining", "0")
        self._add_rule(method, path, times, status=status, body=body, headers=extra)

    def drop_next(self, method: str | None, path: str, *, times: int | None = 1) -> None:
        """Close the connection without answering (a reset / network failure)."""
        self._add_rule(method, path, times, drop=True)

    def add_latency(
        self, method: str | None, path: str, seconds: float, *, times: int | None = None
    ) -> None:
        """Delay matching requests by `seconds` (the delay is served outside the lock)."""
        self._add_rule(method, path, times, delay=seconds)

    def clear_faults(self) -> None:
        with self._lock:
            self._rules.clear()

    def _add_rule(self, method: str | None, path: str, times: int | None, **kwargs: Any) -> None:
        rule = _Rule(method.upper() if method else None, re.compile(path), times, **kwargs)
        with self._lock:
            self._rules.append(rule)

    def _take_rules(self, method: str, path: str) -> tuple[_Rule | None, float]:
        fault: _Rule | None = None
        delay = 0.0
        with self._lock:
            for rule in list(self._rules):
                if not rule.matches(method, path):
                    continue
                is_fault = rule.drop or rule.status is not None
                if is_fault and fault is not None:
                    continue
                if is_fault:
                    fault = rule
                else:
                    delay += rule.delay
                if rule.remaining is not None:
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._rules.remove(rule)
        return fault, delay

    # ----------------------------------------------------------------- request log

    def requests_to(self, method: str | None = None, path: str = "") -> list[LoggedRequest]:
        """Logged requests matching a method (None: any) and a path regex (re.search)."""
        pattern = re.compile(path)
        with self._lock:
            return [
                entry
                for entry in self.requests
                if (method is None or entry.method == method.upper()) and pattern.search(entry.path)
            ]

    def clear_requests(self) -> None:
        with self._lock:
            self.requests.clear()

    # ----------------------------------------------------------------- HTTP entry point

    def handle(
        self, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> _Response | None:
        """Answer one request: (status, body, headers), or None to drop the connection."""
        split = urlsplit(target)
        raw_path = split.path
        query = _parse_query(split.query)
        lowered = {key.lower(): value for key, value in headers.items()}
        logged = {
            key: ("[redacted]" if key.lower() in _SECRET_HEADERS else value)
            for key, value in headers.items()
        }
        entry = LoggedRequest(method, raw_path, query, None, logged)
        with self._lock:
            self.requests.append(entry)
        fault, delay = self._take_rules(method, raw_path)
        if delay:
            time.sleep(delay)
        try:
            entry.json = _parse_body(lowered.get("content-type", ""), body)
        except ApiError as err:
            entry.status = err.status
            return err.status, err.body, err.headers
        if fault is not None:
            entry.injected = True
            if fault.drop:
                entry.status = 0
                return None
            assert fault.status is not None
            payload = fault.body if fault.body is not None else _INJECTED_BODIES.get(fault.status)
            entry.status = fault.status
            return fault.status, payload, dict(fault.headers)
        with self._lock:
            try:
                response = self._dispatch(method, raw_path, query, lowered, entry.json)
            except ApiError as err:
                response = (err.status, err.body, err.headers)
        entry.status = response[0]
        return response

    def _dispatch(
        self,
        method: str,
        raw_path: str,
        query: dict[str, Any],
        headers: dict[str, str],
        body: Any,
    ) -> _Response:
        if not raw_path.startswith(API_PREFIX):
            raise ApiError(404, {"error": "404 Not Found"})
        segments = [unquote(part) for part in raw_path[len(API_PREFIX) :].split("/")]
        if segments and segments[-1] == "":
            segments.pop()
        candidates = [
            (route_method, handler, args)
            for route_method, pattern, handler in _ROUTES
            if (args := _match(pattern, segments)) is not None
        ]
        if not candidates:
            raise ApiError(404, {"error": "404 Not Found"})
        wanted = [method, "GET"] if method == "HEAD" else [method]
        chosen = next(
            ((handler, args) for want in wanted for m, handler, args in candidates if m == want),
            None,
        )
        if chosen is None:
            raise ApiError(405, {"error": "405 Not Allowed"})
        handler, args = chosen

        token = self._authenticate(headers, query)
        params = {key: value for key, value in query.items() if key != "private_token"}
        if isinstance(body, dict):
            params.update(body)
        ctx = _Ctx(method, raw_path, query, params, token, args)
        if "project" in args:
            project = self._find_project(args["project"])
            if project is None or not token.can_see(project):
                raise _not_found("Project")
            ctx.project = project
            if method not in ("GET", "HEAD") and token.access != "write":
                raise _message(403, "403 Forbidden")
        return handler(self, ctx)

    def _authenticate(self, headers: dict[str, str], query: dict[str, Any]) -> Token:
        value = headers.get("private-token") or query.get("private_token")
        authorization = headers.get("authorization", "")
        if not value and authorization.lower().startswith("bearer "):
            value = authorization[7:].strip()
        token = self.tokens.get(value) if isinstance(value, str) else None
        if token is None:
            raise _message(401, "401 Unauthorized")
        return token

    def _find_project(self, ref: str) -> Project | None:
        if ref.isdigit():
            return self.projects.get(int(ref))
        wanted = ref.strip("/").lower()
        return next((p for p in self.projects.values() if p.path.lower() == wanted), None)

    # ----------------------------------------------------------------- repository internals

    def _new_commit(
        self,
        project: Project,
        parents: list[str],
        tree: dict[str, bytes],
        message: str,
        author: User | None,
    ) -> Commit:
        seq = next(self._counters["seq"])
        digest = hashlib.sha1(usedforsecurity=False)
        for part in (project.path, *parents, message, str(seq)):
            digest.update(part.encode() + b"\0")
        for path in sorted(tree):
            digest.update(path.encode() + b"\0" + _blob_sha(tree[path]).encode())
        name = author.name if author else "Administrator"
        email = f"{author.username}@example.com" if author else "admin@example.com"
        commit = Commit(digest.hexdigest(), parents, tree, message, name, email, _now(), seq)
        project.commits[commit.id] = commit
        return commit

    def _set_branch(self, project: Project, branch: str, sha: str) -> None:
        """Move a branch and refresh the open MRs it is the source of, like a push."""
        old = project.branches.get(branch)
        project.branches[branch] = sha
        if old == sha:
            return
        for mr in project.merge_requests.values():
            if mr.state != "opened" or mr.source_branch != branch:
                continue
            # Like GitLab's refresh: the commits now in the MR's diff that were not before
            # (so a force push onto a moved target branch adds 1 commit, not the target's).
            target = project.branches.get(mr.target_branch)
            before = project.ancestors(old) if old else set()
            added = [c for c in project.commits_between(target, sha) if c.id not in before]
            mr.sha = sha
            mr.updated_at = _now()
            count = len(added)
            items = "".join(f"<li>{c.id[:8]} - {c.title}</li>" for c in added)
            body = f"added {count} commit{'s' if count != 1 else ''}\n\n<ul>{items}</ul>"
            self._system_note(mr, body, mr.author)

    def _delete_branch(self, project: Project, branch: str) -> None:
        project.branches.pop(branch, None)

    def _apply_actions(self, tree: dict[str, bytes], actions: Any) -> dict[str, bytes]:
        if not isinstance(actions, list):
            raise _param_error("actions is invalid")
        tree = dict(tree)
        for index, action in enumerate(actions):
            if not isinstance(action, dict):
                raise _param_error(f"actions[{index}] is invalid")
            kind = action.get("action")
            if kind not in ("create", "update", "delete", "move", "chmod"):
                raise _param_error(f"actions[{index}][action] does not have a valid value")
            path = action.get("file_path")
            if not path:
                raise _param_error(f"actions[{index}][file_path] is missing")
            _check_path(path)
            encoding = action.get("encoding") or "text"
            if encoding not in ("text", "base64"):
                raise _param_error(f"actions[{index}][encoding] does not have a valid value")
            raw = action.get("content")
            content: bytes | None = None
            if raw is not None:
                try:
                    content = base64.b64decode(raw) if encoding == "base64" else _to_bytes(raw)
                except (ValueError, TypeError):
                    raise _message(400, "Invalid base64 content") from None
            if kind == "create":
                _check_creatable(tree, path)
                tree[path] = content or b""
            elif kind == "update":
                if path not in tree:
                    raise _message(400, "A file with this name doesn't exist")
                tree[path] = content or b""
            elif kind in ("delete", "chmod"):
                if path not in tree:
                    raise _message(400, "A file with this name doesn't exist")
                if kind == "delete":
                    del tree[path]
            else:  # move
                previous = action.get("previous_path")
                if not previous:
                    raise _param_error(f"actions[{index}][previous_path] is missing")
                _check_path(previous)
                if previous not in tree:
                    raise _message(400, "A file with this name doesn't exist")
                moved = tree.pop(previous)
                _check_creatable(tree, path)
                tree[path] = moved if content is None else content
        return tree

    def _commit_actions(self, ctx: _Ctx, author: User) -> Commit:
        """The Commits API (and Files API) write path, with GitLab's branch rules."""
        project = ctx.proj
        branch = ctx.require("branch")
        message = ctx.require("commit_message")
        actions = ctx.require("actions")
        start_branch = ctx.get("start_branch")
        start_sha = ctx.get("start_sha")
        force = bool(ctx.flag("force", False))
        if start_branch and start_sha:
            raise _param_error("start_branch, start_sha are mutually exclusive")
        empty_repo = not project.branches
        if start_sha:
            different_branch = True
        else:
            start_branch = start_branch or branch
            different_branch = start_branch != branch
        if not empty_repo and different_branch and branch in project.branches and not force:
            raise _message(
                400,
                f"A branch called '{branch}' already exists. "
                "Switch to that branch in order to make changes",
            )
        if branch not in project.branches and not _valid_branch_name(branch):
            raise _message(
                400,
                f"Something went wrong when we tried to create '{branch}' for you: "
                "Branch name is invalid",
            )
        parent: str | None = None
        if start_sha:
            parent = None if start_sha in project.branches else project.resolve(start_sha)
            if parent is None:
                raise _message(400, f"Cannot find start_sha '{start_sha}'")
        elif not empty_repo:
            if start_branch not in project.branches:
                raise _message(400, "You can only create or edit files when you are on a branch")
            parent = project.branches[start_branch]
        base_tree = project.commits[parent].tree if parent else {}
        tree = self._apply_actions(base_tree, actions)
        commit = self._new_commit(project, [parent] if parent else [], tree, message, author)
        self._set_branch(project, branch, commit.id)
        return commit

    def _merge_trees(self, project: Project, target: str, source: str) -> tuple[dict, list[str]]:
        base = project.merge_base(target, source)
        base_tree = project.commits[base].tree if base else {}
        target_tree = project.commits[target].tree
        source_tree = project.commits[source].tree
        merged = dict(target_tree)
        conflicts = []
        for path in set(base_tree) | set(source_tree):
            theirs = source_tree.get(path)
            original = base_tree.get(path)
            if theirs == original:
                continue
            ours = target_tree.get(path)
            if ours not in (original, theirs):
                conflicts.append(path)
            elif theirs is None:
                merged.pop(path, None)
            else:
                merged[path] = theirs
        return merged, sorted(conflicts)

    # ----------------------------------------------------------------- MR internals

    def _refresh_mr(self, project: Project, mr: MergeRequest) -> None:
        """Keep an open MR's diff refs in step with its branches (GitLab does on push)."""
        if mr.state != "opened":
            return
        source = project.branches.get(mr.source_branch)
        target = project.branches.get(mr.target_branch)
        if source is None or target is None:
            return
        mr.sha = source
        mr.start_sha = target
        mr.base_sha = project.merge_base(target, source)

    def _mr_diffs(self, project: Project, mr: MergeRequest) -> list[dict[str, Any]]:
        self._refresh_mr(project, mr)
        if mr.sha is None:
            return []
        base = project.commits[mr.base_sha].tree if mr.base_sha else {}
        return _tree_diff(base, project.commits[mr.sha].tree)

    def _conflicts(self, project: Project, mr: MergeRequest) -> list[str]:
        source = project.branches.get(mr.source_branch)
        target = project.branches.get(mr.target_branch)
        if mr.state != "opened" or source is None or target is None:
            return []
        return self._merge_trees(project, target, source)[1]

    def _detailed_status(self, project: Project, mr: MergeRequest) -> str:
        if mr.state != "opened":
            return "not_open"
        if mr.merge_status_override is not None:
            return mr.merge_status_override
        if mr.source_branch not in project.branches or mr.target_branch not in project.branches:
            return "broken_status"
        if mr.draft:
            return "draft_status"
        if self._conflicts(project, mr):
            return "conflict"
        return "mergeable"

    def _head_pipeline(self, project: Project, mr: MergeRequest) -> Pipeline | None:
        self._refresh_mr(project, mr)
        refs = {mr.source_branch, f"refs/merge-requests/{mr.iid}/head"}
        candidates = [
            pipeline
            for pipeline in project.pipelines.values()
            if pipeline.ref in refs and pipeline.sha == mr.sha
        ]
        return max(candidates, key=lambda pipeline: pipeline.id) if candidates else None

    def _system_note(self, mr: MergeRequest, body: str, author: User) -> None:
        now = _now()
        note_id = next(self._counters["note"])
        mr.notes.append(Note(note_id, body, author, False, True, now, now))

    def _apply_mr_fields(self, mr: MergeRequest, changes: dict[str, Any], actor: User) -> None:
        for key, value in changes.items():
            if key == "title" and value != mr.title:
                self._system_note(mr, f"changed title from **{mr.title}** to **{value}**", actor)
            elif key == "description" and value != mr.description:
                self._system_note(mr, "changed the description", actor)
            if not hasattr(mr, key):
                raise AttributeError(key)
            setattr(mr, key, value)
        if changes:
            mr.updated_at = _now()

    def _close(self, mr: MergeRequest, actor: User) -> None:
        if mr.state != "opened":
            return
        mr.state = "closed"
        mr.closed_at = mr.updated_at = _now()
        mr.closed_by = actor
        mr.merge_when_pipeline_succeeds = False
        self._system_note(mr, "closed", actor)

    def _reopen(self, mr: MergeRequest, actor: User) -> None:
        if mr.state != "closed":
            return
        mr.state = "opened"
        mr.closed_at = None
        mr.closed_by = None
        mr.updated_at = _now()
        self._system_note(mr, "reopened", actor)

    def _merge(
        self, project: Project, mr: MergeRequest, actor: User, *, remove_source: bool | None
    ) -> None:
        self._refresh_mr(project, mr)
        target = project.branches[mr.target_branch]
        source = project.branches[mr.source_branch]
        tree, conflicts = self._merge_trees(project, target, source)
        if conflicts:
            raise _message(422, "Branch cannot be merged")
        message = (
            f"Merge branch '{mr.source_branch}' into '{mr.target_branch}'\n\n{mr.title}\n\n"
            f"See merge request {project.path}!{mr.iid}"
        )
        commit = self._new_commit(project, [target, source], tree, message, actor)
        self._set_branch(project, mr.target_branch, commit.id)
        mr.state = "merged"
        mr.merged_at = mr.updated_at = _now()
        mr.merged_by = actor
        mr.merge_commit_sha = commit.id
        mr.merge_when_pipeline_succeeds = False
        self._system_note(mr, f"merged\n\n{commit.id[:8]}", actor)
        remove = mr.force_remove_source_branch if remove_source is None else remove_source
        if remove:
            self._delete_branch(project, mr.source_branch)

    # ----------------------------------------------------------------- CI internals

    def _add_job(self, project: Project, pipeline: Pipeline, spec: dict[str, Any]) -> Job:
        status = spec.get("status", "success")
        now = _now()
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

    # ----------------------------------------------------------------- serialisation

    def _web(self, project: Project) -> str:
        return f"{self.url}/{project.path}"

    def _user_json(self, user: User | None) -> dict[str, Any] | None:
        if user is None:
            return None
        return {
            "id": user.id,
            "username": user.username,
            "name": user.name,
            "state": "active",
            "locked": False,
            "avatar_url": None,
            "web_url": f"{self.url}/{user.username}",
        }

    def _project_json(self, project: Project, token: Token) -> dict[str, Any]:
        web = self._web(project)
        namespace = project.namespace
        return {
            "id": project.id,
            "description": None,
            "name": project.name,
            "name_with_namespace": project.path.replace("/", " / "),
            "path": project.name,
            "path_with_namespace": project.path,
            "created_at": project.created_at,
            "default_branch": project.default_branch if project.branches else None,
            "tag_list": [],
            "topics": [],
            "ssh_url_to_repo": f"git@127.0.0.1:{project.path}.git",
            "http_url_to_repo": f"{web}.git",
            "web_url": web,
            "readme_url": None,
            "forks_count": 0,
            "avatar_url": None,
            "star_count": 0,
            "last_activity_at": project.created_at,
            "namespace": {
                "id": zlib.crc32(namespace.encode()) % 10_000,
                "name": namespace.rsplit("/", 1)[-1],
                "path": namespace.rsplit("/", 1)[-1],
                "kind": "group",
                "full_path": namespace,
                "parent_id": None,
                "avatar_url": None,
                "web_url": f"{self.url}/groups/{namespace}",
            },
            "empty_repo": not project.branches,
            "archived": False,
            "visibility": "private",
            "merge_method": "merge",
            "squash_option": "default_off",
            "only_allow_merge_if_pipeline_succeeds": False,
            "remove_source_branch_after_merge": True,
            "permissions": {
                "project_access": {
                    "access_level": 40 if token.access == "write" else 20,
                    "notification_level": 3,
                },
                "group_access": None,
            },
        }

    def _commit_json(self, project: Project, commit: Commit) -> dict[str, Any]:
        return {
            "id": commit.id,
            "short_id": commit.id[:8],
            "created_at": commit.created_at,
            "parent_ids": list(commit.parent_ids),
            "title": commit.title,
            "message": commit.message,
            "author_name": commit.author_name,
            "author_email": commit.author_email,
            "authored_date": commit.created_at,
            "committer_name": commit.author_name,
            "committer_email": commit.author_email,
            "committed_date": commit.created_at,
            "trailers": {},
            "extended_trailers": {},
            "web_url": f"{self._web(project)}/-/commit/{commit.id}",
        }

    def _commit_detail_json(self, project: Project, commit: Commit) -> dict[str, Any]:
        parent = project.commits[commit.parent_ids[0]].tree if commit.parent_ids else {}
        additions = deletions = 0
        for entry in _tree_diff(parent, commit.tree):
            added, removed = _line_stats(entry["diff"])
            additions += added
            deletions += removed
        pipelines = [p for p in project.pipelines.values() if p.sha == commit.id]
        last = max(pipelines, key=lambda p: p.id) if pipelines else None
        data = self._commit_json(project, commit)
        data.update(
            {
                "stats": {
                    "additions": additions,
                    "deletions": deletions,
                    "total": additions + deletions,
                },
                "status": self._pipeline_status(project, last) if last else None,
                "project_id": project.id,
                "last_pipeline": self._pipeline_json(project, last) if last else None,
            }
        )
        return data

    def _branch_json(self, project: Project, name: str) -> dict[str, Any]:
        sha = project.branches[name]
        default_head = project.branches.get(project.default_branch)
        merged = (
            name != project.default_branch
            and default_head is not None
            and sha in project.ancestors(default_head)
        )
        return {
            "name": name,
            "commit": self._commit_json(project, project.commits[sha]),
            "merged": merged,
            "protected": name == project.default_branch,
            "developers_can_push": False,
            "developers_can_merge": False,
            "can_push": True,
            "default": name == project.default_branch,
            "web_url": f"{self._web(project)}/-/tree/{name}",
        }

    def _mr_json(self, project: Project, mr: MergeRequest, *, basic: bool = False) -> dict:
        self._refresh_mr(project, mr)
        status = self._detailed_status(project, mr)
        legacy = {
            "mergeable": "can_be_merged",
            "conflict": "cannot_be_merged",
            "checking": "checking",
            "unchecked": "unchecked",
        }.get(status, "cannot_be_merged" if status == "broken_status" else "can_be_merged")
        reference = f"!{mr.iid}"
        data: dict[str, Any] = {
            "id": mr.id,
            "iid": mr.iid,
            "project_id": project.id,
            "title": mr.title,
            "description": mr.description,
            "state": mr.state,
            "created_at": mr.created_at,
            "updated_at": mr.updated_at,
            "merged_by": self._user_json(mr.merged_by),
            "merge_user": self._user_json(mr.merged_by),
            "merged_at": mr.merged_at,
            "closed_by": self._user_json(mr.closed_by),
            "closed_at": mr.closed_at,
            "target_branch": mr.target_branch,
            "source_branch": mr.source_branch,
            "user_notes_count": len(mr.user_notes()),
            "upvotes": 0,
            "downvotes": 0,
            "author": self._user_json(mr.author),
            "assignees": [],
            "assignee": None,
            "reviewers": [],
            "source_project_id": project.id,
            "target_project_id": project.id,
            "labels": sorted(mr.labels),
            "draft": mr.draft,
            "imported": False,
            "imported_from": "none",
            "work_in_progress": mr.draft,
            "milestone": None,
            "merge_when_pipeline_succeeds": mr.merge_when_pipeline_succeeds,
            "merge_status": legacy,
            "detailed_merge_status": status,
            "merge_after": None,
            "sha": mr.sha,
            "merge_commit_sha": mr.merge_commit_sha,
            "squash_commit_sha": None,
            "discussion_locked": None,
            "should_remove_source_branch": mr.should_remove_source_branch,
            "force_remove_source_branch": mr.force_remove_source_branch,
            "prepared_at": mr.created_at,
            "reference": reference,
            "references": {
                "short": reference,
                "relative": reference,
                "full": f"{project.path}{reference}",
            },
            "web_url": f"{self._web(project)}/-/merge_requests/{mr.iid}",
            "time_stats": {
                "time_estimate": 0,
                "total_time_spent": 0,
                "human_time_estimate": None,
                "human_total_time_spent": None,
            },
            "squash": mr.squash,
            "squash_on_merge": mr.squash,
            "task_completion_status": {"count": 0, "completed_count": 0},
            "has_conflicts": bool(self._conflicts(project, mr)),
            "blocking_discussions_resolved": True,
            "approvals_before_merge": None,
        }
        if basic:
            return data
        head = self._head_pipeline(project, mr)
        data.update(
            {
                "subscribed": True,
                "changes_count": str(len(self._mr_diffs(project, mr))),
                "latest_build_started_at": None,
                "latest_build_finished_at": None,
                "first_deployed_to_production_at": None,
                "pipeline": self._pipeline_json(project, head) if head else None,
                "head_pipeline": self._pipeline_json(project, head, detail=True) if head else None,
                "diff_refs": {
                    "base_sha": mr.base_sha,
                    "head_sha": mr.sha,
                    "start_sha": mr.start_sha,
                },
                "merge_error": None,
                "first_contribution": False,
                "user": {"can_merge": True},
            }
        )
        return data

    def _note_json(self, project: Project, mr: MergeRequest, note: Note) -> dict[str, Any]:
        return {
            "id": note.id,
            "type": None,
            "body": note.body,
            "author": self._user_json(note.author),
            "created_at": note.created_at,
            "updated_at": note.updated_at,
            "system": note.system,
            "noteable_id": mr.id,
            "noteable_type": "MergeRequest",
            "project_id": project.id,
            "resolvable": False,
            "confidential": note.internal,
            "internal": note.internal,
            "imported": False,
            "imported_from": "none",
            "noteable_iid": mr.iid,
            "commands_changes": {},
        }

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

    def _paginate(self, ctx: _Ctx, items: list[Any]) -> _Response:
        per_page = ctx.integer("per_page", 20) or 20
        per_page = max(1, min(per_page, 100))
        page = max(1, ctx.integer("page", 1) or 1)
        total = len(items)
        pages = max(1, -(-total // per_page))
        chunk = items[(page - 1) * per_page : page * per_page]
        keep = [
            (key, value)
            for key, values in ctx.query.items()
            if key not in ("page", "per_page", "private_token")
            for value in (values if isinstance(values, list) else [values])
        ]
        key_names = {
            key: f"{key}[]" for key, values in ctx.query.items() if isinstance(values, list)
        }
        keep = [(key_names.get(key, key), value) for key, value in keep]

        def link(number: int) -> str:
            query = urlencode([*keep, ("page", number), ("per_page", per_page)])
            return f"{self.url}{ctx.raw_path}?{query}"

        links = []
        if page < pages:
            links.append(f'<{link(page + 1)}>; rel="next"')
        if page > 1:
            links.append(f'<{link(page - 1)}>; rel="prev"')
        links.append(f'<{link(1)}>; rel="first"')
        links.append(f'<{link(pages)}>; rel="last"')
        headers = {
            "X-Page": str(page),
            "X-Per-Page": str(per_page),
            "X-Total": str(total),
            "X-Total-Pages": str(pages),
            "X-Next-Page": str(page + 1) if page < pages else "",
            "X-Prev-Page": str(page - 1) if page > 1 else "",
            "Link": ", ".join(links),
        }
        return 200, chunk, headers

    # ----------------------------------------------------------------- lookups

    def _mr(self, ctx: _Ctx) -> MergeRequest:
        iid = ctx.arg_int("iid")
        mr = ctx.proj.merge_requests.get(iid)
        if mr is None:
            raise _message(404, "404 Not found")
        return mr

    def _job(self, ctx: _Ctx) -> Job:
        job = ctx.proj.jobs.get(ctx.arg_int("job_id"))
        if job is None:
            raise _message(404, "404 Not found")
        return job

    def _file(self, ctx: _Ctx, ref: str | None) -> tuple[Commit, str, bytes]:
        project = ctx.proj
        if ref is None:
            raise _param_error("ref is missing")
        sha = project.resolve(ref)
        if sha is None:
            raise _not_found("Commit")
        path = ctx.args["file_path"]
        content = project.commits[sha].tree.get(path)
        if content is None:
            raise _not_found("File")
        return project.commits[sha], path, content

    def _file_headers(self, ctx: _Ctx, commit: Commit, path: str, content: bytes, ref: str):
        return {
            "X-Gitlab-File-Name": path.rsplit("/", 1)[-1],
            "X-Gitlab-File-Path": path,
            "X-Gitlab-Size": str(len(content)),
            "X-Gitlab-Encoding": "base64",
            "X-Gitlab-Blob-Id": _blob_sha(content),
            "X-Gitlab-Commit-Id": commit.id,
            "X-Gitlab-Last-Commit-Id": ctx.proj.last_commit_touching(commit.id, path),
            "X-Gitlab-Content-Sha256": hashlib.sha256(content).hexdigest(),
            "X-Gitlab-Ref": ref,
            "X-Gitlab-Execute-Filemode": "false",
        }

    # ----------------------------------------------------------------- endpoints: misc

    @_route("GET", "version")
    def _get_version(self, ctx: _Ctx) -> _Response:
        return _ok({"version": "17.11.0", "revision": "fake0000", "enterprise": False})

    @_route("GET", "user")
    def _get_user(self, ctx: _Ctx) -> _Response:
        data = self._user_json(ctx.token.user)
        assert data is not None
        data.update({"email": f"{ctx.token.user.username}@example.com", "bot": True})
        return _ok(data)

    @_route("GET", "projects/:project")
    def _get_project(self, ctx: _Ctx) -> _Response:
        return _ok(self._project_json(ctx.proj, ctx.token))

    # ----------------------------------------------------------------- endpoints: branches

    @_route("GET", "projects/:project/repository/branches")
    def _list_branches(self, ctx: _Ctx) -> _Response:
        search = str(ctx.get("search", "")).lower()
        names = sorted(name for name in ctx.proj.branches if search in name.lower())
        return self._paginate(ctx, [self._branch_json(ctx.proj, name) for name in names])

    @_route("GET", "projects/:project/repository/branches/:branch")
    def _get_branch(self, ctx: _Ctx) -> _Response:
        if ctx.args["branch"] not in ctx.proj.branches:
            raise _not_found("Branch")
        return _ok(self._branch_json(ctx.proj, ctx.args["branch"]))

    @_route("POST", "projects/:project/repository/branches")
    def _create_branch(self, ctx: _Ctx) -> _Response:
        project = ctx.proj
        name = ctx.require("branch")
        ref = ctx.require("ref")
        if name in project.branches:
            raise _message(400, "Branch already exists")
        if not _valid_branch_name(name):
            raise _message(400, "Branch name is invalid")
        sha = project.resolve(ref)
        if sha is None:
            raise _message(400, f"Failed to create branch '{name}': invalid reference name '{ref}'")
        self._set_branch(project, name, sha)
        return _ok(self._branch_json(project, name), 201)

    @_route("DELETE", "projects/:project/repository/branches/:branch")
    def _delete_branch_endpoint(self, ctx: _Ctx) -> _Response:
        project = ctx.proj
        name = ctx.args["branch"]
        if name not in project.branches:
            raise _not_found("Branch")
        if name == project.default_branch:
            raise _message(405, "Cannot remove HEAD branch")
        self._delete_branch(project, name)
        return _ok(b"", 204)

    # ----------------------------------------------------------------- endpoints: files

    @_route("GET", "projects/:project/repository/files/:file_path")
    def _get_file(self, ctx: _Ctx) -> _Response:
        ref = ctx.get("ref")
        commit, path, content = self._file(ctx, ref)
        headers = self._file_headers(ctx, commit, path, content, ref)
        if ctx.method == "HEAD":
            return _ok(b"", 200, headers)
        body = {
            "file_name": path.rsplit("/", 1)[-1],
            "file_path": path,
            "size": len(content),
            "encoding": "base64",
            "content_sha256": headers["X-Gitlab-Content-Sha256"],
            "ref": ref,
            "blob_id": headers["X-Gitlab-Blob-Id"],
            "commit_id": commit.id,
            "last_commit_id": headers["X-Gitlab-Last-Commit-Id"],
            "execute_filemode": False,
            "content": base64.b64encode(content).decode(),
        }
        return _ok(body, 200, headers)

    @_route("GET", "projects/:project/repository/files/:file_path/raw")
    def _get_raw_file(self, ctx: _Ctx) -> _Response:
        ref = ctx.get("ref", ctx.proj.default_branch)
        commit, path, content = self._file(ctx, ref)
        headers = self._file_headers(ctx, commit, path, content, ref)
        headers["Content-Type"] = "text/plain; charset=utf-8"
        return _ok(content, 200, headers)

    def _file_write(self, ctx: _Ctx, action: str) -> Commit:
        entry: dict[str, Any] = {"action": action, "file_path": ctx.args["file_path"]}
        if action != "delete":
            entry["content"] = ctx.require("content")
            entry["encoding"] = ctx.get("encoding", "text")
        ctx.params["actions"] = [entry]
        return self._commit_actions(ctx, ctx.token.user)

    @_route("POST", "projects/:project/repository/files/:file_path")
    def _create_file(self, ctx: _Ctx) -> _Response:
        self._file_write(ctx, "create")
        return _ok({"file_path": ctx.args["file_path"], "branch": ctx.params["branch"]}, 201)

    @_route("PUT", "projects/:project/repository/files/:file_path")
    def _update_file(self, ctx: _Ctx) -> _Response:
        self._file_write(ctx, "update")
        return _ok({"file_path": ctx.args["file_path"], "branch": ctx.params["branch"]})

    @_route("DELETE", "projects/:project/repository/files/:file_path")
    def _delete_file(self, ctx: _Ctx) -> _Response:
        self._file_write(ctx, "delete")
        return _ok(b"", 204)

    @_route("GET", "projects/:project/repository/tree")
    def _get_tree(self, ctx: _Ctx) -> _Response:
        project = ctx.proj
        tree = project.tree(ctx.get("ref", project.default_branch))
        if tree is None:
            raise _not_found("Tree")
        prefix = str(ctx.get("path", "")).strip("/")
        recursive = bool(ctx.flag("recursive", False))
        if prefix and not any(path.startswith(prefix + "/") for path in tree):
            raise _not_found("Tree")
        entries: dict[str, dict[str, Any]] = {}
        for path, content in tree.items():
            if prefix and not path.startswith(prefix + "/"):
                continue
            rest = path[len(prefix) + 1 :] if prefix else path
            parts = rest.split("/")
            depth = len(parts) if recursive else 1
            for level in range(min(depth, len(parts))):
                sub = "/".join(filter(None, [prefix, *parts[: level + 1]]))
                is_blob = level == len(parts) - 1
                entries.setdefault(
                    sub,
                    {
                        "id": _blob_sha(content)
                        if is_blob
                        else hashlib.sha1(sub.encode(), usedforsecurity=False).hexdigest(),
                        "name": parts[level],
                        "type": "blob" if is_blob else "tree",
                        "path": sub,
                        "mode": "100644" if is_blob else "040000",
                    },
                )
        ordered = sorted(entries.values(), key=lambda e: (e["type"] != "tree", e["path"]))
        return self._paginate(ctx, ordered)

    # ----------------------------------------------------------------- endpoints: commits

    @_route("GET", "projects/:project/repository/commits")
    def _list_commits(self, ctx: _Ctx) -> _Response:
        project = ctx.proj
        sha = project.resolve(ctx.get("ref_name", project.default_branch))
        if sha is None:
            return self._paginate(ctx, [])
        commits = sorted(
            (project.commits[s] for s in project.ancestors(sha)),
            key=lambda commit: commit.seq,
            reverse=True,
        )
        path = ctx.get("path")
        if path:
            commits = [c for c in commits if _touches(project, c, path)]
        return self._paginate(ctx, [self._commit_json(project, c) for c in commits])

    @_route("GET", "projects/:project/repository/commits/:sha")
    def _get_commit(self, ctx: _Ctx) -> _Response:
        sha = ctx.proj.resolve(ctx.args["sha"])
        if sha is None:
            raise _not_found("Commit")
        return _ok(self._commit_detail_json(ctx.proj, ctx.proj.commits[sha]))

    @_route("POST", "projects/:project/repository/commits")
    def _create_commit(self, ctx: _Ctx) -> _Response:
        commit = self._commit_actions(ctx, ctx.token.user)
        return _ok(self._commit_detail_json(ctx.proj, commit), 201)

    @_route("GET", "projects/:project/repository/compare")
    def _compare(self, ctx: _Ctx) -> _Response:
        project = ctx.proj
        source = project.resolve(ctx.require("from"))
        head = project.resolve(ctx.require("to"))
        if source is None or head is None:
            raise _not_found("Ref")
        straight = bool(ctx.flag("straight", False))
        base = source if straight else (project.merge_base(source, head) or source)
        commits = project.commits_between(source, head)
        same = source == head
        return _ok(
            {
                "commit": self._commit_json(project, commits[-1]) if commits else None,
                "commits": [self._commit_json(project, commit) for commit in commits],
                "diffs": []
                if same
                else _tree_diff(project.commits[base].tree, project.commits[head].tree),
                "compare_timeout": False,
                "compare_same_ref": same,
                "web_url": f"{self._web(project)}/-/compare/{source[:8]}...{head[:8]}",
            }
        )

    # ----------------------------------------------------------------- endpoints: MRs

    @_route("GET", "projects/:project/merge_requests")
    def _list_mrs(self, ctx: _Ctx) -> _Response:
        project = ctx.proj
        state = ctx.get("state", "all")
        if state not in ("opened", "closed", "locked", "merged", "all"):
            raise _param_error("state does not have a valid value")
        wanted = _labels(ctx.get("labels"))
        iids = ctx.get("iids")
        iid_set = {int(i) for i in (iids if isinstance(iids, list) else [iids])} if iids else None
        wip = ctx.get("wip")
        search = str(ctx.get("search", "")).lower()
        selected = []
        for mr in project.merge_requests.values():
            if state != "all" and mr.state != state:
                continue
            if ctx.get("source_branch") not in (None, mr.source_branch):
                continue
            if ctx.get("target_branch") not in (None, mr.target_branch):
                continue
            if iid_set is not None and mr.iid not in iid_set:
                continue
            if wip in ("yes", "no") and mr.draft != (wip == "yes"):
                continue
            if search and search not in mr.title.lower() and search not in mr.description.lower():
                continue
            if wanted == ["None"] and mr.labels:
                continue
            if wanted == ["Any"] and not mr.labels:
                continue
            if wanted not in (["None"], ["Any"]) and not set(wanted) <= set(mr.labels):
                continue
            selected.append(mr)
        order_by = ctx.get("order_by", "created_at")
        if order_by not in ("created_at", "updated_at", "title", "merged_at"):
            raise _param_error("order_by does not have a valid value")
        ascending = ctx.get("sort", "desc") == "asc"
        selected.sort(key=lambda mr: (getattr(mr, order_by) or "", mr.id), reverse=not ascending)
        return self._paginate(ctx, [self._mr_json(project, mr, basic=True) for mr in selected])

    @_route("POST", "projects/:project/merge_requests")
    def _create_mr(self, ctx: _Ctx) -> _Response:
        project = ctx.proj
        source = ctx.require("source_branch")
        target = ctx.require("target_branch")
        title = ctx.require("title")
        if source == target:
            raise _message(422, ["You can't use same project/branch for source and target"])
        if source not in project.branches:
            raise _message(400, {"source_branch": ["does not exist"]})
        if target not in project.branches:
            raise _message(400, {"target_branch": ["does not exist"]})
        for other in project.merge_requests.values():
            if (
                other.state == "opened"
                and other.source_branch == source
                and other.target_branch == target
            ):
                raise _message(
                    409,
                    [
                        f"Another open merge request already exists for this source branch: "
                        f"!{other.iid}"
                    ],
                )
        now = _now()
        iid = max(project.merge_requests, default=0) + 1
        mr = MergeRequest(
            id=next(self._counters["mr"]),
            iid=iid,
            title=title,
            description=ctx.get("description", ""),
            source_branch=source,
            target_branch=target,
            author=ctx.token.user,
            labels=_labels(ctx.get("labels")),
            created_at=now,
            updated_at=now,
            force_remove_source_branch=bool(ctx.flag("remove_source_branch", False)),
            squash=bool(ctx.flag("squash", False)),
        )
        project.merge_requests[iid] = mr
        self._refresh_mr(project, mr)
        return _ok(self._mr_json(project, mr), 201)

    @_route("GET", "projects/:project/merge_requests/:iid")
    def _get_mr(self, ctx: _Ctx) -> _Response:
        return _ok(self._mr_json(ctx.proj, self._mr(ctx)))

    @_route("PUT", "projects/:project/merge_requests/:iid")
    def _update_mr(self, ctx: _Ctx) -> _Response:
        project = ctx.proj
        mr = self._mr(ctx)
        known = (
            "title", "description", "labels", "add_labels", "remove_labels", "state_event",
            "target_branch", "remove_source_branch", "squash", "assignee_id", "assignee_ids",
            "reviewer_ids", "milestone_id", "discussion_locked", "allow_collaboration",
            "allow_maintainer_to_push",
        )  # fmt: skip
        if not any(ctx.params.get(key) is not None for key in known):
            raise _param_error(
                ", ".join(known) + " are missing, at least one parameter must be provided"
            )
        state_event = ctx.get("state_event")
        if state_event not in (None, "close", "reopen"):
            raise _param_error("state_event does not have a valid value")
        target = ctx.get("target_branch")
        if target is not None and target not in project.branches:
            raise _message(400, {"target_branch": ["does not exist"]})
        changes: dict[str, Any] = {}
        for key in ("title", "description", "target_branch"):
            if ctx.get(key) is not None:
                changes[key] = ctx.get(key)
        if ctx.params.get("labels") is not None:
            labels = _labels(ctx.params["labels"])
        else:
            labels = list(mr.labels)
        labels += [label for label in _labels(ctx.get("add_labels")) if label not in labels]
        removed = set(_labels(ctx.get("remove_labels")))
        labels = [label for label in labels if label not in removed]
        if labels != mr.labels:
            changes["labels"] = labels
        if ctx.flag("remove_source_branch") is not None:
            changes["force_remove_source_branch"] = ctx.flag("remove_source_branch")
        if ctx.flag("squash") is not None:
            changes["squash"] = ctx.flag("squash")
        self._apply_mr_fields(mr, changes, ctx.token.user)
        if state_event == "close":
            self._close(mr, ctx.token.user)
        elif state_event == "reopen":
            self._reopen(mr, ctx.token.user)
        return _ok(self._mr_json(project, mr))

    @_route("PUT", "projects/:project/merge_requests/:iid/merge")
    def _merge_mr(self, ctx: _Ctx) -> _Response:
        project = ctx.proj
        mr = self._mr(ctx)
        self._refresh_mr(project, mr)
        if mr.state != "opened":
            raise _message(405, "405 Method Not Allowed")
        head = self._head_pipeline(project, mr)
        pipeline_active = head is not None and self._pipeline_status(project, head) in (
            ACTIVE_JOB_STATUSES | {"running"}
        )
        auto = bool(
            ctx.flag("merge_when_pipeline_succeeds", False) or ctx.flag("auto_merge", False)
        )
        if auto and pipeline_active and not mr.draft:
            if ctx.get("sha") not in (None, mr.sha):
                raise _message(409, f"SHA does not match HEAD of source branch: {mr.sha}")
            mr.merge_when_pipeline_succeeds = True
            if ctx.flag("should_remove_source_branch") is not None:
                mr.should_remove_source_branch = ctx.flag("should_remove_source_branch")
            mr.updated_at = _now()
            return _ok(self._mr_json(project, mr))
        status = self._detailed_status(project, mr)
        if mr.draft or status not in ("mergeable", "conflict"):
            raise _message(405, "405 Method Not Allowed")
        if status == "conflict":
            raise _message(422, "Branch cannot be merged")
        if ctx.get("sha") not in (None, mr.sha):
            raise _message(409, f"SHA does not match HEAD of source branch: {mr.sha}")
        remove = ctx.flag("should_remove_source_branch")
        if remove is not None:
            mr.should_remove_source_branch = remove
        self._merge(project, mr, ctx.token.user, remove_source=remove)
        return _ok(self._mr_json(project, mr))

    @_route("GET", "projects/:project/merge_requests/:iid/changes")
    def _mr_changes(self, ctx: _Ctx) -> _Response:
        mr = self._mr(ctx)
        data = self._mr_json(ctx.proj, mr)
        data["changes"] = self._mr_diffs(ctx.proj, mr)
        data["overflow"] = False
        return _ok(data)

    @_route("GET", "projects/:project/merge_requests/:iid/diffs")
    def _mr_diffs_endpoint(self, ctx: _Ctx) -> _Response:
        return self._paginate(ctx, self._mr_diffs(ctx.proj, self._mr(ctx)))

    @_route("GET", "projects/:project/merge_requests/:iid/pipelines")
    def _mr_pipelines(self, ctx: _Ctx) -> _Response:
        project = ctx.proj
        mr = self._mr(ctx)
        refs = {mr.source_branch, f"refs/merge-requests/{mr.iid}/head"}
        pipelines = sorted(
            (p for p in project.pipelines.values() if p.ref in refs),
            key=lambda p: p.id,
            reverse=True,
        )
        return self._paginate(ctx, [self._pipeline_json(project, p) for p in pipelines])

    # ----------------------------------------------------------------- endpoints: notes

    def _note(self, ctx: _Ctx, mr: MergeRequest) -> Note:
        note_id = ctx.arg_int("note_id")
        note = next((n for n in mr.notes if n.id == note_id), None)
        if note is None:
            raise _not_found("Note")
        return note

    @_route("GET", "projects/:project/merge_requests/:iid/notes")
    def _list_notes(self, ctx: _Ctx) -> _Response:
        mr = self._mr(ctx)
        order_by = ctx.get("order_by", "created_at")
        ascending = ctx.get("sort", "desc") == "asc"
        notes = sorted(
            mr.notes, key=lambda n: (getattr(n, order_by, n.created_at), n.id),
            reverse=not ascending,
        )  # fmt: skip
        return self._paginate(ctx, [self._note_json(ctx.proj, mr, note) for note in notes])

    @_route("POST", "projects/:project/merge_requests/:iid/notes")
    def _create_note(self, ctx: _Ctx) -> _Response:
        mr = self._mr(ctx)
        body = ctx.require("body")
        internal = bool(ctx.flag("internal", False) or ctx.flag("confidential", False))
        now = _now()
        note = Note(next(self._counters["note"]), body, ctx.token.user, internal, False, now, now)
        mr.notes.append(note)
        return _ok(self._note_json(ctx.proj, mr, note), 201)

    @_route("GET", "projects/:project/merge_requests/:iid/notes/:note_id")
    def _get_note(self, ctx: _Ctx) -> _Response:
        mr = self._mr(ctx)
        return _ok(self._note_json(ctx.proj, mr, self._note(ctx, mr)))

    @_route("PUT", "projects/:project/merge_requests/:iid/notes/:note_id")
    def _update_note(self, ctx: _Ctx) -> _Response:
        mr = self._mr(ctx)
        note = self._note(ctx, mr)
        if note.system:
            raise _message(403, "403 Forbidden")
        note.body = ctx.require("body")
        note.updated_at = _now()
        return _ok(self._note_json(ctx.proj, mr, note))

    @_route("DELETE", "projects/:project/merge_requests/:iid/notes/:note_id")
    def _delete_note(self, ctx: _Ctx) -> _Response:
        mr = self._mr(ctx)
        note = self._note(ctx, mr)
        mr.notes.remove(note)
        return _ok(b"", 204)

    # ----------------------------------------------------------------- endpoints: CI

    @_route("GET", "projects/:project/pipelines")
    def _list_pipelines(self, ctx: _Ctx) -> _Response:
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

    @_route("GET", "projects/:project/pipelines/:pipeline_id")
    def _get_pipeline(self, ctx: _Ctx) -> _Response:
        pipeline = ctx.proj.pipelines.get(ctx.arg_int("pipeline_id"))
        if pipeline is None:
            raise _message(404, "404 Not found")
        return _ok(self._pipeline_json(ctx.proj, pipeline, detail=True))

    def _filter_jobs(self, ctx: _Ctx, jobs: list[Job]) -> list[Job]:
        scope = ctx.get("scope")
        if scope:
            scopes = set(scope if isinstance(scope, list) else [scope])
            jobs = [job for job in jobs if job.status in scopes]
        return jobs

    @_route("GET", "projects/:project/pipelines/:pipeline_id/jobs")
    def _list_pipeline_jobs(self, ctx: _Ctx) -> _Response:
        project = ctx.proj
        pipeline = project.pipelines.get(ctx.arg_int("pipeline_id"))
        if pipeline is None:
            raise _message(404, "404 Not found")
        jobs = [project.jobs[job_id] for job_id in pipeline.job_ids]
        if not ctx.flag("include_retried", False):
            jobs = [job for job in jobs if not job.retried]
        jobs = self._filter_jobs(ctx, jobs)
        return self._paginate(ctx, [self._job_json(project, job) for job in jobs])

    @_route("GET", "projects/:project/jobs")
    def _list_jobs(self, ctx: _Ctx) -> _Response:
        project = ctx.proj
        jobs = self._filter_jobs(ctx, sorted(project.jobs.values(), key=lambda j: -j.id))
        return self._paginate(ctx, [self._job_json(project, job) for job in jobs])

    @_route("GET", "projects/:project/jobs/:job_id")
    def _get_job(self, ctx: _Ctx) -> _Response:
        return _ok(self._job_json(ctx.proj, self._job(ctx)))

    @_route("GET", "projects/:project/jobs/:job_id/trace")
    def _get_trace(self, ctx: _Ctx) -> _Response:
        job = self._job(ctx)
        return _ok(job.trace.encode(), 200, {"Content-Type": "text/plain; charset=utf-8"})

    @_route("POST", "projects/:project/jobs/:job_id/retry")
    def _retry_job(self, ctx: _Ctx) -> _Response:
        project = ctx.proj
        job = self._job(ctx)
        if job.retried or job.status not in RETRYABLE_JOB_STATUSES:
            raise _message(403, "403 Forbidden - Job is not retryable")
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
        pipeline.updated_at = _now()
        return _ok(self._job_json(project, clone), 201)

    @_route("POST", "projects/:project/jobs/:job_id/cancel")
    def _cancel_job(self, ctx: _Ctx) -> _Response:
        project = ctx.proj
        job = self._job(ctx)
        if job.status in ACTIVE_JOB_STATUSES:
            job.status = "canceled"
            job.finished_at = _now()
        return _ok(self._job_json(project, job), 201)


# --------------------------------------------------------------------------- helpers


_SECRET_HEADERS = frozenset({"private-token", "authorization", "job-token"})


def _touches(project: Project, commit: Commit, path: str) -> bool:
    parent = project.commits[commit.parent_ids[0]].tree if commit.parent_ids else {}
    return commit.tree.get(path) != parent.get(path)


def _check_path(path: str) -> None:
    if path.startswith("/") or any(part in ("..", ".") for part in path.split("/")):
        raise _message(400, "Path cannot include directory traversal")
    if not path.strip("/"):
        raise _message(400, "You must provide a file path")


def _check_creatable(tree: dict[str, bytes], path: str) -> None:
    if path in tree:
        raise _message(400, "A file with this name already exists")
    if any(existing.startswith(path + "/") for existing in tree):
        raise _message(400, "A directory with this name already exists")
    parts = path.split("/")
    for depth in range(1, len(parts)):
        if "/".join(parts[:depth]) in tree:
            raise _message(400, "A file with this name already exists")


def _match(pattern: tuple[str, ...], segments: list[str]) -> dict[str, str] | None:
    if len(pattern) != len(segments):
        return None
    args: dict[str, str] = {}
    for expected, actual in zip(pattern, segments, strict=True):
        if expected.startswith(":"):
            if not actual:
                return None
            args[expected[1:]] = actual
        elif expected != actual:
            return None
    return args


def _parse_query(query: str) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for key, values in parse_qs(query, keep_blank_values=True).items():
        if key.endswith("[]"):
            parsed[key[:-2]] = values
        else:
            parsed[key] = values[-1]
    return parsed


def _parse_body(content_type: str, body: bytes) -> Any:
    if not body:
        return None
    if "application/x-www-form-urlencoded" in content_type:
        return _parse_query(body.decode())
    if "json" in content_type or body[:1] in (b"{", b"["):
        try:
            return json.loads(body)
        except ValueError:
            raise ApiError(400, {"error": "The provided content-type is not JSON"}) from None
    return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    fake: FakeGitLab

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def track(self, connection: socket.socket, *, add: bool) -> None:
        with self._connections_lock:
            if add:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "nginx"
    sys_version = ""
    timeout = 30
    server: _Server

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes: without this, Nagle's algorithm and
        # delayed ACKs cost ~40 ms per request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.track(self.connection, add=True)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        self.server.track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the fake's request log is `FakeGitLab.requests`."""

    def do_GET(self) -> None:
        self._serve("GET")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = dict(self.headers.items())
        try:
            response = self.server.fake.handle(method, self.path, headers, body)
        except Exception as err:  # a bug in the fake: answer like GitLab's 500, keep serving
            response = (500, {"message": f"500 Internal Server Error ({err!r})"}, {})
        if response is None:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        status, payload, extra = response
        if isinstance(payload, bytes):
            data, content_type = payload, "application/octet-stream"
        elif isinstance(payload, str):
            data, content_type = payload.encode(), "text/plain; charset=utf-8"
        else:
            data, content_type = json.dumps(payload).encode(), "application/json"
        if status == 204:
            data = b""
        self.send_response(status)
        headers_out = {"Content-Type": content_type, **extra}
        for key, value in headers_out.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if method != "HEAD" and data:
            self.wfile.write(data)


@pytest.fixture
def fake_gitlab() -> Iterator[FakeGitLab]:
    """A started FakeGitLab with no projects or tokens; stopped after the test."""
    with FakeGitLab() as fake:
        yield fake
