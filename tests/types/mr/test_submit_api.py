"""`POST /api/work-items/mr` over HTTP: what an unchanged resubmission answers, writes and
audits, and that a change after it is still seen (SQLite, PostgreSQL).

An unchanged resubmission is decided on one locked row and the item is not loaded
(`wq.types.mr.upsert`; on PostgreSQL on the event loop, `wq.daemon.loop_submit`); its
answer must still be the item exactly as GET shows it.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from tests.conftest import Store
from tests.daemon.test_api import every_request_thread_busy
from tests.daemon.test_driver_reads import kill_connections
from tests.types.mr.helpers import mr_api, payload
from wq.daemon.runtime import Runtime
from wq.engine.dimensions import set_dimension
from wq.engine.items import set_phase
from wq.engine.models import AuditEntry, WorkItem

URL = "/api/work-items/mr"


@pytest.fixture
def api(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Runtime, TestClient]]:
    """The API (no processing: items stay as submitted) with the local token."""
    with mr_api(store, monkeypatch) as made:
        yield made


def _created(client: TestClient, **overrides: Any) -> dict[str, Any]:
    response = client.post(URL, json=payload(**overrides))
    assert response.status_code == 201, response.text
    item: dict[str, Any] = response.json()["item"]
    return item


def _row(runtime: Runtime, item_id: str) -> dict[str, Any]:
    """Every `work_items` column of the item."""
    with runtime.sessions() as session:
        row = session.execute(
            select(WorkItem.__table__).where(WorkItem.__table__.c.id == uuid.UUID(item_id))
        ).one()
        return dict(row._mapping)


def _audit(runtime: Runtime) -> list[AuditEntry]:
    with runtime.sessions() as session:
        entries = list(session.scalars(select(AuditEntry).order_by(AuditEntry.id)))
        session.expunge_all()
        return entries


def test_an_unchanged_resubmission_answers_the_item_as_get_shows_it(
    api: tuple[Runtime, TestClient],
) -> None:
    runtime, client = api
    created = _created(client)
    with runtime.sessions.begin() as session:
        item = session.get(WorkItem, uuid.UUID(created["id"]))
        assert item is not None
        set_dimension(session, item, "needs_mr", False, detail={"mr": 7})
        set_dimension(session, item, "needs_ci", True, variant="job", detail=["a", 1])

    # The same state again, the labels in another order (a set on GitLab): unchanged.
    for again in (payload(), payload(labels=["sync"]), payload(draft=True)):
        response = client.post(URL, json=again)
        assert response.status_code == 200, response.text
        shown = client.get(f"/api/work-items/{created['id']}").json()
        assert response.json() == {"action": "unchanged", "item": shown}
    assert [(d["dimension"], d["variant"]) for d in shown["dimensions"]] == [
        ("needs_ci", "job"),
        ("needs_mr", ""),
    ]
    assert shown["details"] == created["details"]


@pytest.mark.parametrize(
    "change",
    [
        {"title": "Another title"},
        {"description": "Another description"},
        {"labels": ["sync", "urgent"]},
        {"auto_merge": True},
        {"commit_message": "Another message"},
        {"package": "glibc"},
    ],
)
def test_a_resubmission_that_changes_only_a_field_updates_the_item_and_asks_for_the_mr_again(
    api: tuple[Runtime, TestClient], change: dict[str, Any]
) -> None:
    """Same files and target, another title (labels, auto-merge...): the item takes it
    and `ensure_mr` runs again to bring the MR to it, the audit naming the field."""
    runtime, client = api
    created = _created(client, labels=["sync", "a"])
    with runtime.sessions.begin() as session:
        item = session.get(WorkItem, uuid.UUID(created["id"]))
        assert item is not None
        set_dimension(session, item, "needs_mr", False, detail={"mr": 7})

    response = client.post(URL, json=payload(**{"labels": ["sync", "a"], **change}))
    assert response.status_code == 200, response.text
    assert response.json()["action"] == "updated"
    shown = client.get(f"/api/work-items/{created['id']}").json()
    assert {key: shown["details"].get(key, value) for key, value in change.items()} == change
    assert {d["dimension"]: d["status"] for d in shown["dimensions"]}["needs_mr"] == "true"
    updated = [entry for entry in _audit(runtime) if entry.event_type == "updated"]
    assert [entry.new_state["fields"] for entry in updated] == [list(change)]


def test_a_project_without_a_token_is_refused_before_anything_is_read_or_written(
    api: tuple[Runtime, TestClient],
) -> None:
    # On PostgreSQL the unchanged check runs first, on the event loop: its refusal must
    # be the handler's (422 naming the setting), not a 500, with nothing written.
    runtime, client = api
    response = client.post(URL, json=payload(project="elsewhere/project"))
    assert response.status_code == 422, response.text
    assert "handled_types.mr.projects" in response.json()["error"]
    with runtime.sessions() as session:
        assert session.scalar(select(func.count()).select_from(WorkItem)) == 0
    assert [entry.event_type for entry in _audit(runtime)] == []


def test_an_unchanged_resubmission_audits_its_allow_and_changes_nothing(
    api: tuple[Runtime, TestClient],
) -> None:
    runtime, client = api
    created = _created(client)
    before, audited = _row(runtime, created["id"]), _audit(runtime)

    response = client.post(URL, json=payload())
    assert response.json()["action"] == "unchanged"
    assert _row(runtime, created["id"]) == before  # stamp, updated_at, seq: all as they were
    new = _audit(runtime)[len(audited) :]
    assert [(entry.event_type, entry.actor, entry.work_item_id) for entry in new] == [
        ("auth_allowed", "local", None)
    ]
    assert new[0].extra is not None
    assert {k: new[0].extra[k] for k in ("method", "route", "permission", "item_type")} == {
        "method": "POST",
        "route": URL,
        "permission": "submit",
        "item_type": "mr",
    }


def test_changes_around_unchanged_resubmissions_are_seen(
    api: tuple[Runtime, TestClient],
) -> None:
    runtime, client = api
    created = _created(client)
    actions = [{"action": "update", "file_path": "sources", "content": "v3\n"}]
    updated = client.post(URL, json=payload(file_actions=actions))
    assert updated.status_code == 200 and updated.json()["action"] == "updated"
    new_hash = updated.json()["item"]["details"]["content_hash"]
    assert new_hash != created["details"]["content_hash"]
    again = client.post(URL, json=payload(file_actions=actions))
    assert again.json()["action"] == "unchanged"
    assert again.json()["item"]["details"]["content_hash"] == new_hash
    assert again.json()["item"]["dimensions"] == updated.json()["item"]["dimensions"]

    # A failed item is retried by the same content; a cancelled one gets a successor.
    with runtime.sessions.begin() as session:
        item = session.get(WorkItem, uuid.UUID(created["id"]))
        assert item is not None
        set_phase(session, item, "failed", actor="t", trigger={"source": "test"}, error="boom")
    retried = client.post(URL, json=payload(file_actions=actions))
    assert retried.json()["action"] == "retried"
    assert retried.json()["item"]["phase"] == "active"
    with runtime.sessions.begin() as session:
        item = session.get(WorkItem, uuid.UUID(created["id"]))
        assert item is not None
        set_phase(session, item, "cancelled", actor="t", trigger={"source": "test"})
    successor = client.post(URL, json=payload(file_actions=actions))
    assert successor.status_code == 201 and successor.json()["action"] == "created"
    assert successor.json()["item"]["details"]["generation"] == 1
    assert (
        client.post(URL, json=payload(file_actions=actions)).json()["item"]["id"]
        == (successor.json()["item"]["id"])
    )


def test_a_resubmission_waits_for_the_items_lock_and_answers_what_its_holder_committed(
    api: tuple[Runtime, TestClient],
) -> None:
    runtime, client = api
    item_id = uuid.UUID(_created(client)["id"])
    answers: list[Any] = []
    with runtime.sessions() as holder:  # as a worker finishing an action on the item
        item = holder.execute(
            select(WorkItem).where(WorkItem.id == item_id).with_for_update()
        ).scalar_one()
        set_dimension(holder, item, "needs_mr", False, detail={"mr": 1})
        holder.flush()
        resubmission = threading.Thread(
            target=lambda: answers.append(client.post(URL, json=payload()))
        )
        resubmission.start()
        resubmission.join(0.5)
        assert resubmission.is_alive()  # waiting for the lock
        holder.commit()
    resubmission.join(10)
    assert answers[0].json()["action"] == "unchanged"
    # Its dimensions are read after the lock: what the holder committed.
    assert [d["dimension"] for d in answers[0].json()["item"]["dimensions"]] == ["needs_mr"]
    assert answers[0].json()["item"] == client.get(f"/api/work-items/{item_id}").json()


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_on_postgresql_an_unchanged_resubmission_needs_no_request_thread(
    api: tuple[Runtime, TestClient], caplog: pytest.LogCaptureFixture
) -> None:
    # It is answered on the event loop (`wq.daemon.loop_submit`); a change is not.
    _, client = api
    caplog.set_level(logging.INFO, logger="wq.audit")
    item_id = _created(client)["id"]
    actions = [{"action": "update", "file_path": "sources", "content": "v9\n"}]
    answers: list[Any] = []
    with every_request_thread_busy(client):
        caplog.clear()
        again = payload()
        unchanged = threading.Thread(target=lambda: answers.append(client.post(URL, json=again)))
        unchanged.start()
        unchanged.join(timeout=5)
        assert [a.json()["action"] for a in answers] == ["unchanged"], "it waited for a thread"
        # Its allow was logged once committed, as a session's audit rows are.
        logged = [r.getMessage() for r in caplog.records if r.name == "wq.audit"]
        assert len(logged) == 1 and '"event_type":"auth_allowed"' in logged[0]
        change = payload(file_actions=actions)
        update = threading.Thread(target=lambda: answers.append(client.post(URL, json=change)))
        update.start()
        update.join(timeout=0.5)
        assert update.is_alive(), "a change did not wait for the busy thread"
    update.join(timeout=10)
    assert answers[1].json()["action"] == "updated"
    assert answers[1].json()["item"]["id"] == item_id


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_after_the_server_dropped_its_connections_no_unchanged_resubmission_is_refused(
    api: tuple[Runtime, TestClient], store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    # As a restart does; the first resubmission on each dropped connection was a 503,
    # and a caller that does not send it again loses it.
    runtime, client = api
    _created(client)
    assert client.post(URL, json=payload()).json()["action"] == "unchanged"  # one kept idle
    audited = len(_audit(runtime))
    kill_connections(store)

    caplog.set_level(logging.WARNING)
    # Only what is logged from here on: a shared moto server logs each request it
    # answers at INFO, whoever sent it.
    caplog.clear()
    answers = [client.post(URL, json=payload()) for _ in range(3)]

    assert [answer.status_code for answer in answers] == [200, 200, 200], answers[0].text
    assert [answer.json()["action"] for answer in answers] == ["unchanged"] * 3
    assert not caplog.records  # no outage to report
    # Each answered one its allow.
    assert len(_audit(runtime)) == audited + 3
