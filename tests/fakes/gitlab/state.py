"""The fake GitLab's model: users, tokens, projects with commits, MRs, notes, pipelines, jobs."""

from __future__ import annotations

import itertools
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

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


def now_iso() -> str:
    """Now, as GitLab writes timestamps (UTC, milliseconds, Z)."""
    moment = datetime.now(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def to_bytes(content: str | bytes) -> bytes:
    """File content as bytes (text is UTF-8)."""
    return content.encode() if isinstance(content, str) else content


def parse_labels(value: Any) -> list[str]:
    """Labels as GitLab accepts them: a comma-separated string or a list of strings."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else [str(item) for item in value]
    seen: dict[str, None] = {}
    for item in items:
        if item.strip():
            seen.setdefault(item.strip(), None)
    return list(seen)


@dataclass
class User:
    """A GitLab user."""

    id: int
    username: str
    name: str


@dataclass
class Token:
    """A personal access token: its user, the projects it sees, its access."""

    value: str
    user: User
    projects: tuple[str, ...] | None  # None: every project
    access: str  # "write" or "read"

    def can_see(self, project: Project) -> bool:
        """Whether the token may see `project` (others answer 404)."""
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
    """A commit holding its full file tree."""

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
        """The first line of the message."""
        return self.message.split("\n", 1)[0]


@dataclass
class Note:
    """A note on an MR (a comment, or a system note)."""

    id: int
    body: str
    author: User
    internal: bool
    system: bool
    created_at: str
    updated_at: str


@dataclass
class MergeRequest:
    """A merge request and its notes."""

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
        """Draft status, which GitLab derives from the title alone."""
        return bool(DRAFT_TITLE.match(self.title))

    def user_notes(self) -> list[Note]:
        """The notes people wrote (not system notes)."""
        return [note for note in self.notes if not note.system]


@dataclass
class Job:
    """A CI job."""

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
    """A CI pipeline; its status comes from its latest jobs."""

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
    """A project: its branches, commits, MRs, pipelines and jobs."""

    id: int
    path: str  # path_with_namespace
    default_branch: str
    branches: dict[str, str] = field(default_factory=dict)
    commits: dict[str, Commit] = field(default_factory=dict)
    merge_requests: dict[int, MergeRequest] = field(default_factory=dict)
    pipelines: dict[int, Pipeline] = field(default_factory=dict)
    jobs: dict[int, Job] = field(default_factory=dict)
    created_at: str = field(default_factory=now_iso)

    @property
    def name(self) -> str:
        """The last segment of the path."""
        return self.path.rsplit("/", 1)[-1]

    @property
    def namespace(self) -> str:
        """The path without its last segment."""
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
        """The file tree at `ref` (a copy), None when `ref` is unknown."""
        sha = self.resolve(ref)
        return dict(self.commits[sha].tree) if sha else None

    def file(self, ref: str, path: str) -> bytes | None:
        """A file's content at `ref`, None when absent."""
        tree = self.tree(ref)
        return None if tree is None else tree.get(path)

    def text(self, ref: str, path: str) -> str | None:
        """A file's text at `ref`, None when absent."""
        content = self.file(ref, path)
        return None if content is None else content.decode()

    def ancestors(self, sha: str) -> set[str]:
        """Every commit reachable from `sha`, itself included."""
        seen: set[str] = set()
        stack = [sha]
        while stack:
            current = stack.pop()
            if current not in seen:
                seen.add(current)
                stack.extend(self.commits[current].parent_ids)
        return seen

    def merge_base(self, left: str, right: str) -> str | None:
        """The newest common ancestor of two commits."""
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
        """The newest commit up to `sha` that changed `path`."""
        content = self.commits[sha].tree.get(path)
        current = sha
        while True:
            parents = self.commits[current].parent_ids
            if not parents or self.commits[parents[0]].tree.get(path) != content:
                return current
            current = parents[0]


class GitLabState:
    """The fake's in-memory state, shared by the API areas (mixed into FakeGitLab)."""

    def __init__(self) -> None:
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

    def _find_project(self, ref: str) -> Project | None:
        if ref.isdigit():
            return self.projects.get(int(ref))
        wanted = ref.strip("/").lower()
        return next((p for p in self.projects.values() if p.path.lower() == wanted), None)
