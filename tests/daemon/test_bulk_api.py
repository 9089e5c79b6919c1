"""`POST /api/work-items/retry` and `/cancel` with a selector: one request, each item audited."""

from __future__ import annotations

import uuid
from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from tests.engine.helpers import submit
from wq.daemon.runtime import Runtime
from wq.engine.items import set_phase
from wq.engine.models import AuditEntry, WorkItem, utcnow


def failed_items(runtime: Runtime, project: str, error: str, count: int) -> list[uuid.UUID]:
    ids = []
    for _ in range(count):
        intake = submit(runtime.sessions, runtime.registry, runtime.config, project)
        assert intake.item is not None
        with runtime.sessions.begin() as session:
            item = session.get(WorkItem, intake.item.id)
            assert item is not None
            set_phase(
                session, item, "failed", actor="test", trigger={"source": "test"}, error=error
            )
        ids.append(intake.item.id)
    return ids


def phases(runtime: Runtime, ids: list[uuid.UUID]) -> list[str]:
    with runtime.sessions() as session:
        rows = session.execute(select(WorkItem.id, WorkItem.phase).where(WorkItem.id.in_(ids)))
        found = {item_id: phase for item_id, phase in rows}
    return [found[item_id] for item_id in ids]


def audited(runtime: Runtime, event_type: str) -> int:
    with runtime.sessions() as session:
        query = select(func.count()).where(AuditEntry.event_type == event_type)
        return int(session.scalar(query) or 0)


def test_retry_acts_on_the_matching_items_oldest_first_up_to_the_limit(
    runtime: Runtime, client: TestClient
) -> None:
    timeouts = failed_items(runtime, "team/a", "step 3: Connection TIMED OUT", 3)
    other_error = failed_items(runtime, "team/a", "disk full", 1)
    other_project = failed_items(runtime, "team/b", "connection timed out", 1)

    response = client.post(
        "/api/work-items/retry",
        json={"project": "team/a", "error_contains": "timed out", "limit": 2},
    )
    assert response.status_code == 200, response.text
    document = response.json()
    assert [r["id"] for r in document["results"]] == [str(i) for i in timeouts[:2]]
    assert {r["outcome"] for r in document["results"]} == {"retried"}
    assert document["more"] is True
    assert phases(runtime, timeouts) == ["active", "active", "failed"]
    assert phases(runtime, other_error + other_project) == ["failed", "failed"]
    assert audited(runtime, "retried") == 2  # one entry per item, as one at a time

    rest = client.post("/api/work-items/retry", json={"error_contains": "TIMED OUT"}).json()
    assert [r["id"] for r in rest["results"]] == [str(timeouts[2]), str(other_project[0])]
    assert rest["more"] is False


def test_a_dry_run_lists_and_changes_nothing(runtime: Runtime, client: TestClient) -> None:
    ids = failed_items(runtime, "team/a", "boom", 2)
    response = client.post("/api/work-items/retry", json={"phase": "failed", "dry_run": True})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [(r["id"], r["outcome"]) for r in results] == [(str(i), "selected") for i in ids]
    assert phases(runtime, ids) == ["failed", "failed"]
    assert audited(runtime, "retried") == 0


def test_ids_narrow_the_selection_to_what_was_confirmed(
    runtime: Runtime, client: TestClient
) -> None:
    first, second = failed_items(runtime, "team/a", "boom", 2)
    active = submit(runtime.sessions, runtime.registry, runtime.config, "team/a").item
    assert active is not None
    # An id that does not match the selector (an active item for a retry, an item of
    # another project, one that does not exist) is left alone and told apart.
    unknown = uuid.uuid4()
    other = failed_items(runtime, "team/b", "boom", 1)[0]
    body = {"project": "team/a", "ids": [str(second), str(active.id), str(unknown), str(other)]}
    results = client.post("/api/work-items/retry", json=body).json()["results"]
    assert [(r["id"], r["outcome"], r["error"]) for r in results] == [
        (str(second), "retried", None),
        (str(active.id), "skipped", f"work item {active.id} is active, not failed"),
        (str(unknown), "skipped", f"work item {unknown} not found"),
        (str(other), "skipped", f"work item {other} does not match the selector's other fields"),
    ]
    assert phases(runtime, [first, second, other]) == ["failed", "active", "failed"]
    # So does a dry run, and a cancel of an item that has ended meanwhile.
    listed = client.post("/api/work-items/retry", json={**body, "dry_run": True}).json()
    assert [r["outcome"] for r in listed["results"]] == ["skipped"] * 4
    ended = client.post("/api/work-items/cancel", json={"ids": [str(first)]}).json()
    assert ended["results"] == [
        {
            "id": str(first),
            "type": "chain",
            "outcome": "skipped",
            "error": f"work item {first} is failed, not active",
        }
    ]


