"""GitLab events for MR items: SQS (through a moto server), the webhook, the handlers."""

from __future__ import annotations

import base64
import gzip
import json
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from fastapi.testclient import TestClient
from moto.server import ThreadedMotoServer
from sqlalchemy import func, select

from tests.conftest import Store, make_config
from tests.fakes.gitlab import FakeGitLab
from tests.support.waiting import wait_for
from tests.types.mr.helpers import TOKEN, TOKEN_ENV, mr_registry, mr_settings, payload
from wq.daemon.app import create_app
from wq.daemon.runtime import build_runtime
from wq.engine.envelope import Event, UndecodableMessage, decode_message
from wq.engine.events import drain_events, ingest, store_event
from wq.engine.models import AuditEntry, PendingEvent, WorkItem, utcnow
from wq.engine.registry import SubmitContext, TypeRegistry
from wq.engine.sqs import SqsConsumer
from wq.types.mr.models import MrItem
from wq.types.mr.schemas import MrCreate
from wq.types.mr.upsert import submit_mr

PROJECT = "group/project"
SECRET_ENV = "WQ_TEST_WEBHOOK_SECRET"
SECRET = "s3cret-webhook-token"


def mr_event(
    action: str,
    iid: int = 1,
    updated_at: str = "2030-01-01 10:00:00 UTC",
    branch: str = "wq/sync-1",
) -> dict[str, Any]:
    return {
        "object_kind": "merge_request",
        "project": {"path_with_namespace": PROJECT},
        "object_attributes": {
            "id": 900 + iid,
            "iid": iid,
            "action": action,
            "source_branch": branch,
            "updated_at": updated_at,
        },
    }


def pipeline_event(status: str, pipeline_id: int = 77, branch: str = "wq/sync-1") -> dict[str, Any]:
    return {
        "object_kind": "pipeline",
        "project": {"path_with_namespace": PROJECT},
        "object_attributes": {
            "id": pipeline_id,
            "ref": branch,
            "status": status,
            "finished_at": "2030-01-01 11:00:00 UTC",
        },
    }


def build_event(build_id: int, branch: str = "wq/sync-1") -> dict[str, Any]:
    return {
        "object_kind": "build",
        "project": {"path_with_namespace": PROJECT},
        "ref": branch,
        "build_id": build_id,
        "build_name": "rpm-build",
        "build_status": "failed",
        "build_failure_reason": "runner_system_failure",
        "build_finished_at": "2030-01-01 11:30:00 UTC",
        "retries_count": 0,
        "pipeline_id": 77,
    }


def new_item(
    store: Store, registry: TypeRegistry, mr_iid: int | None = 1, branch: str = "wq/sync-1"
) -> uuid.UUID:
    ctx = SubmitContext(
        registry=registry, pool=make_config(store.url).pool_for(PROJECT), actor="t", now=utcnow()
    )
    with store.sessions.begin() as session:
        result = submit_mr(
            session,
            MrCreate.model_validate(payload(source_branch=branch)),
            ctx,
            registry.get("mr").settings,
        )
        assert isinstance(result.item, MrItem)
        result.item.mr_iid = mr_iid
        return result.item.id


def deliver(store: Store, registry: TypeRegistry, document: dict[str, Any]) -> int:
    stored = ingest(store.sessions, registry, Event(document["object_kind"], document))
    with store.sessions() as session:
        ids = session.execute(select(PendingEvent.work_item_id).distinct()).scalars().all()
    for item_id in ids:
        with store.sessions.begin() as session:
            drain_events(session, item_id, registry)
    return stored


def item(store: Store, item_id: uuid.UUID) -> MrItem:
    with store.sessions() as session:
        found = session.get(WorkItem, item_id)
        assert isinstance(found, MrItem)
        session.expunge_all()
        return found


# ------------------------------------------------------------------ decoding


