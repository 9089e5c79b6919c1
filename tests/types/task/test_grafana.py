"""`POST /api/webhooks/grafana`: firing groups become incident tasks in the alert lane."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from tests.conftest import Store
from tests.types.task.helpers import submit, task, task_daemon, wait
from wq.engine.models import WorkItem

SECRET_ENV = "WQ_TEST_GRAFANA_SECRET"
SECRET = "s3cret-from-grafana"
GRAFANA = {"project_label": "project", "default_project": "ops", "cooldown_seconds": 3600}


def notification(group: str = '{}:{alertname="HighLatency"}', **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "receiver": "wq",
        "status": "firing",
        "orgId": 1,
        "groupKey": group,
        "groupLabels": {"alertname": "HighLatency"},
        "commonLabels": {"alertname": "HighLatency", "project": "shop"},
        "commonAnnotations": {"summary": "p99 above 2 s"},
        "externalURL": "https://grafana.example/",
        "version": "1",
        "title": "[FIRING:1] HighLatency",
        "message": "p99 latency is high",
        "truncatedAlerts": 0,
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "HighLatency", "project": "shop"},
                "annotations": {"summary": "p99 above 2 s"},
                "startsAt": "2026-12-01T04:00:00Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "fingerprint": "abc123",
                "values": {"B": 2.4},
            }
        ],
    }
    body.update(fields)
    return body


def count(runtime: Any) -> int:
    with runtime.sessions() as session:
        return int(session.execute(select(func.count()).select_from(WorkItem)).scalar_one())


@pytest.fixture(autouse=True)
def secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, SECRET)


def post(client: Any, body: Any, token: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return client.post("/api/webhooks/grafana", json=body, headers=headers)


def test_firing_makes_one_incident_in_the_alert_lane_and_repeats_are_dedup_hits(
    store: Store, tmp_path: Path
) -> None:
    grafana = {**GRAFANA, "secret_env": SECRET_ENV}
    with task_daemon(store, tmp_path / "runs", start=False, grafana=grafana) as (runtime, client):
        first = post(client, notification())
        assert first.status_code == 201, first.text
        assert first.json()["outcome"] == "created" and first.json()["project"] == "shop"
        item = task(runtime, first.json()["id"])
        assert item.kind == "incident" and item.lane == "alert" and not item.autonomous
        assert item.dedup_key == hashlib.sha256(b'{}:{alertname="HighLatency"}').hexdigest()
        assert item.payload["source"] == "grafana"
        assert item.payload["annotations"] == {"summary": "p99 above 2 s"}
        # Grafana delivers again (a retry, or the repeat interval): the same incident.
        again = post(client, notification(), token=SECRET)
        assert again.status_code == 200 and again.json()["outcome"] == "dedup"
        assert again.json()["id"] == first.json()["id"]
        # Another group is another incident; no project label → the default project.
        other = notification('{}:{alertname="DiskFull"}', commonLabels={}, alerts=[])
        third = post(client, other)
        assert third.status_code == 201 and third.json()["project"] == "ops"
        assert count(runtime) == 2
        counted = runtime.metrics.registry.get_sample_value
        name = "hummingbird_workqueue_grafana_notifications_total"
        assert counted(name, {"outcome": "created"}) == 2
        assert counted(name, {"outcome": "dedup"}) == 1


def test_another_projects_task_with_the_groups_key_neither_dedups_nor_cools_the_alert(
    store: Store, tmp_path: Path
) -> None:
    # The key is a predictable hash of the groupKey: a caller who may submit tasks of
    # one project must not be able to silence another project's alerts with it.
    key = hashlib.sha256(b'{}:{alertname="HighLatency"}').hexdigest()
    with task_daemon(store, tmp_path / "runs", start=False, grafana=GRAFANA) as (_, client):
        ended = submit(client, "echo", project="elsewhere", dedup_key=key)
        assert client.post(f"/api/work-items/{ended['id']}/cancel").status_code == 200
        active = submit(client, "echo", project="elsewhere", dedup_key=key)
        firing = post(client, notification())
        assert firing.status_code == 201 and firing.json()["outcome"] == "created"
        assert firing.json()["id"] != active["id"] and firing.json()["project"] == "shop"


def test_resolved_is_ignored_and_a_finished_incident_cools_down(
    store: Store, tmp_path: Path
) -> None:
    with task_daemon(store, tmp_path / "runs", grafana=GRAFANA) as (runtime, client):
        resolved = post(client, notification(status="resolved"))
        assert resolved.status_code == 200 and resolved.json()["outcome"] == "ignored"
        assert count(runtime) == 0
        created = post(client, notification()).json()
        wait(lambda: task(runtime, created["id"]).phase == "completed", message="done")
        cooled = post(client, notification())
        assert cooled.status_code == 200 and cooled.json()["outcome"] == "cooldown"
        assert count(runtime) == 1
    # Without a cooldown, the next firing after the end is a new incident.
    no_cooldown = {**GRAFANA, "cooldown_seconds": 0}
    with task_daemon(store, tmp_path / "runs", start=False, grafana=no_cooldown) as (_, client):
        assert post(client, notification()).status_code == 201


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"status": "firing"}, "not a Grafana notification: groupKey: Field required"),
        ({**notification(), "status": "pending"}, "not a Grafana notification: status"),
        ({**notification(), "alerts": "many"}, "not a Grafana notification: alerts"),
        ([1, 2], "not a Grafana notification: body"),
    ],
)
def test_bad_payloads_are_400_and_change_nothing(
    store: Store, tmp_path: Path, body: Any, message: str
) -> None:
    with task_daemon(store, tmp_path / "runs", start=False, grafana=GRAFANA) as (runtime, client):
        response = post(client, body)
        assert response.status_code == 400, response.text
        assert message in response.json()["error"]
        for raw_body in (b"{not json", b'{"alerts": NaN}', b"[" * 100_000, b"[" * 40 + b"]" * 40):
            raw = client.post("/api/webhooks/grafana", content=raw_body)
            assert raw.status_code == 400, raw.text
            assert raw.json()["error"].startswith("the body is not usable JSON: ")
        assert count(runtime) == 0


def test_a_caller_without_the_secret_is_401_whatever_the_body(store: Store, tmp_path: Path) -> None:
    grafana = {**GRAFANA, "secret_env": SECRET_ENV}
    with task_daemon(store, tmp_path / "runs", start=False, grafana=grafana) as (runtime, client):
        for raw_body in (b'{"alerts": NaN}', b"[" * 100):
            answer = client.post(
                "/api/webhooks/grafana",
                content=raw_body,
                headers={"Authorization": "Bearer wrong", "Content-Type": "application/json"},
            )
            assert answer.status_code == 401, answer.text
        assert count(runtime) == 0


def test_no_project_and_no_default_is_400(store: Store, tmp_path: Path) -> None:
    grafana = {"project_label": "team"}
    with task_daemon(store, tmp_path / "runs", start=False, grafana=grafana) as (runtime, client):
        response = post(client, notification())
        assert response.status_code == 400
        assert "no 'team' label names the project" in response.json()["error"]
        assert count(runtime) == 0


def test_the_webhook_needs_the_secret_or_a_token_with_submit(store: Store, tmp_path: Path) -> None:
    grafana = {**GRAFANA, "secret_env": SECRET_ENV}
    with task_daemon(store, tmp_path / "runs", start=False, grafana=grafana) as (runtime, client):
        assert post(client, notification(), token="wrong").status_code == 401
        assert (
            client.post(
                "/api/webhooks/grafana", json=notification(), headers={"Authorization": ""}
            ).status_code
            == 401
        )
        assert count(runtime) == 0
        assert post(client, notification(), token=SECRET).status_code == 201
        decisions = "hummingbird_workqueue_auth_decisions_total"
        allowed = {"tier": "webhook", "outcome": "allowed"}
        assert runtime.metrics.registry.get_sample_value(decisions, allowed) == 1


def test_not_configured_means_no_endpoint(store: Store, tmp_path: Path) -> None:
    with task_daemon(store, tmp_path / "runs", start=False) as (_, client):
        assert post(client, notification()).status_code == 404


def test_an_alert_is_admitted_at_once_while_the_normal_lane_is_full(
    store: Store, tmp_path: Path
) -> None:
    pools = {"default": {"capacity": 1, "alert_capacity": 1}}
    with task_daemon(store, tmp_path / "runs", pools=pools, grafana=GRAFANA) as (runtime, client):
        busy = submit(client, "sleep", project="shop", payload={"seconds": 600})
        waiting = submit(client, "echo", project="shop")
        wait(lambda: task(runtime, busy["id"]).run_id is not None, message="lane full")
        incident = post(client, notification()).json()
        done = wait(
            lambda: (t := task(runtime, incident["id"])).phase == "completed" and t,
            timeout=30,
            message="the incident ran",
        )
        assert "paged" in (done.log_tail or "")
        assert task(runtime, waiting["id"]).admission == "queued"
        assert task(runtime, busy["id"]).admission == "admitted"
        client.post(f"/api/work-items/{busy['id']}/cancel")


@pytest.mark.parametrize(
    ("project", "message"),
    [("g/" + "p" * 600, "project"), ("group/a\x00b", "NUL"), ("", "project")],
    ids=["too-long", "nul", "empty-label-no-default"],
)
def test_a_project_label_no_task_can_hold_is_400_not_a_server_error(
    store: Store, tmp_path: Path, project: str, message: str
) -> None:
    grafana = {"project_label": "project"}
    labels = {"alertname": "HighLatency", "project": project}
    body = notification(commonLabels=labels)
    body["alerts"][0]["labels"] = labels
    with task_daemon(store, tmp_path / "runs", start=False, grafana=grafana) as (runtime, client):
        response = post(client, body)
        assert response.status_code == 400, response.text
        assert message in response.json()["error"]
        assert count(runtime) == 0


def test_nul_in_annotations_is_not_a_server_error(store: Store, tmp_path: Path) -> None:
    body = notification(commonAnnotations={"summary": "p99\x00 above 2 s"}, message="a\x00b")
    with task_daemon(store, tmp_path / "runs", start=False, grafana=GRAFANA) as (runtime, client):
        response = post(client, body)
        # PostgreSQL cannot store NUL in JSON: refused as the GitLab webhook does.
        assert response.status_code == 400, response.text
        assert "NUL" in response.json()["error"]
        assert count(runtime) == 0


def test_the_notification_schema_is_in_the_openapi_document(store: Store, tmp_path: Path) -> None:
    with task_daemon(store, tmp_path / "runs", start=False, grafana=GRAFANA) as (_, client):
        document = client.get("/openapi.json").json()
    body = document["paths"]["/api/webhooks/grafana"]["post"]["requestBody"]
    schema, without_nul = body["content"]["application/json"]["schema"]["allOf"]
    assert schema["$ref"] == "#/components/schemas/GrafanaNotification"
    # A NUL anywhere is a 400 (PostgreSQL cannot store it): the document says so too.
    assert without_nul["$ref"] == "#/components/schemas/JsonWithoutNul"
    notification_schema = document["components"]["schemas"]["GrafanaNotification"]
    assert set(notification_schema["required"]) == {"status", "groupKey", "alerts"}
    assert "GrafanaAlert" in document["components"]["schemas"]


def test_a_token_is_checked_off_the_event_loop(store: Store, tmp_path: Path) -> None:
    """A token's check may wait on an identity provider (OIDC keys, OpenShift): on the
    event loop that wait would stall every other request, /healthz included."""
    grafana = {**GRAFANA, "secret_env": SECRET_ENV}
    with task_daemon(store, tmp_path / "runs", start=False, grafana=grafana) as (runtime, client):
        checks: list[bool] = []
        authenticate = runtime.authenticator.authenticate

        def on_loop(token: str) -> Any:
            try:
                asyncio.get_running_loop()
                checks.append(True)
            except RuntimeError:
                checks.append(False)
            return authenticate(token)

        runtime.authenticator.authenticate = on_loop  # type: ignore[method-assign]
        assert post(client, notification(), token="not-a-token").status_code == 401
        assert checks == [False]


def test_an_incident_larger_than_a_task_payload_may_be_is_422(store: Store, tmp_path: Path) -> None:
    # A 300 KB annotation was stored as the task's payload (and written back in every
    # list) although `POST /api/work-items/task` refuses such a payload.
    body = notification(commonAnnotations={"summary": "x" * 300_000})
    with task_daemon(store, tmp_path / "runs", start=False, grafana=GRAFANA) as (runtime, client):
        response = post(client, body)
        assert response.status_code == 422, response.text
        assert response.json()["error"].startswith("payload: 293 KiB, at most 256 KiB")
        assert count(runtime) == 0
        assert post(client, notification()).status_code == 201
        assert count(runtime) == 1
