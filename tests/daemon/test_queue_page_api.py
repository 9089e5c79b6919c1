"""`GET /api/queue/{lane}` on SQLite and PostgreSQL: one lane's FIFO, page by page."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from tests.conftest import Store
from tests.daemon.test_pools_api import fill, pooled  # noqa: F401 (the fixture)
from wq.daemon.runtime import Runtime
from wq.engine.admission import dispatch
from wq.engine.models import QUEUED, WorkItem, utcnow
from wq.engine.store import inline


def lane_pages(client: TestClient, lane: str, project: str, limit: int) -> list[dict[str, Any]]:
    """Every page of one lane, following next_cursor."""
    pages: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(50):
        params: dict[str, Any] = {"project": project, "limit": limit}
        if cursor:
            params["cursor"] = cursor
        response = client.get(f"/api/queue/{lane}", params=params)
        assert response.status_code == 200, response.text
        pages.append(response.json())
        cursor = pages[-1]["next_cursor"]
        if cursor is None:
            return pages
    raise AssertionError("the cursor never ended")


def test_pages_keep_true_positions_in_fifo_order(pooled: tuple[Runtime, TestClient]) -> None:  # noqa: F811
    runtime, client = pooled
    normal = fill(runtime, "team/app", 7)
    alerts = fill(runtime, "team/app", 2, lane="alert")
    fill(runtime, "team/other", 3)
    dispatch(runtime.sessions, runtime.config, clock=utcnow)  # admits normal[:2], alerts[0]

    pages = lane_pages(client, "normal", "team/app", limit=2)
    assert [len(page["entries"]) for page in pages] == [2, 2, 1]
    entries = [entry for page in pages for entry in page["entries"]]
    assert [entry["id"] for entry in entries] == [str(i) for i in normal[2:]]
    assert [entry["position"] for entry in entries] == [1, 2, 3, 4, 5]
    assert {entry["lane"] for entry in entries} == {"normal"}
    assert all(entry["queued_at"] for entry in entries)

    (alert_page,) = lane_pages(client, "alert", "team/app", limit=10)
    assert [entry["id"] for entry in alert_page["entries"]] == [str(alerts[1])]
    assert alert_page["entries"][0]["position"] == 1


def test_a_page_after_admissions_counts_from_the_new_head(
    pooled: tuple[Runtime, TestClient],  # noqa: F811
) -> None:
    runtime, client = pooled
    fill(runtime, "infra/dns", 5)  # capacity 1 in infra/
    dispatch(runtime.sessions, runtime.config, clock=utcnow)
    first = client.get("/api/queue/normal", params={"project": "infra/dns", "limit": 2}).json()
    assert [entry["position"] for entry in first["entries"]] == [1, 2]
    # The head leaves the queue before the next page is read: positions stay true.
    with runtime.sessions() as session:
        head = session.get(WorkItem, uuid.UUID(first["entries"][0]["id"]))
        assert head is not None
        head.admission = "admitted"
        session.commit()
    second = client.get(
        "/api/queue/normal",
        params={"project": "infra/dns", "limit": 2, "cursor": first["next_cursor"]},
    ).json()
    assert [entry["position"] for entry in second["entries"]] == [2, 3]


@pytest.mark.parametrize(
    ("lane", "params"),
    [
        ("urgent", {"project": "a"}),
        ("normal", {}),
        ("normal", {"project": ""}),
        ("normal", {"project": "a", "limit": 0}),
        ("normal", {"project": "a", "limit": 1001}),
        ("normal", {"project": "a", "cursor": "x1"}),
        ("normal", {"project": "a", "cursor": "²"}),
        ("normal", {"project": "a", "cursor": "9" * 20}),
    ],
)
def test_bad_queue_page_requests_are_422(
    pooled: tuple[Runtime, TestClient],  # noqa: F811
    lane: str,
    params: dict[str, object],
) -> None:
    _, client = pooled
    response = client.get(f"/api/queue/{lane}", params=params)
    assert response.status_code == 422, response.text
    assert response.json()["error"]


def test_queue_page_needs_a_token_and_is_in_openapi(
    pooled: tuple[Runtime, TestClient],  # noqa: F811
) -> None:
    runtime, _ = pooled
    from wq.daemon.app import create_app

    with TestClient(create_app(runtime)) as anonymous:
        assert anonymous.get("/api/queue/normal?project=x").status_code == 401
        operation = anonymous.get("/openapi.json").json()["paths"]["/api/queue/{lane}"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {"lane", "project", "limit", "cursor"}


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # EXPLAIN is PostgreSQL's
def test_queue_page_query_uses_the_queue_index(store: Store) -> None:
    """Both statements of a page are ranges of ix_work_items_queue, never a scan."""
    from sqlalchemy import func

    from wq.engine.pools import queue_page

    where = (
        WorkItem.project == "a",
        WorkItem.lane == "normal",
        WorkItem.admission == inline(QUEUED),
    )
    statements = [
        select(WorkItem.id).where(*where, WorkItem.seq > 5).order_by(WorkItem.seq).limit(101),
        select(func.count()).select_from(WorkItem).where(*where, WorkItem.seq <= 5),
    ]
    with store.sessions() as session:
        session.execute(text("SET LOCAL enable_seqscan = off"))
        for statement in statements:
            compiled = statement.compile(store.engine, compile_kwargs={"literal_binds": True})
            plan = "\n".join(row[0] for row in session.execute(text(f"EXPLAIN {compiled}")))
            assert "ix_work_items_queue" in plan, plan
            assert "Sort" not in plan, plan
        assert queue_page(session, "a", "normal", after=5).entries == []