def test_a_selector_that_names_nothing_is_refused(runtime: Runtime, client: TestClient) -> None:
    failed = failed_items(runtime, "team/x", "boom", 1)
    active = submit(runtime.sessions, runtime.registry, runtime.config, "team/y").item
    assert active is not None
    for path in ("/api/work-items/retry", "/api/work-items/cancel"):
        for body in ({}, {"dry_run": False}, {"limit": 5}, {"project": None, "type": None}):
            response = client.post(path, json=body)
            assert response.status_code == 422, (path, body, response.text)
            assert "select the items" in response.text
    assert phases(runtime, [*failed, active.id]) == ["failed", "active"]
    # Named explicitly, the phase alone selects (every failed item, deliberately).
    retried = client.post("/api/work-items/retry", json={"phase": "failed"}).json()
    assert [r["id"] for r in retried["results"]] == [str(failed[0])]


def test_cancel_takes_active_items_and_reports_each(runtime: Runtime, client: TestClient) -> None:
    active = []
    for _ in range(2):
        intake = submit(runtime.sessions, runtime.registry, runtime.config, "team/c")
        assert intake.item is not None
        active.append(intake.item.id)
    failed = failed_items(runtime, "team/c", "boom", 1)
    response = client.post("/api/work-items/cancel", json={"project": "team/c"})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [(r["id"], r["outcome"]) for r in results] == [(str(i), "cancelled") for i in active]
    assert phases(runtime, active + failed) == ["cancelled", "cancelled", "failed"]


def test_older_than_counts_the_time_in_state(runtime: Runtime, client: TestClient) -> None:
    old, _recent = failed_items(runtime, "team/a", "boom", 2)
    with runtime.sessions.begin() as session:
        item = session.get(WorkItem, old)
        assert item is not None
        item.updated_at = utcnow() - timedelta(hours=2)
    query = {"older_than_seconds": 3600, "dry_run": True}
    results = client.post("/api/work-items/retry", json=query).json()["results"]
    assert [r["id"] for r in results] == [str(old)]


def test_selectors_outside_what_the_action_takes_are_refused(client: TestClient) -> None:
    for action, body in (
        ("retry", {"phase": "active"}),
        ("cancel", {"phase": "failed"}),
        ("retry", {"limit": 0}),
        ("retry", {"bogus": 1}),
        ("cancel", {"older_than_seconds": -1}),
    ):
        response = client.post(f"/api/work-items/{action}", json=body)
        assert response.status_code == 422, (action, body)
        assert response.json()["problems"], (action, body)


def test_a_kind_where_no_type_has_kinds_selects_nothing(
    runtime: Runtime, client: TestClient
) -> None:
    failed_items(runtime, "team/a", "boom", 1)
    response = client.post("/api/work-items/retry", json={"kind": "review", "dry_run": True})
    assert response.status_code == 200, response.text
    assert response.json() == {"results": [], "more": False}


def test_other_methods_on_the_bulk_paths_name_post(client: TestClient) -> None:
    response = client.get("/api/work-items/retry")
    assert (response.status_code, response.headers["allow"]) == (405, "POST")


def test_without_a_token_nothing_is_selected(runtime: Runtime, anon: TestClient) -> None:
    ids = failed_items(runtime, "team/a", "boom", 1)
    assert anon.post("/api/work-items/retry", json={}).status_code == 401
    assert phases(runtime, ids) == ["failed"]
