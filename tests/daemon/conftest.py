"""Fixtures for API tests: a runtime with the chain type and clients with or without a token."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.conftest import Store
from tests.fakes.oidc import fake_oidc  # noqa: F401 - fixture
from tests.support.chain import Behaviour, chain_registry
from wq.daemon.app import create_app
from wq.daemon.runtime import Runtime, build_runtime


@pytest.fixture
def runtime(store: Store) -> Iterator[Runtime]:
    runtime = build_runtime(store.config, registry=chain_registry(Behaviour()))
    assert runtime.local_tier is not None
    yield runtime
    runtime.engine.dispose()


@pytest.fixture
def token(runtime: Runtime) -> str:
    assert runtime.local_tier is not None
    return runtime.local_tier.token


@pytest.fixture
def anon(runtime: Runtime) -> Iterator[TestClient]:
    """A client without credentials; server errors come back as 500 responses."""
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def client(runtime: Runtime, token: str) -> Iterator[TestClient]:
    """A client with the local token."""
    with TestClient(
        create_app(runtime),
        raise_server_exceptions=False,
        headers={"Authorization": f"Bearer {token}"},
    ) as client:
        yield client
