"""`GET /api/work-items/{id}/pending-events` on SQLite and PostgreSQL: in application order."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from tests.conftest import Store
from tests.daemon.test_api import T0, add_item
from wq.daemon.runtime import Runtime
from wq.engine.events import store_event
from wq.engine.models import PendingEvent


def add_events(store: Store, item_id: uuid.UUID, count: int) -> None:
    with store.sessions() as session:
        for n in range(count):
            store_event(
                session, item_id, f"event-{n}", {"n": n}, event_at=T0 + timedelta(seconds=n)
            )
        session.commit()


def pending(client: TestClient, item_id: uuid.UUID, **params: Any) -> dict[str, Any]:
    response = client.get(f"/api/work-items/{item_id}/pending-events", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_pending_events_are_listed_in_application_order(
    client: TestClient, store: Store, runtime: Runtime
) -> None:
    item_id = add_item(store, runtime)
    other = add_item(store, runtime, project="group/beta")
    add_events(store, item_id, 3)
    add_events(store, other, 2)

    body = pending(client, item_id)
    assert body["next_cursor"] is None
    events = body["events"]
    assert [event["event_type"] for event in events] == ["event-0", "event-1", "event-2"]
    assert [event["payload"] for event in events] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert events[1]["event_at"].startswith((T0 + timedelta(seconds=1)).strftime("%Y-%m-%dT%H"))
    assert events[0]["created_at"]
    assert pending(client, add_item(store, runtime))["events"] == []


def test_pending_events_pages_follow_the_cursor(
    client: TestClient, store: Store, runtime: Runtime
) -> None:
    item_id = add_item(store, runtime)
    add_events(store, item_id, 5)
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        body = pending(client, item_id, limit=2, **({"cursor": cursor} if cursor else {}))
        assert len(body["events"]) <= 2
        seen += [event["event_type"] for event in body["events"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"event-{n}" for n in range(5)]


@pytest.mark.parametrize("cursor", ["abc", "-1", "0", "²", "9" * 20])
def test_pending_events_refuse_a_forged_cursor(
    client: TestClient, store: Store, runtime: Runtime, cursor: str
) -> None:
    item_id = add_item(store, runtime)
    response = client.get(f"/api/work-items/{item_id}/pending-events", params={"cursor": cursor})
    assert response.status_code == 422, response.text
    assert response.json()["error"]


def test_pending_events_of_a_missing_item_are_404_and_need_a_token(
    client: TestClient, anon: TestClient, store: Store, runtime: Runtime
) -> None:
    missing = uuid.uuid4()
    response = client.get(f"/api/work-items/{missing}/pending-events")
    assert response.status_code == 404 and str(missing) in response.json()["error"]
    item_id = add_item(store, runtime)
    assert anon.get(f"/api/work-items/{item_id}/pending-events").status_code == 401
    paths = anon.get("/openapi.json").json()["paths"]
    operation = paths["/api/work-items/{item_id}/pending-events"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {"item_id", "limit", "cursor"}


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # EXPLAIN is PostgreSQL's
def test_pending_events_query_uses_the_item_index(store: Store) -> None:
    """The page is a range of the work_item_id index, not a scan of pending_events."""
    with store.sessions() as session:
        session.execute(text("SET LOCAL enable_seqscan = off"))
        compiled = (
            select(PendingEvent)
            .where(PendingEvent.work_item_id == uuid.uuid4(), PendingEvent.id > 3)
            .order_by(PendingEvent.id)
            .limit(51)
            .compile(store.engine, compile_kwargs={"literal_binds": True})
        )
        plan = "\n".join(row[0] for row in session.execute(text(f"EXPLAIN {compiled}")))
        assert "ix_pending_events_work_item_id" in plan, plan
