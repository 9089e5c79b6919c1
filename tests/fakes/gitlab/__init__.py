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

It refuses what GitLab refuses, so tests cannot pass by agreement with a lenient fake
(``rules`` has the details and the sources): branch names git's check-ref-format or GitLab
rejects (``.hidden``, ``feature/.hidden``, ``x.lock/y``, ``HEAD``, ``refs/heads/x``, ``..``,
``~^:?*[\\``, spaces and control characters, leading ``-``, ``@{``, a trailing ``/`` or
``.``, 40-hex names, a branch where another one's directory is); repository paths that climb
out (``..``), hold ``//`` or start with ``.git``, and in the Files API URL any ``..`` segment;
and a second open MR with the same source and target branches, whether by create, reopen
or retarget (409 "Another open merge request already exists for this source branch").
The test controls (``push``, ``add_project``, ``update_merge_request``) raise ValueError for
what a git push or the web UI could not do.

Jobs follow ``lib/api/ci/jobs.rb`` and ``pipelines.rb``: lists are newest first, retried
jobs appear only with ``include_retried``, ``scope`` (one status or a list) is checked
against GitLab's job statuses (400 "scope does not have a valid value"),
``failure_reason`` is shown for failed jobs only, the trace is ``text/plain`` with
GitLab's ``Content-Disposition``, and a retry answers 201 with the new job, or 403 "Job
is not retryable" unless the job is the latest of its name and success, failed or
canceled; 404 "404 Not found" for an unknown job or pipeline.

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
  through ``set_job``; there is no other background processing (a retried job stays
  ``pending`` until a test moves it).
- Jobs are never archived (GitLab refuses to retry jobs of archived pipelines), and
  traces have no size limit or live-trace chunking.
- System notes are a simplified subset (title/description changes, close, reopen, merge,
  "added N commits" on push), with shorter bodies than GitLab's.
- ``last_commit_id`` in commit actions and protected branches are not enforced.
- Reopening onto a clash answers 409, as the rule is meant; GitLab's own code path
  (ReopenService, then ``valid?`` on the rolled-back MR) may instead answer 200 with the MR
  still closed. Either way it stays closed: callers should check ``state`` as well.
- A new branch whose name clashes with another one's directory (``a`` and ``a/b``) is
  refused through the Commits API with the Branches API's message; GitLab's wording there
  comes from Gitaly and differs.
- Diff text is difflib's unified diff with git's hunk headers; the "No newline at end of
  file" marker is only added for the new side.

Layout: ``state`` (the model), ``server`` (HTTP entry, routing, authentication, on the shared
loopback listener), ``api`` (errors, request context, routes), ``rules`` (the names and paths
GitLab refuses), ``diffs``, ``faults`` (injection and the request log), ``controls`` (what
tests change directly), and one module per API area: ``projects``, ``branches``, ``files``,
``commits``, ``repository`` (the write path), ``merge_requests`` and ``mr_lifecycle``,
``notes``, ``ci``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.gitlab.api import ApiError, LoggedRequest
from tests.fakes.gitlab.server import FakeGitLab
from tests.fakes.gitlab.state import (
    MERGE_STATUSES,
    Commit,
    Job,
    MergeRequest,
    Note,
    Pipeline,
    Project,
    Token,
    User,
)

__all__ = [
    "MERGE_STATUSES",
    "ApiError",
    "Commit",
    "FakeGitLab",
    "Job",
    "LoggedRequest",
    "MergeRequest",
    "Note",
    "Pipeline",
    "Project",
    "Token",
    "User",
    "fake_gitlab",
]


@pytest.fixture
def fake_gitlab() -> Iterator[FakeGitLab]:
    """A started FakeGitLab with no projects or tokens; stopped after the test."""
    with FakeGitLab() as fake:
        yield fake
