"""GitLab events for MR items: resolution, ordering, handlers and the webhook."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from tests.conftest import Store, make_config
from tests.fakes.gitlab import FakeGitLab
from tests.support.waiting import wait_for
from tests.types.mr.events_support import (
    PROJECT,
    build_event,
    check_resolution,
    counted,
    deliver,
    item,
    make_queue,
    mr_event,
    new_item,
    pipeline_event,
)
from tests.types.mr.helpers import TOKEN, TOKEN_ENV, mr_registry, mr_settings, payload
from wq.daemon.app import create_app
from wq.daemon.runtime import build_runtime
from wq.engine.config import ConfigError
from wq.engine.envelope import Event
from wq.engine.events import drain_events, ingest, store_event
from wq.engine.models import AuditEntry, PendingEvent

SECRET_ENV = "WQ_TEST_WEBHOOK_SECRET"
SECRET = "s3cret-webhook-token"


# ------------------------------------------------------------------ handlers


def test_merge_request_events_drive_phases_and_reconcile(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = mr_registry(monkeypatch)
    merged = new_item(store, registry, 1)
    closed = new_item(store, registry, 2, "wq/other-2")
    reviewed = new_item(store, registry, 3, "wq/other-3")
    assert deliver(store, registry, mr_event("merge", 1)) == 1
    assert deliver(store, registry, mr_event("close", 2, branch="wq/other-2")) == 1
    assert deliver(store, registry, mr_event("approved", 3, branch="wq/other-3")) == 1
    assert (item(store, merged).phase, item(store, merged).admission) == ("completed", "done")
    assert item(store, closed).phase == "cancelled"
    reconcile = item(store, reviewed).status("needs_reconcile")
    assert reconcile is not None and reconcile.status == "true" and reconcile.pending_until is None
    with store.sessions() as session:
        trigger = session.execute(
            select(AuditEntry.trigger).where(
                AuditEntry.work_item_id == merged, AuditEntry.event_type == "phase_changed"
            )
        ).scalar_one()
    assert trigger == {
        "source": "event",
        "event": "merge_request",
        "event_id": 901,
        "action": "merge",
    }


def test_out_of_order_duplicate_and_terminal_events_change_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(store, registry)
    deliver(store, registry, mr_event("update", updated_at="2026-01-01 10:00:00 UTC"))
    # Older than the last applied event: rejected; the same time again: accepted.
    deliver(store, registry, mr_event("merge", updated_at="2026-01-01 09:00:00 UTC"))
    assert item(store, item_id).phase == "active"
    deliver(store, registry, mr_event("close", updated_at="2026-01-01 10:00:00 UTC"))
    assert item(store, item_id).phase == "cancelled"
    before = item(store, item_id).updated_at
    deliver(store, registry, mr_event("merge", updated_at="2026-01-01 12:00:00 UTC"))
    assert item(store, item_id).phase == "cancelled"  # terminal items ignore events
    assert item(store, item_id).updated_at == before


def test_pipeline_and_failed_jobs(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(store, registry)
    deliver(store, registry, pipeline_event("running"))
    assert item(store, item_id).head_pipeline_id == 77  # a new pipeline is the head at once
    assert item(store, item_id).status("needs_reconcile") is None  # nothing to check yet
    deliver(store, registry, pipeline_event("failed", 77))
    assert item(store, item_id).head_pipeline_id == 77
    assert item(store, item_id).status("needs_reconcile").status == "true"  # type: ignore[union-attr]
    for build_id in (501, 502, 501):  # a duplicate delivery of job 501
        deliver(store, registry, build_event(build_id))
    row = item(store, item_id).status("needs_ci_retry")
    assert row is not None and row.status == "true" and row.pending_until is None
    assert [job["build_id"] for job in row.detail["jobs"]] == [501, 502]
    assert row.detail["jobs"][0]["build_failure_reason"] == "runner_system_failure"
    assert row.detail["jobs"][0]["pipeline_id"] == 77


def test_events_for_no_item_are_acknowledged(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    registry = mr_registry(monkeypatch)
    assert deliver(store, registry, mr_event("merge", iid=42, branch="unknown")) == 0
    assert deliver(store, registry, {"object_kind": "push", "project": {}}) == 0


# ------------------------------------------------------------------ the webhook and e2e


@pytest.fixture
def daemon(
    store: Store, monkeypatch: pytest.MonkeyPatch, sqs: Any, moto_url: str
) -> Iterator[tuple[Any, TestClient, FakeGitLab, str]]:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    monkeypatch.setenv(SECRET_ENV, SECRET)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    queue = make_queue(sqs)
    with FakeGitLab() as gitlab:
        gitlab.add_token(TOKEN, projects=["group"])
        gitlab.add_project(PROJECT, files={"sources": "v1\n"})
        config = make_config(
            store.url,
            handled_types={"mr": mr_settings(gitlab.url)},
            events={"webhook_secret_env": SECRET_ENV, "queue_url": queue, "wait_seconds": 1},
        )
        runtime = build_runtime(config)
        runtime.start_processing()
        runtime.prepare_consumer()
        runtime.start_consumer()
        assert runtime.local_tier is not None
        headers = {"Authorization": f"Bearer {runtime.local_tier.token}"}
        with TestClient(create_app(runtime), headers=headers) as client:
            yield runtime, client, gitlab, queue
        assert runtime.consumer is not None and runtime.manager is not None
        runtime.consumer.stop()
        runtime.manager.stop(grace=2)
        runtime.engine.dispose()


def test_webhook_secret_is_checked_and_bad_bodies_are_4xx(
    daemon: tuple[Any, TestClient, FakeGitLab, str],
) -> None:
    runtime, client, _, _ = daemon
    body = mr_event("merge")
    assert client.post("/api/webhooks/gitlab", json=body).status_code == 401
    wrong = client.post("/api/webhooks/gitlab", json=body, headers={"X-Gitlab-Token": "nope"})
    assert wrong.status_code == 401 and wrong.json()["error"]
    good = {"X-Gitlab-Token": SECRET}
    assert client.post("/api/webhooks/gitlab", content=b"{", headers=good).status_code == 400
    no_kind = client.post("/api/webhooks/gitlab", json={"x": 1}, headers=good)
    assert no_kind.status_code == 400 and "object_kind" in no_kind.json()["error"]
    accepted = client.post("/api/webhooks/gitlab", json=body, headers=good)
    assert accepted.status_code == 202 and accepted.json() == {
        "event": "merge_request",
        "stored": 0,
    }
    with runtime.sessions() as session:
        assert session.execute(select(func.count()).select_from(PendingEvent)).scalar_one() == 0


def test_an_mr_merged_on_gitlab_completes_through_sqs_and_frees_its_slot(
    daemon: tuple[Any, TestClient, FakeGitLab, str], sqs: Any
) -> None:
    _, client, gitlab, queue = daemon
    created = client.post("/api/work-items/mr", json=payload())
    assert created.status_code == 201, created.text
    item_id = created.json()["item"]["id"]
    wait_for(
        lambda: client.get(f"/api/work-items/{item_id}").json()["admission"] == "idle",
        timeout=20,
        message="MR created",
    )
    iid = client.get(f"/api/work-items/{item_id}").json()["details"]["mr_iid"]
    gitlab.update_merge_request(PROJECT, iid, state="merged")
    event = mr_event("merge", iid=iid, updated_at="2026-01-01 10:00:00 UTC")
    sqs.send_message(
        QueueUrl=queue,
        MessageBody=json.dumps(
            {"Type": "Notification", "MessageId": "x", "Message": json.dumps(event)}
        ),
    )
    wait_for(
        lambda: client.get(f"/api/work-items/{item_id}").json()["phase"] == "completed",
        timeout=20,
        message="completed through SQS",
    )
    final = client.get(f"/api/work-items/{item_id}").json()
    assert final["admission"] == "done"
    pool = client.get(f"/api/pools/{PROJECT}").json()
    assert pool["normal"]["in_flight"] == 0

    other_change = [{"action": "create", "file_path": "NOTES", "content": "two\n"}]
    via_webhook = client.post(
        "/api/work-items/mr", json=payload(source_branch="wq/two", file_actions=other_change)
    )
    second = via_webhook.json()["item"]["id"]
    wait_for(
        lambda: client.get(f"/api/work-items/{second}").json()["admission"] == "idle",
        timeout=20,
        message="second MR created",
    )
    second_iid = client.get(f"/api/work-items/{second}").json()["details"]["mr_iid"]
    hook = client.post(
        "/api/webhooks/gitlab",
        headers={"X-Gitlab-Token": SECRET},
        json=mr_event("close", iid=second_iid, branch="wq/two"),
    )
    assert hook.status_code == 202 and hook.json()["stored"] == 1
    wait_for(
        lambda: client.get(f"/api/work-items/{second}").json()["phase"] == "cancelled",
        timeout=10,
        message="cancelled through the webhook",
    )


@pytest.mark.parametrize(
    "document",
    [
        {**mr_event("merge"), "object_attributes": {"iid": "abc", "action": "merge"}},
        {**mr_event("merge"), "project": {"path_with_namespace": "group/a\x00b"}},
        {**mr_event("merge"), "object_attributes": {"iid": 2**40, "action": "merge"}},
        {**build_event(1), "ref": ["not", "a", "string"]},
    ],
)
def test_type_confused_events_are_unmatched_not_errors(
    store: Store, monkeypatch: pytest.MonkeyPatch, document: dict[str, Any]
) -> None:
    registry = mr_registry(monkeypatch)
    new_item(store, registry)
    assert deliver(store, registry, document) == 0


def test_a_failing_handler_discards_its_event_and_spares_the_others(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(store, registry)
    with store.sessions.begin() as session:
        store_event(session, item_id, "build", build_event(9))
        store_event(session, item_id, "merge_request", mr_event("approved"))

    def explode(ctx: Any) -> None:
        if ctx.event_type == "build":
            raise RuntimeError("handler bug")
        original(ctx)

    original = registry.get("mr").event_handler
    object.__setattr__(registry.get("mr"), "event_handler", explode)
    with store.sessions.begin() as session:
        result = drain_events(session, item_id, registry)
    assert (result.applied, result.discarded) == (1, 1)
    assert item(store, item_id).status("needs_reconcile").status == "true"  # type: ignore[union-attr]
    with store.sessions() as session:
        assert session.execute(select(func.count()).select_from(PendingEvent)).scalar_one() == 0


# ------------------------------------------------------------------ exact resolution

MALFORMED_IIDS: list[Any] = ["1", "7", None, 0, -1, 2**31, 2**40, 1.0, True, [1], {"iid": 1}]


def _snapshot(store: Store) -> tuple[Any, ...]:
    with store.sessions() as session:
        return (
            session.execute(select(func.count()).select_from(PendingEvent)).scalar_one(),
            session.execute(select(func.count()).select_from(AuditEntry)).scalar_one(),
        )


def test_malformed_iids_match_nothing_and_change_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = mr_registry(monkeypatch)
    without_mr = new_item(store, registry, None, "wq/sync-1")
    with_mr = new_item(store, registry, 1, "wq/other")
    before = _snapshot(store)
    unmatched = counted("unmatched")
    documents = [mr_event("merge", iid) for iid in MALFORMED_IIDS]
    missing = mr_event("merge")
    del missing["object_attributes"]["iid"]
    documents.append(missing)
    for document in documents:
        assert deliver(store, registry, document) == 0, document["object_attributes"]
    assert counted("unmatched") - unmatched == len(documents)
    assert item(store, without_mr).phase == item(store, with_mr).phase == "active"
    assert _snapshot(store) == before


def test_resolution_is_by_iid_else_by_the_branch_the_event_names(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_resolution(store, mr_registry(monkeypatch), deliver)


def test_webhook_shares_the_exact_resolution(
    daemon: tuple[Any, TestClient, FakeGitLab, str],
) -> None:
    runtime, client, _, _ = daemon
    created = client.post("/api/work-items/mr", json=payload())
    assert created.status_code == 201, created.text
    item_id = created.json()["item"]["id"]
    wait_for(
        lambda: client.get(f"/api/work-items/{item_id}").json()["admission"] == "idle",
        timeout=20,
        message="MR created",
    )
    unmatched = counted("unmatched", runtime.metrics)
    good = {"X-Gitlab-Token": SECRET}
    for iid in MALFORMED_IIDS:
        answer = client.post("/api/webhooks/gitlab", json=mr_event("merge", iid), headers=good)
        assert answer.status_code == 202 and answer.json()["stored"] == 0, iid
    assert counted("unmatched", runtime.metrics) - unmatched == len(MALFORMED_IIDS)
    assert client.get(f"/api/work-items/{item_id}").json()["phase"] == "active"


# ------------------------------------------------------------------ one clock per stream


def _jobs(store: Store, item_id: Any) -> list[int]:
    row = item(store, item_id).status("needs_ci_retry")
    return [] if row is None else [job["build_id"] for job in row.detail["jobs"]]


def test_a_failed_job_after_its_pipeline_and_a_later_mr_event_is_recorded(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(store, registry)
    # Delivery order is not GitLab's order: the job finished first (10:30).
    deliver(store, registry, pipeline_event("failed", 77, finished_at="2026-01-01 11:00:00 UTC"))
    deliver(store, registry, mr_event("update", updated_at="2026-01-01 12:00:00 UTC"))
    assert deliver(store, registry, build_event(501, pipeline_id=77)) == 1
    assert _jobs(store, item_id) == [501]
    # MR state still keeps its own order.
    deliver(store, registry, mr_event("close", updated_at="2026-01-01 11:59:00 UTC"))
    assert item(store, item_id).phase == "active"


def test_pipelines_and_jobs_follow_the_head_pipeline(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(store, registry)
    deliver(store, registry, build_event(600, pipeline_id=80, status="running"))
    assert item(store, item_id).head_pipeline_id == 80  # build events move the head
    deliver(store, registry, build_event(601, pipeline_id=80))
    discarded = counted("discarded")
    deliver(store, registry, build_event(601, pipeline_id=80))  # a duplicate delivery
    assert counted("discarded") - discarded == 1
    deliver(store, registry, build_event(700, pipeline_id=81))  # a new pipeline's failure
    assert item(store, item_id).head_pipeline_id == 81
    deliver(store, registry, build_event(602, pipeline_id=80))  # a superseded pipeline's
    deliver(store, registry, pipeline_event("success", 80))  # a late, older pipeline
    assert item(store, item_id).head_pipeline_id == 81
    assert _jobs(store, item_id) == [601, 700]


@pytest.mark.parametrize("suffix", ["head", "merge", "train"])
def test_jobs_and_pipelines_of_merge_request_pipelines_match_by_iid(
    store: Store, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(store, registry, 3, "wq/mr-three")
    ref = f"refs/merge-requests/3/{suffix}"
    assert deliver(store, registry, build_event(900, ref, pipeline_id=90)) == 1
    assert _jobs(store, item_id) == [900]
    assert deliver(store, registry, build_event(901, "refs/merge-requests/4/head")) == 0
    assert deliver(store, registry, build_event(902, "refs/merge-requests/x/head")) == 0
    mr_pipeline = pipeline_event("failed", 91, branch=ref)
    mr_pipeline["merge_request"] = {"iid": 3, "source_branch": "wq/mr-three"}
    assert deliver(store, registry, mr_pipeline) == 1
    assert item(store, item_id).head_pipeline_id == 91
    tagged = build_event(903, "wq/mr-three")
    tagged["tag"] = True
    assert deliver(store, registry, tagged) == 0


def test_a_pipeline_naming_its_mr_reaches_an_item_that_has_not_recorded_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(store, registry, None, "wq/new")
    event = pipeline_event("failed", 50, branch="refs/merge-requests/8/head")
    event["merge_request"] = {"iid": 8, "source_branch": "wq/new"}
    assert deliver(store, registry, event) == 1
    assert item(store, item_id).head_pipeline_id == 50
    event["merge_request"] = {"iid": "8", "source_branch": "wq/new"}
    assert deliver(store, registry, event) == 0


# ------------------------------------------------------------------ far-future timestamps


def test_a_far_future_timestamp_is_refused_and_cannot_freeze_the_item(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(store, registry)
    future = counted("future")
    assert deliver(store, registry, mr_event("update", updated_at="2999-01-01 00:00:00 UTC")) == 0
    bogus_job = build_event(5, finished_at="2999-01-01T00:00:00Z")
    assert deliver(store, registry, bogus_job) == 0
    assert counted("future") - future == 2
    now = datetime.now(UTC)
    assert deliver(store, registry, mr_event("close", updated_at=now.isoformat())) == 1
    assert item(store, item_id).phase == "cancelled"
    assert _jobs(store, item_id) == []


@pytest.mark.parametrize("stamp", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
def test_a_timestamp_past_the_dates_a_database_holds_cannot_wedge_the_item(
    store: Store, monkeypatch: pytest.MonkeyPatch, stamp: str
) -> None:
    # Year 0 or 10000 once in UTC: stored, such a time could not be read back, and every
    # later event of the item failed to apply. It counts as no time at all.
    registry = mr_registry(monkeypatch)
    item_id = new_item(store, registry)
    deliver(store, registry, mr_event("update", updated_at=stamp))
    deliver(store, registry, build_event(5, finished_at=stamp))
    now = datetime.now(UTC)
    assert deliver(store, registry, mr_event("close", updated_at=now.isoformat())) == 1
    assert item(store, item_id).phase == "cancelled"


def test_the_allowed_skew_is_configurable(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    registry = mr_registry(monkeypatch)
    new_item(store, registry)
    soon = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    event = mr_event("approved", updated_at=soon)
    assert ingest(store.sessions, registry, Event("merge_request", event), source="webhook") == 0
    two_hours = timedelta(hours=2)
    stored = ingest(
        store.sessions,
        registry,
        Event("merge_request", event),
        source="webhook",
        max_future_skew=two_hours,
    )
    assert stored == 1
    assert make_config(store.url).events.max_future_skew_seconds == 300
    with pytest.raises(ConfigError):
        make_config(store.url, events={"max_future_skew_seconds": -1})


# ------------------------------------------------------------------ hostile webhook bodies


@pytest.mark.parametrize(
    "body",
    [
        json.dumps({**mr_event("merge"), "note": "a\u0000b"}).encode(),
        json.dumps(mr_event("merge")).replace('"merge"', '"mer\\u0000ge"').encode(),
        b'{"object_kind": "merge_request", "x": NaN}',
        b'{"object_kind": "merge_request", "n": ' + b"9" * 5000 + b"}",
        b"[" * 100_000,
        b'{"object_kind": "merge_request", "deep": ' + b"[" * 100 + b"]" * 100 + b"}",
        b"\xff\xfe not utf-8",
        b'{"object_kind": "merge_request", "note": "a\\ud800b"}',
        b'{"object_kind": "merge_request", "n": 1e999}',
    ],
    ids=[
        "nul_free_text",
        "nul_action",
        "nan",
        "huge_int",
        "deep",
        "too_deep",
        "bad_utf8",
        "unpaired_surrogate",
        "overflowing_number",
    ],
)
def test_hostile_webhook_bodies_are_400_and_store_nothing(
    daemon: tuple[Any, TestClient, FakeGitLab, str], body: bytes
) -> None:
    runtime, client, _, _ = daemon
    created = client.post("/api/work-items/mr", json=payload())
    assert created.status_code == 201
    answer = client.post(
        "/api/webhooks/gitlab",
        content=body,
        headers={"X-Gitlab-Token": SECRET, "Content-Type": "application/json"},
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]
    with runtime.sessions() as session:
        assert session.execute(select(func.count()).select_from(PendingEvent)).scalar_one() == 0
