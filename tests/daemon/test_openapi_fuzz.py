"""Schemathesis over the daemon's own /openapi.json: the API does what its document says.

A real app (the `mr` and `task` types, the GitLab and Grafana webhooks) with the local
token, which may submit. Every operation gets the examples, coverage and fuzzing
phases from a fixed seed (so a failure reproduces), and every check schemathesis has
runs, none left out: no 5xx, a documented status, the documented media type, a body
and headers that match the documented schema, 405 with `Allow` for an undocumented
method, 401 without the token, input the schema forbids refused (the server enforces
what the document says) and input it allows taken (the document says what the server
enforces: git's rules for an MR's paths, branches and labels, NUL in a webhook body).
The GitLab webhook gets its secret, so that its bodies are judged too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis import Case

from tests.conftest import Store, make_config
from tests.types.mr.helpers import TOKEN_ENV, mr_settings, payload
from tests.types.task.helpers import task_settings
from wq.daemon.app import create_app
from wq.daemon.runtime import build_runtime

SEED = 20261201
SECRET = "hook-secret"
# Per operation, fuzzing phase; with the coverage phase this keeps the whole run,
# both databases, around a minute on the CI machine.
MAX_EXAMPLES = 25


def fuzz_config(token: str) -> schemathesis.Config:
    """Every check (schemathesis' default); the seed, the token and the secret fixed."""
    return schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "headers": {"Authorization": f"Bearer {token}"},
            "generation": {"max-examples": MAX_EXAMPLES, "database": "none"},
            "phases": {"stateful": {"enabled": False}},
            "operations": [
                {"include-path": "/api/webhooks/gitlab", "headers": {"X-Gitlab-Token": SECRET}}
            ],
        }
    )


@pytest.fixture
def api_schema(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[object]:
    # schemathesis' lazy loader names its subtests through `_nodeid`, which pytest 9.2
    # no longer has.
    request.node._nodeid = request.node.nodeid
    monkeypatch.setenv(TOKEN_ENV, "glpat-test")
    monkeypatch.setenv("WQ_TEST_HOOK", SECRET)
    config = make_config(
        store.url,
        handled_types={
            "task": {
                **task_settings(tmp_path / "runs"),
                "grafana": {"kind": "incident", "default_project": "group/alerts"},
            },
            "mr": mr_settings(),
        },
        events={"webhook_secret_env": "WQ_TEST_HOOK"},
    )
    runtime = build_runtime(config)  # nothing is processed: items only queue
    assert runtime.local_tier is not None
    app = create_app(runtime)
    # Items of both types, so that lists, pools and queues answer with real entries.
    token = runtime.local_tier.token
    with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as client:
        for path, body in (
            ("/api/work-items/task", {"project": "group/app", "kind": "echo"}),
            (
                "/api/work-items/task",
                {"project": "group/app", "kind": "review", "repository": "g/r"},
            ),
            ("/api/work-items/mr", payload()),
        ):
            assert client.post(path, json=body).status_code == 201
    yield schemathesis.openapi.from_asgi(
        "/openapi.json", app, config=fuzz_config(runtime.local_tier.token)
    )
    runtime.engine.dispose()


schema = schemathesis.pytest.from_fixture("api_schema")


@schemathesis.hook
def map_body(ctx: schemathesis.HookContext, body: Any) -> Any:
    """An MR's branches must differ, and its file actions name different paths: rules
    between fields that JSON Schema cannot state (the document says them in words), so
    drafts keep to them."""
    operation = ctx.operation
    if operation is None or operation.path != "/api/work-items/mr" or not isinstance(body, dict):
        return body
    if isinstance(body.get("source_branch"), str) and body.get("source_branch") == body.get(
        "target_branch", "main"
    ):
        body = {**body, "target_branch": body["source_branch"] + "-target"}
    actions = body.get("file_actions")
    if isinstance(actions, list) and all(isinstance(action, dict) for action in actions):
        first = {str(action.get("file_path")): action for action in reversed(actions)}
        body = {**body, "file_actions": [a for a in actions if first[str(a.get("file_path"))] is a]}
    return body


@pytest.mark.timeout(120)
@schema.parametrize()
# The git-ref and control-character `pattern`s make hypothesis discard many drafts of
# a string; its health checks on that (and on a slow machine) judge the generator,
# not the API.
@settings(suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
def test_api_answers_as_its_openapi_document_says(case: Case) -> None:
    case.call_and_validate()