def test_decoding_raw_sns_wrapped_and_gzip_base64_bodies() -> None:
    event = mr_event("merge")
    raw = json.dumps(event)
    packed = base64.b64encode(gzip.compress(raw.encode())).decode()
    for body in (
        raw,
        packed,
        json.dumps({"Type": "Notification", "MessageId": "m1", "Message": raw}),
        json.dumps({"Type": "Notification", "MessageId": "m2", "Message": packed}),
    ):
        decoded = decode_message(body)
        assert decoded.event_type == "merge_request" and decoded.payload == event
    for poison in (
        "not json at all",
        "{",
        json.dumps({"no": "kind"}),
        "H4sIAAAA",
        json.dumps({"Type": "Notification"}),
        "[1, 2]",
    ):
        with pytest.raises(UndecodableMessage):
            decode_message(poison)


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
    deliver(store, registry, mr_event("update", updated_at="2030-01-01 10:00:00 UTC"))
    # Older than the last applied event: rejected; the same time again: accepted.
    deliver(store, registry, mr_event("merge", updated_at="2030-01-01 09:00:00 UTC"))
    assert item(store, item_id).phase == "active"
    deliver(store, registry, mr_event("close", updated_at="2030-01-01 10:00:00 UTC"))
    assert item(store, item_id).phase == "cancelled"
    before = item(store, item_id).updated_at
    deliver(store, registry, mr_event("merge", updated_at="2030-01-01 12:00:00 UTC"))
    assert item(store, item_id).phase == "cancelled"  # terminal items ignore events
    assert item(store, item_id).updated_at == before


def test_pipeline_and_failed_jobs(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(store, registry)
    deliver(store, registry, pipeline_event("running"))
    assert item(store, item_id).head_pipeline_id is None
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


# ------------------------------------------------------------------ the SQS consumer


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def sqs(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    for var, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        monkeypatch.setenv(var, value)
    return boto3.client("sqs", endpoint_url=moto_url, region_name="us-east-1")


def make_queue(sqs: Any) -> str:
    return str(sqs.create_queue(QueueName=f"wq-{uuid.uuid4().hex[:8]}")["QueueUrl"])


def test_consumer_stores_and_deletes_after_commit_and_keeps_poison(
    store: Store, monkeypatch: pytest.MonkeyPatch, sqs: Any
) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(store, registry)
    queue = make_queue(sqs)
    raw = json.dumps(mr_event("approved"))
    sns = json.dumps(
        {
            "Type": "Notification",
            "MessageId": "n1",
            "Message": base64.b64encode(gzip.compress(raw.encode())).decode(),
        }
    )
    for body in (sns, "poison {", json.dumps(mr_event("merge", iid=99, branch="nobody"))):
        sqs.send_message(QueueUrl=queue, MessageBody=body)
    consumer = SqsConsumer(store.sessions, registry, queue, wait_seconds=0, client=sqs)
    deleted = 0
    for _ in range(5):
        deleted += consumer.poll_once()
    assert deleted == 2  # the event and the unmatched one; the poison stays
    with store.sessions() as session:
        pending = session.execute(select(PendingEvent.work_item_id)).scalars().all()
    assert pending == [item_id]
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    left = int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )
    assert left == 1


def test_redelivery_after_a_crash_between_commit_and_delete_changes_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch, sqs: Any
) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(store, registry)
    queue = make_queue(sqs)
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(mr_event("merge")))
    crashing = SqsConsumer(store.sessions, registry, queue, wait_seconds=0, client=sqs)
    message = sqs.receive_message(QueueUrl=queue, VisibilityTimeout=0)["Messages"][0]
    assert crashing.handle(message)  # stored and committed ... then the process dies
    deliver(store, registry, mr_event("merge"))  # the stored event is applied meanwhile
    assert item(store, item_id).phase == "completed"
    with store.sessions() as session:
        audits_before = session.execute(select(func.count()).select_from(AuditEntry)).scalar_one()
    survivor = SqsConsumer(store.sessions, registry, queue, wait_seconds=0, client=sqs)
    wait_for(lambda: survivor.poll_once() == 1, message="redelivered message handled")
    with store.sessions.begin() as session:
        drain_events(session, item_id, registry)
    assert item(store, item_id).phase == "completed"
    with store.sessions() as session:
        audits_after = session.execute(select(func.count()).select_from(AuditEntry)).scalar_one()
    assert audits_after == audits_before  # a discarded duplicate writes nothing


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
    event = mr_event("merge", iid=iid, updated_at="2030-01-01 10:00:00 UTC")
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
