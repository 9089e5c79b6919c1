"""An item of a type this daemon has no model for (a newer replica's, during a rolling
upgrade) is shown like any other and hurts no one's requests: before, the list failed
with a 500 for every caller as soon as one such item was on its page."""

from __future__ import annotations

import uuid

from fastapi.testclient import TestClient
from sqlalchemy import insert

from tests.conftest import Store
from wq.engine.models import WorkItem, utcnow


def test_an_item_of_an_unknown_type_is_listed_read_and_hurts_no_one(
    store: Store, client: TestClient
) -> None:
    created = client.post("/api/work-items/chain", json={"project": "team/app"})
    assert created.status_code == 201, created.text
    item_id, now = uuid.uuid4(), utcnow()
    with store.sessions.begin() as session:
        session.execute(
            insert(WorkItem.__table__).values(
                id=item_id,
                type="from-a-newer-replica",
                project="team/app",
                phase="active",
                attempts=0,
                admission="idle",
                lane="normal",
                autonomous=False,
                created_at=now,
                updated_at=now,
            )
        )
    listed = client.get("/api/work-items")
    assert listed.status_code == 200, listed.text
    types = [item["type"] for item in listed.json()["items"]]
    assert types == ["from-a-newer-replica", "chain"]
    shown = client.get(f"/api/work-items/{item_id}")
    assert shown.status_code == 200, shown.text
    assert shown.json()["type"] == "from-a-newer-replica"
    assert client.get(f"/api/work-items/{item_id}/history").status_code == 200
    assert client.get(f"/api/work-items/{item_id}/pending-events").status_code == 200
    logs = client.get(f"/api/work-items/{item_id}/logs")
    assert logs.status_code == 409
    assert logs.json()["error"] == (
        "this daemon does not handle from-a-newer-replica items: ask one that does"
    )
