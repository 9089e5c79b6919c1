"""`GET /api/work-items/{id}/history` on SQLite and PostgreSQL: newest first, paginated."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient

from tests.conftest import Store
from tests.daemon.test_api import add_item, audit_rows, make_terminal
from wq.daemon.runtime import Runtime


def history(client: TestClient, item_id: uuid.UUID, **params: object) -> dict[str, object]:
    response = client.get(f"/api/work-items/{item_id}/history", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def test_history_is_the_items_audit_newest_first(
    client: TestClient, store: Store, runtime: Runtime
) -> None:
    item_id = add_item(store, runtime)
    other = add_item(store, runtime, project="group/beta")
    make_terminal(store, item_id, "failed", error="boom")
    assert client.post(f"/api/work-items/{item_id}/retry").status_code == 200

    body = history(client, item_id)
    entries = body["entries"]
    assert isinstance(entries, list)
    stored = audit_rows(store, item_id)
    assert [entry["id"] for entry in entries] == [row.id for row in reversed(stored)]
    assert body["next_cursor"] is None
    assert [entry["event_type"] for entry in entries][:2] == ["queued", "retried"]
    newest = entries[1]
    assert newest["actor"] == "local"
    assert newest["old_state"]["phase"] == "failed"
    assert newest["new_state"]["phase"] == "active"
    assert newest["trigger"]["source"]
    # Only this item's rows.
    assert {row.id for row in audit_rows(store, other)}.isdisjoint(e["id"] for e in entries)


def test_history_pages_follow_the_cursor(
    client: TestClient, store: Store, runtime: Runtime
) -> None:
    item_id = add_item(store, runtime)
    for _ in range(3):
        make_terminal(store, item_id, "failed")
        assert client.post(f"/api/work-items/{item_id}/retry").status_code == 200
    expected = [row.id for row in reversed(audit_rows(store, item_id))]
    assert len(expected) >= 7

    seen: list[int] = []
    cursor: str | None = None
    for _ in range(20):
        params: dict[str, object] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        body = history(client, item_id, **params)
        page = body["entries"]
        assert isinstance(page, list) and len(page) <= 2
        seen += [entry["id"] for entry in page]
        cursor = body["next_cursor"]  # type: ignore[assignment]
        if cursor is None:
            break
    assert seen == expected


def test_history_of_a_missing_item_is_404(client: TestClient) -> None:
    missing = uuid.uuid4()
    response = client.get(f"/api/work-items/{missing}/history")
    assert response.status_code == 404
    assert str(missing) in response.json()["error"]


@pytest.mark.parametrize("cursor", ["abc", "-1", "0", "²", "99999999999999999999", "1" * 40])
def test_history_refuses_a_forged_cursor(
    client: TestClient, store: Store, runtime: Runtime, cursor: str
) -> None:
    item_id = add_item(store, runtime)
    response = client.get(f"/api/work-items/{item_id}/history", params={"cursor": cursor})
    assert response.status_code == 422, response.text
    assert response.json()["error"]


def test_history_needs_credentials(anon: TestClient, store: Store, runtime: Runtime) -> None:
    item_id = add_item(store, runtime)
    response = anon.get(f"/api/work-items/{item_id}/history")
    assert response.status_code == 401


def test_history_is_in_openapi(anon: TestClient) -> None:
    paths = anon.get("/openapi.json").json()["paths"]
    operation = paths["/api/work-items/{item_id}/history"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {"item_id", "limit", "cursor"}


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_history_query_uses_the_item_index(store: Store) -> None:
    """The page query is served by the (work_item_id, id) index, not a scan of audit_log.

    PostgreSQL only: EXPLAIN's plan is PostgreSQL's (SQLite has the same index, checked by
    the migration tests).
    """
    from sqlalchemy import text

    from wq.engine.history import history_query

    with store.sessions() as session:
        session.execute(text("SET LOCAL enable_seqscan = off"))
        compiled = history_query(uuid.uuid4(), limit=50, before=10**6).compile(
            store.engine, compile_kwargs={"literal_binds": True}
        )
        plan = "\n".join(row[0] for row in session.execute(text(f"EXPLAIN {compiled}")))
        assert "ix_audit_log_work_item_id_id" in plan, plan
        assert "Sort" not in plan, plan
