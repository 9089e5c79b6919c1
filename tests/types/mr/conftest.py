"""Fixtures of the MR tests: the fake GitLab with one project, a running harness, and a
moto SQS server (server mode, over HTTP) for the event tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

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


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """The URL of a moto server shared by the session's tests."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


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
