"""Helpers for MR tests: settings with tokens, payloads, a registry with the mr type."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import Store, make_config
from wq.daemon.app import create_app
from wq.daemon.runtime import Runtime, build_runtime
from wq.engine.registry import TypeRegistry
from wq.types.mr import register

TOKEN_ENV = "WQ_TEST_GITLAB_TOKEN"
TOKEN = "glpat-test-secret-token"


def mr_settings(gitlab_url: str = "http://127.0.0.1:9", **extra: Any) -> dict[str, Any]:
    """`handled_types.mr` for tests: group/ gets the test token."""
    return {
        "gitlab_url": gitlab_url,
        "projects": {"group": {"token_env": TOKEN_ENV}},
        **extra,
    }


def mr_registry(monkeypatch: pytest.MonkeyPatch, **settings: Any) -> TypeRegistry:
    """A registry with the mr type (and its token variable set)."""
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    registry = TypeRegistry()
    register(registry, mr_settings(**settings), source="test")
    return registry


def payload(**overrides: Any) -> dict[str, Any]:
    """A valid MR submission."""
    data: dict[str, Any] = {
        "project": "group/project",
        "source_branch": "wq/sync-1",
        "target_branch": "main",
        "title": "Sync sources",
        "description": "Automated sync",
        "commit_message": "Sync sources from upstream",
        "file_actions": [{"action": "update", "file_path": "sources", "content": "v2\n"}],
        "labels": ["sync"],
        "package": "kernel",
        "source": "rpms-ci",
        "change_kind": "sync",
    }
    data.update(overrides)
    return data


@contextmanager
def mr_api(
    store: Store, monkeypatch: pytest.MonkeyPatch, **settings: Any
) -> Iterator[tuple[Runtime, TestClient]]:
    """The daemon's app (no processing: items stay as submitted) with the `mr` type
    (these settings beside the test token) and a client holding the local token."""
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    runtime = build_runtime(make_config(store.url, handled_types={"mr": mr_settings(**settings)}))
    assert runtime.local_tier is not None
    headers = {"Authorization": f"Bearer {runtime.local_tier.token}"}
    with TestClient(create_app(runtime), headers=headers) as client:
        yield runtime, client
    runtime.engine.dispose()
