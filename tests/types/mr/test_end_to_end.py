"""Submit over HTTP → the daemon's loop creates the MR on (fake) GitLab → note → idle."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from tests.conftest import Store, make_config
from tests.fakes.gitlab import FakeGitLab
from tests.support.waiting import wait_for
from tests.types.mr.helpers import TOKEN, TOKEN_ENV, mr_settings, payload
from wq.daemon.app import create_app
from wq.daemon.runtime import Runtime, build_runtime
from wq.engine.models import AuditEntry, WorkItem

PROJECT = "group/project"


@pytest.fixture
def daemon(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Runtime, TestClient, FakeGitLab]]:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with FakeGitLab() as gitlab:
        gitlab.add_token(TOKEN, projects=["group"])
        gitlab.add_project(PROJECT, files={"sources": "v1\n"})
        config = make_config(
            store.url,
            handled_types={"mr": mr_settings(gitlab.url, dashboard_base_url="https://dash")},
        )
        runtime = build_runtime(config)
        assert runtime.local_tier is not None
        runtime.start_processing()
        headers = {"Authorization": f"Bearer {runtime.local_tier.token}"}
        with TestClient(create_app(runtime), headers=headers) as client:
            yield runtime, client, gitlab
        assert runtime.manager is not None
        runtime.manager.stop(grace=2)
        runtime.engine.dispose()


def test_submission_over_http_runs_to_an_idle_item_with_an_mr(
    daemon: tuple[Runtime, TestClient, FakeGitLab],
) -> None:
    runtime, client, gitlab = daemon
    response = client.post("/api/work-items/mr", json=payload())
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["action"] == "created" and body["item"]["type"] == "mr"
    item_id = body["item"]["id"]
    assert body["item"]["details"]["source"] == "rpms-ci"

    def current() -> dict[str, object]:
        return client.get(f"/api/work-items/{item_id}").json()

    wait_for(lambda: current()["admission"] == "idle", timeout=20, message="idle")
    item = current()
    details = item["details"]
    assert isinstance(details, dict) and details["mr_iid"] is not None
    mr = gitlab.merge_request(PROJECT, details["mr_iid"])
    assert mr.state == "opened" and "managed-by::workqueue" in mr.labels
    assert any("https://dash/work-items/" in note.body for note in mr.user_notes())

    with runtime.sessions() as session:
        trail = list(
            session.execute(
                select(AuditEntry.event_type, AuditEntry.actor)
                .where(AuditEntry.work_item_id == uuid.UUID(str(item_id)))
                .order_by(AuditEntry.id)
            )
        )
    kinds = [kind for kind, _ in trail]
    assert kinds[:3] == ["created", "queued", "admitted"]
    # ensure_mr, ensure_dashboard_note, retry_ci_jobs (no failed jobs: "false")
    assert kinds.count("action_completed") == 3 and kinds[-1] == "released"
    assert trail[0][1] == "local"  # the caller's identity

    again = client.post("/api/work-items/mr", json=payload())
    assert again.status_code == 200 and again.json()["action"] == "unchanged"
    assert again.json()["item"]["id"] == item_id


def test_bad_submissions_are_422_and_store_nothing(
    daemon: tuple[Runtime, TestClient, FakeGitLab],
) -> None:
    runtime, client, _ = daemon
    unknown = client.post("/api/work-items/mr", json=payload(project="other/place"))
    assert unknown.status_code == 422
    assert "other/place" in unknown.json()["error"]
    invalid = client.post(
        "/api/work-items/mr", json=payload(file_actions=[{"action": "create", "file_path": "x"}])
    )
    assert invalid.status_code == 422 and "content" in invalid.json()["error"]
    missing = client.post("/api/work-items/mr", json={"project": PROJECT})
    assert missing.status_code == 422 and "source_branch" in missing.json()["error"]
    with runtime.sessions() as session:
        assert session.execute(select(func.count()).select_from(WorkItem)).scalar_one() == 0
