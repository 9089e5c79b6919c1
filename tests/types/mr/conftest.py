"""Fixtures of the MR tests: the fake GitLab with one project, and a running harness."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import Store
from tests.fakes.gitlab import FakeGitLab
from tests.types.mr.harness import DASHBOARD, PROJECT, Harness
from tests.types.mr.helpers import TOKEN, mr_registry


@pytest.fixture
def gitlab() -> Iterator[FakeGitLab]:
    with FakeGitLab() as fake:
        fake.add_token(TOKEN, projects=["group"])
        fake.add_project(PROJECT, files={"sources": "v1\n", "README.md": "hi\n"})
        yield fake


@pytest.fixture
def harness(store: Store, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    registry = mr_registry(monkeypatch, gitlab_url=gitlab.url, dashboard_base_url=DASHBOARD)
    harness = Harness(store, registry)
    harness.manager.start()
    yield harness
    harness.manager.stop(grace=2)
