"""Fixtures of the MR tests: the fake GitLab with one project, a running harness, and a
moto SQS server (server mode, over HTTP) for the event tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
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


@pytest.fixture
def sqs(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A boto3 SQS client talking to the moto server."""
    for var, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        monkeypatch.setenv(var, value)
    return boto3.client("sqs", endpoint_url=moto_url, region_name="us-east-1")
