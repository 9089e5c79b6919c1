"""Fixtures and helpers for the fake GitLab's own tests (test_fake_gitlab*.py).

A test module imports the fixtures it uses from here, the way a conftest.py would.
"""

from __future__ import annotations

from typing import Any

import gitlab
import pytest

from tests.fakes.gitlab import FakeGitLab, fake_gitlab  # noqa: F401 (a fixture)

PATH = "rpms/group/kernel"
TOKEN = "glpat-kernel"


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> FakeGitLab:
    """The started fake with a group-prefix token and one project (two files)."""
    server: FakeGitLab = request.getfixturevalue("fake_gitlab")
    server.add_token(TOKEN, projects=["rpms/group"])  # a group-prefix token
    server.add_project(PATH, files={"kernel.spec": "Version: 1\n", "docs/README": "hi\n"})
    return server


@pytest.fixture
def gl(fake: FakeGitLab) -> gitlab.Gitlab:
    """python-gitlab, unchanged, pointed at the fake."""
    return gitlab.Gitlab(fake.url, private_token=TOKEN, timeout=5)


@pytest.fixture
def project(gl: gitlab.Gitlab) -> Any:
    """The project as python-gitlab sees it."""
    return gl.projects.get(PATH)


def commit(project: Any, branch: str, actions: list[dict], **extra: Any) -> Any:
    """Commit `actions` to `branch` through the Commits API."""
    data = {"branch": branch, "commit_message": f"change {branch}", "actions": actions}
    data.update(extra)
    return project.commits.create(data)


def open_mr(project: Any, branch: str = "feature", **extra: Any) -> Any:
    """Branch `branch` off main with one change, and open an MR from it into main."""
    commit(
        project,
        branch,
        [{"action": "update", "file_path": "kernel.spec", "content": "Version: 2\n"}],
        start_branch="main",
    )
    data = {"source_branch": branch, "target_branch": "main", "title": "Bump kernel"}
    data.update(extra)
    return project.mergerequests.create(data)
