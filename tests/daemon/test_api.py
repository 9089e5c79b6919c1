"""The generic work-item API through FastAPI's TestClient, on SQLite and PostgreSQL.

Items are created with the engine's own intake (`items.submit`); the processing
manager is not started, so what the tests set up stays as they set it.
"""

from __future__ import annotations

import base64
import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import anyio.to_thread
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text

from tests.conftest import Store
from tests.support.chain import STEPS, new_chain_item
from wq.daemon.app import create_app
from wq.daemon.auth import Authenticator, Principal
from wq.daemon.runtime import Runtime
from wq.engine import schema
from wq.engine.dimensions import set_dimension
from wq.engine.items import set_phase, submit
from wq.engine.models import AuditEntry, WorkItem

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
TEST_TRIGGER = {"source": "test"}


class OtherItem(WorkItem):
    """A second generic type (no detail table) so that the `type` filter has a choice."""

    __mapper_args__ = {"polymorphic_identity": "daemon_test_other"}  # noqa: RUF012


# --------------------------------------------------------------------------- helpers


def add_item(
    store: Store,
    runtime: Runtime,
    *,
    project: str = "group/alpha",
    now: datetime = T0,
    kind: type[WorkItem] | None = None,
    **fields: Any,
) -> uuid.UUID:
    """Submit one item (a chain item unless `kind` says otherwise); return its id."""
    if kind is None:
        item: WorkItem = new_chain_item(project, **fields)
    else:
        item = kind(
            project=project,
            lane=fields.pop("lane", "normal"),
            autonomous=fields.pop("autonomous", False),
            **fields,
        )
    with store.sessions() as session:
        intake = submit(
            session,
            item,
            registry=runtime.registry,
            pool=store.config.pool_for(project),
            now=now,
            actor="test",
            trigger=TEST_TRIGGER,
        )
        session.commit()
        assert intake.outcome == "created" and intake.item is not None
        return intake.item.id


def make_terminal(
    store: Store, item_id: uuid.UUID, phase: str, *, error: str | None = None, attempts: int = 0
) -> None:
    with store.sessions() as session:
        item = session.get(WorkItem, item_id)
        assert item is not None
        item.attempts = attempts
        set_phase(session, item, phase, actor="test", trigger=TEST_TRIGGER, error=error)
        session.commit()


def set_admission(store: Store, item_id: uuid.UUID, admission: str) -> None:
    with store.sessions() as session:
        item = session.get(WorkItem, item_id)
        assert item is not None
        item.admission = admission
        session.commit()


def row_of(store: Store, item_id: uuid.UUID) -> dict[str, Any]:
    """The stored state of an item, read straight from the database."""
    with store.sessions() as session:
        item = session.get(WorkItem, item_id)
        assert item is not None
        return {
            "phase": item.phase,
            "attempts": item.attempts,
            "error": item.error,
            "admission": item.admission,
            "seq": item.seq,
            "run_after": item.run_after,
            "updated_at": item.updated_at,
            "admitted_at": item.admitted_at,
        }


def audit_rows(store: Store, item_id: uuid.UUID) -> list[AuditEntry]:
    with store.sessions() as session:
        return list(
            session.execute(
                select(AuditEntry).where(AuditEntry.work_item_id == item_id).order_by(AuditEntry.id)
            ).scalars()
        )


def audit_count(store: Store) -> int:
    """Audit rows of state changes (refused requests are audited too, as auth_* rows)."""
    with store.sessions() as session:
        return int(
            session.execute(
                select(func.count())
                .select_from(AuditEntry)
                .where(AuditEntry.event_type.not_like("auth_%"))
            ).scalar_one()
        )


def ids_of(response_json: dict[str, Any]) -> list[str]:
    return [item["id"] for item in response_json["items"]]


def error_of(response: Any) -> str:
    """The JSON error message of a response (asserting it has one)."""
    body = response.json()
    assert isinstance(body, dict), body
    assert isinstance(body.get("error"), str) and body["error"].strip(), body
    return str(body["error"])


def page_through(client: TestClient, **params: Any) -> list[list[str]]:
    """Follow next_cursor to the end; the ids of each page."""
    pages: list[list[str]] = []
    cursor: str | None = None
    for _ in range(100):
        query = dict(params)
        if cursor is not None:
            query["cursor"] = cursor
        response = client.get("/api/work-items", params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        pages.append(ids_of(body))
        cursor = body["next_cursor"]
        if cursor is None:
            return pages
    raise AssertionError("pagination did not end")


# --------------------------------------------------------------------------- public routes


def test_probes_answer_without_auth(anon: TestClient, store: Store) -> None:
    response = anon.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    ready = anon.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json() == {
        "status": "ok",
        "database": store.dialect,
        "schema_revision": schema.cached_head_revision(),
    }


def test_liveness_answers_while_every_request_thread_is_busy(anon: TestClient) -> None:
    """An overloaded daemon queues requests for its threadpool; the liveness probe must
    not queue behind them, or the kubelet restarts a daemon that is only busy."""
    with every_request_thread_busy(anon):
        answers: list[int] = []
        probe = threading.Thread(target=lambda: answers.append(anon.get("/healthz").status_code))
        probe.start()
        probe.join(timeout=5)
        assert answers == [200], "/healthz waited for a request thread"
    probe.join(timeout=5)


@contextlib.contextmanager
def every_request_thread_busy(client: TestClient) -> Iterator[None]:
    """The app's request threads shrunk to one, held busy for the block."""
    portal = client.portal
    assert portal is not None
    # A first request sizes the pool (server.request_threads); then it shrinks to one.
    assert client.get("/healthz").status_code == 200
    limiter = portal.call(_default_thread_limiter)
    tokens = limiter.total_tokens
    release = threading.Event()
    portal.call(setattr, limiter, "total_tokens", 1)
    busy = portal.start_task_soon(anyio.to_thread.run_sync, release.wait)
    try:
        yield
    finally:
        release.set()
        busy.result(timeout=5)
        portal.call(setattr, limiter, "total_tokens", tokens)


async def _default_thread_limiter() -> anyio.CapacityLimiter:
    return anyio.to_thread.current_default_thread_limiter()


def test_readyz_refuses_an_outdated_schema(anon: TestClient, store: Store) -> None:
    head = schema.cached_head_revision()
    update = text(f"UPDATE {schema.VERSION_TABLE} SET version_num = :revision")
    with store.engine.begin() as conn:
        conn.execute(update, {"revision": "0001"})
    try:
        ready = anon.get("/readyz")
        assert ready.status_code == 503
        assert "wq db migrate" in ready.json()["error"]
        # Liveness does not depend on the database.
        assert anon.get("/healthz").status_code == 200
    finally:
        # The PostgreSQL database is shared by the whole run.
        with store.engine.begin() as conn:
            conn.execute(update, {"revision": head})


def test_readyz_stays_ready_on_a_schema_a_newer_release_migrated(
    anon: TestClient, store: Store
) -> None:
    # An upgrade migrates first, then rolls out: until they are replaced, the old
    # replicas see a revision their migrations do not know, and keep serving.
    head = schema.cached_head_revision()
    update = text(f"UPDATE {schema.VERSION_TABLE} SET version_num = :revision")
    with store.engine.begin() as conn:
        conn.execute(update, {"revision": "9999_from_a_newer_release"})
    try:
        ready = anon.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["schema_revision"] == "9999_from_a_newer_release"
    finally:
        with store.engine.begin() as conn:
            conn.execute(update, {"revision": head})


def test_openapi_docs_and_redoc_need_no_auth(anon: TestClient) -> None:
    spec = anon.get("/openapi.json")
    assert spec.status_code == 200
    paths = spec.json()["paths"]
    assert "/api/work-items" in paths
    assert "/api/work-items/{item_id}" in paths
    assert "/api/work-items/{item_id}/retry" in paths
    for page in ("/docs", "/redoc"):
        response = anon.get(page)
        assert response.status_code == 200, page
        assert "text/html" in response.headers["content-type"]


# --------------------------------------------------------------------------- authentication


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer not-the-token"},
        {"Authorization": "Bearer "},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "not-even-a-scheme"},
    ],
    ids=["none", "wrong-token", "empty-token", "basic", "garbage"],
)
def test_api_needs_the_local_token(
    anon: TestClient, store: Store, runtime: Runtime, headers: dict[str, str]
) -> None:
    item_id = add_item(store, runtime)
    make_terminal(store, item_id, "failed", error="boom", attempts=5)
    before, audits = row_of(store, item_id), audit_count(store)

    for method, path in [
        ("GET", "/api/work-items"),
        ("GET", f"/api/work-items/{item_id}"),
        ("GET", f"/api/work-items/{uuid.uuid4()}"),
        ("POST", f"/api/work-items/{item_id}/retry"),
    ]:
        response = anon.request(method, path, headers=headers)
        assert response.status_code == 401, (method, path, response.text)
        assert error_of(response)
        assert response.headers.get("www-authenticate", "").lower().startswith("bearer")

    # A rejected retry changed nothing.
    assert row_of(store, item_id) == before
    assert audit_count(store) == audits


def test_wrong_token_is_rejected_with_a_message(anon: TestClient, token: str) -> None:
    response = anon.get("/api/work-items", headers={"Authorization": f"Bearer {token}x"})
    assert response.status_code == 401
    assert "token" in error_of(response).lower()
    response = anon.get("/api/work-items", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200


# --------------------------------------------------------------------------- list and filters


def test_list_empty(client: TestClient) -> None:
    response = client.get("/api/work-items")
    assert response.status_code == 200
    assert response.json() == {"items": [], "next_cursor": None}


def test_list_filters(client: TestClient, store: Store, runtime: Runtime) -> None:
    queued_a = add_item(store, runtime, project="group/alpha", now=T0)
    idle_a = add_item(store, runtime, project="group/alpha", now=T0 + timedelta(seconds=1))
    failed_b = add_item(store, runtime, project="group/beta", now=T0 + timedelta(seconds=2))
    cancelled_b = add_item(store, runtime, project="group/beta", now=T0 + timedelta(seconds=3))
    admitted_c = add_item(store, runtime, project="other/gamma", now=T0 + timedelta(seconds=4))
    other_a = add_item(
        store, runtime, project="group/alpha", now=T0 + timedelta(seconds=5), kind=OtherItem
    )
    set_admission(store, idle_a, "idle")
    set_admission(store, admitted_c, "admitted")
    make_terminal(store, failed_b, "failed", error="boom")
    make_terminal(store, cancelled_b, "cancelled")

    def listed(**params: Any) -> set[str]:
        response = client.get("/api/work-items", params=params)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["next_cursor"] is None
        return set(ids_of(body))

    def ids(*values: uuid.UUID) -> set[str]:
        return {str(value) for value in values}

    everything = ids(queued_a, idle_a, failed_b, cancelled_b, admitted_c, other_a)
    assert listed() == everything

    assert listed(type="chain") == everything - ids(other_a)
    assert listed(type="daemon_test_other") == ids(other_a)
    assert listed(type="no-such-type") == set()

    assert listed(phase="active") == ids(queued_a, idle_a, admitted_c, other_a)
    assert listed(phase="failed") == ids(failed_b)
    assert listed(phase="cancelled") == ids(cancelled_b)
    assert listed(phase="completed") == set()

    assert listed(project="group/alpha") == ids(queued_a, idle_a, other_a)
    assert listed(project="group/beta") == ids(failed_b, cancelled_b)
    # A project is matched exactly, never as a prefix.
    assert listed(project="group") == set()

    assert listed(admission="queued") == ids(queued_a, other_a)
    assert listed(admission="idle") == ids(idle_a)
    assert listed(admission="admitted") == ids(admitted_c)
    assert listed(admission="done") == ids(failed_b, cancelled_b)

    # Filters combine with AND.
    assert listed(project="group/alpha", type="chain", admission="queued") == ids(queued_a)
    assert listed(project="group/beta", phase="failed") == ids(failed_b)
    assert listed(project="group/beta", phase="active") == set()

    # Every listed item carries the same fields as the single-item view.
    response = client.get("/api/work-items", params={"project": "group/beta", "phase": "failed"})
    (shown,) = response.json()["items"]
    assert shown["error"] == "boom"
    assert shown["admission"] == "done"
    assert shown["details"] == {"steps": list(STEPS)}


def test_list_is_newest_first(client: TestClient, store: Store, runtime: Runtime) -> None:
    created = [add_item(store, runtime, now=T0 + timedelta(minutes=i)) for i in range(4)]
    response = client.get("/api/work-items")
    assert ids_of(response.json()) == [str(item_id) for item_id in reversed(created)]


# --------------------------------------------------------------------------- pagination


def test_cursor_pagination_sees_every_item_once_in_order(
    client: TestClient, store: Store, runtime: Runtime
) -> None:
    created = [
        add_item(store, runtime, now=T0 + timedelta(seconds=i, microseconds=123 * i))
        for i in range(7)
    ]
    expected = [str(item_id) for item_id in reversed(created)]

    pages = page_through(client, limit=3)
    assert [len(page) for page in pages] == [3, 3, 1]
    assert [item_id for page in pages for item_id in page] == expected

    # The full listing agrees with the pages.
    assert ids_of(client.get("/api/work-items", params={"limit": 50}).json()) == expected

    # An exact multiple of the page size ends without an empty trailing page.
    pages = page_through(client, limit=7)
    assert pages == [expected]
    pages = page_through(client, limit=1)
    assert [item_id for page in pages for item_id in page] == expected
    assert all(len(page) == 1 for page in pages)


def test_pagination_with_equal_creation_times_is_stable(
    client: TestClient, store: Store, runtime: Runtime
) -> None:
    # Items created in the same instant are ordered by id, never duplicated or lost.
    created = [add_item(store, runtime, now=T0) for _ in range(7)]
    expected = sorted((str(item_id) for item_id in created), key=uuid.UUID, reverse=True)
    pages = page_through(client, limit=3)
    assert [len(page) for page in pages] == [3, 3, 1]
    assert [item_id for page in pages for item_id in page] == expected


def test_pagination_is_stable_while_items_arrive(
    client: TestClient, store: Store, runtime: Runtime
) -> None:
    created = [add_item(store, runtime, now=T0 + timedelta(seconds=i)) for i in range(7)]
    expected = [str(item_id) for item_id in reversed(created)]

    first = client.get("/api/work-items", params={"limit": 3}).json()
    assert ids_of(first) == expected[:3]
    # Newer items submitted between pages do not shift the following pages.
    for i in range(3):
        add_item(store, runtime, now=T0 + timedelta(hours=1, seconds=i))
    second = client.get("/api/work-items", params={"limit": 3, "cursor": first["next_cursor"]})
    assert ids_of(second.json()) == expected[3:6]
    third = client.get(
        "/api/work-items", params={"limit": 3, "cursor": second.json()["next_cursor"]}
    )
    assert ids_of(third.json()) == expected[6:]
    assert third.json()["next_cursor"] is None


def test_pagination_with_filters(client: TestClient, store: Store, runtime: Runtime) -> None:
    alpha, beta = [], []
    for i in range(10):
        project = "group/alpha" if i % 2 else "group/beta"
        item_id = add_item(store, runtime, project=project, now=T0 + timedelta(seconds=i))
        (alpha if i % 2 else beta).append(str(item_id))
    pages = page_through(client, limit=2, project="group/alpha")
    assert [len(page) for page in pages] == [2, 2, 1]
    assert [item_id for page in pages for item_id in page] == list(reversed(alpha))


# --------------------------------------------------------------------------- one item


def test_get_item_with_details_dimensions_and_admission(
    client: TestClient, store: Store, runtime: Runtime
) -> None:
    item_id = add_item(
        store, runtime, project="group/alpha", dedup_key="alert:123", autonomous=True
    )
    later = T0 + timedelta(hours=2)
    with store.sessions() as session:
        item = session.get(WorkItem, item_id)
        assert item is not None
        set_dimension(session, item, "needs_step1", False, detail={"note": "done"})
        set_dimension(session, item, "needs_step2", True, variant="v1", pending_until=later)
        session.commit()
    stored = row_of(store, item_id)

    response = client.get(f"/api/work-items/{item_id}")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == str(item_id)
    assert body["type"] == "chain"
    assert body["project"] == "group/alpha"
    assert body["phase"] == "active"
    assert body["attempts"] == 0
    assert body["error"] is None
    # Admission fields.
    assert body["admission"] == "queued"
    assert body["lane"] == "normal"
    assert body["autonomous"] is True
    assert body["dedup_key"] == "alert:123"
    assert isinstance(body["seq"], int) and body["seq"] == stored["seq"]
    assert body["admitted_at"] is None
    assert body["leased_until"] is None and body["lease_owner"] is None
    assert datetime.fromisoformat(body["created_at"]) == T0
    # Type details, nested.
    assert body["details"] == {"steps": list(STEPS)}
    # Dimensions, ordered by (dimension, variant).
    dims = body["dimensions"]
    assert [(d["dimension"], d["variant"], d["status"]) for d in dims] == [
        ("needs_step1", "", "false"),
        ("needs_step2", "v1", "true"),
    ]
    assert dims[0]["detail"] == {"note": "done"}
    assert dims[0]["pending_until"] is None
    assert datetime.fromisoformat(dims[1]["pending_until"]) == later
    assert dims[1]["detail"] is None
    assert dims[1]["updated_at"]


def test_a_page_shows_each_item_as_its_own_document_does(
    client: TestClient, store: Store, runtime: Runtime
) -> None:
    # The list loads the page's dimensions in one query: each item keeps its own.
    ids = [add_item(store, runtime, now=T0 + timedelta(seconds=i)) for i in range(3)]
    with store.sessions() as session:
        for n, item_id in enumerate(ids):
            item = session.get(WorkItem, item_id)
            assert item is not None
            for step in range(n):
                set_dimension(session, item, f"needs_step{step}", bool(step % 2), detail={"n": n})
        session.commit()

    page = client.get("/api/work-items", params={"limit": 50}).json()["items"]

    assert [item["id"] for item in page] == [str(item_id) for item_id in reversed(ids)]
    assert [len(item["dimensions"]) for item in page] == [2, 1, 0]
    for item in page:
        assert item == client.get(f"/api/work-items/{item['id']}").json()


def test_get_alert_lane_item(client: TestClient, store: Store, runtime: Runtime) -> None:
    item_id = add_item(store, runtime, lane="alert")
    body = client.get(f"/api/work-items/{item_id}").json()
    assert body["lane"] == "alert"
    assert body["autonomous"] is False
    assert body["dedup_key"] is None
    assert body["dimensions"] == []


def test_get_missing_item_is_404_with_message(client: TestClient) -> None:
    missing = uuid.uuid4()
    response = client.get(f"/api/work-items/{missing}")
    assert response.status_code == 404
    message = error_of(response)
    assert str(missing) in message
    assert "not found" in message


def test_unknown_route_is_json_404(client: TestClient) -> None:
    response = client.get("/api/no-such-thing")
    assert response.status_code == 404
    assert error_of(response)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("path", "params", "mentions"),
    [
        ("/api/work-items/not-a-uuid", {}, "item_id"),
        ("/api/work-items/1234", {}, "item_id"),
        ("/api/work-items", {"phase": "bogus"}, "phase"),
        ("/api/work-items", {"phase": "ACTIVE"}, "phase"),
        ("/api/work-items", {"admission": "waiting"}, "admission"),
        ("/api/work-items", {"limit": "0"}, "limit"),
        ("/api/work-items", {"limit": "-1"}, "limit"),
        ("/api/work-items", {"limit": "501"}, "limit"),
        ("/api/work-items", {"limit": "ten"}, "limit"),
        ("/api/work-items", {"cursor": "not-a-cursor"}, "cursor"),
        ("/api/work-items", {"cursor": "!!!!"}, "cursor"),
        ("/api/work-items", {"cursor": "é"}, "cursor"),
    ],
)
def test_bad_input_is_422_with_a_message(
    client: TestClient, path: str, params: dict[str, str], mentions: str
) -> None:
    response = client.get(path, params=params)
    assert response.status_code == 422, response.text
    assert mentions in error_of(response)


def _cursor(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "raw",
    [
        "garbage",
        "2024-05-01T12:00:00+00:00",
        "2024-05-01T12:00:00+00:00|not-a-uuid",
        f"not-a-time|{uuid.UUID(int=1)}",
        f"|{uuid.UUID(int=1)}",
    ],
)
def test_forged_cursor_is_422(client: TestClient, raw: str) -> None:
    response = client.get("/api/work-items", params={"cursor": _cursor(raw)})
    assert response.status_code == 422, response.text
    assert "cursor" in error_of(response)


def test_cursor_without_time_zone_is_not_a_server_error(
    client: TestClient, store: Store, runtime: Runtime
) -> None:
    # A well-formed cursor whose time has no zone was never issued by the API: 422.
    add_item(store, runtime)
    response = client.get(
        "/api/work-items", params={"cursor": _cursor(f"2030-01-01T00:00:00|{uuid.UUID(int=1)}")}
    )
    assert response.status_code == 422, response.text
    assert "cursor" in error_of(response)


@pytest.mark.parametrize(
    "raw",
    [
        f"9999-12-31T23:59:59-23:59|{uuid.UUID(int=1)}",
        f"0001-01-01T00:00:00+23:59|{uuid.UUID(int=1)}",
    ],
    ids=["after-year-9999-in-utc", "before-year-1-in-utc"],
)
def test_cursor_time_out_of_range_is_not_a_server_error(
    client: TestClient, store: Store, runtime: Runtime, raw: str
) -> None:
    add_item(store, runtime)
    response = client.get("/api/work-items", params={"cursor": _cursor(raw)})
    assert response.status_code == 422, response.text
    assert "cursor" in error_of(response)


@pytest.mark.parametrize("field", ["project", "type"])
def test_filter_with_nul_byte_is_not_a_server_error(
    client: TestClient, store: Store, runtime: Runtime, field: str
) -> None:
    add_item(store, runtime)
    response = client.get("/api/work-items", params={field: "group/a\x00b"})
    assert response.status_code == 422, response.text
    assert field in error_of(response)


def test_bad_uuid_on_retry_is_422_and_changes_nothing(
    client: TestClient, store: Store, runtime: Runtime
) -> None:
    item_id = add_item(store, runtime)
    make_terminal(store, item_id, "failed", error="boom", attempts=5)
    before, audits = row_of(store, item_id), audit_count(store)
    response = client.post("/api/work-items/not-a-uuid/retry")
    assert response.status_code == 422
    assert "item_id" in error_of(response)
    assert row_of(store, item_id) == before
    assert audit_count(store) == audits


def test_wrong_method_is_json_405(client: TestClient, store: Store, runtime: Runtime) -> None:
    item_id = add_item(store, runtime)
    response = client.get(f"/api/work-items/{item_id}/retry")
    assert response.status_code == 405
    assert error_of(response)


# --------------------------------------------------------------------------- retry


@pytest.mark.parametrize("phase", ["active", "completed"])
def test_retry_of_a_non_retryable_item_is_409_and_changes_nothing(
    client: TestClient, store: Store, runtime: Runtime, phase: str
) -> None:
    item_id = add_item(store, runtime)
    if phase != "active":
        make_terminal(store, item_id, phase, attempts=2)
    before, audits = row_of(store, item_id), audit_count(store)

    response = client.post(f"/api/work-items/{item_id}/retry")
    assert response.status_code == 409, response.text
    message = error_of(response)
    assert str(item_id) in message
    assert phase in message
    assert "failed or cancelled" in message

    assert row_of(store, item_id) == before
    assert audit_count(store) == audits


def test_retry_of_a_missing_item_is_404_with_message(client: TestClient, store: Store) -> None:
    missing = uuid.uuid4()
    audits = audit_count(store)
    response = client.post(f"/api/work-items/{missing}/retry")
    assert response.status_code == 404
    assert str(missing) in error_of(response)
    assert audit_count(store) == audits


@pytest.mark.parametrize("phase", ["failed", "cancelled"])
def test_retry_brings_a_terminal_item_back(
    client: TestClient, store: Store, runtime: Runtime, phase: str
) -> None:
    item_id = add_item(store, runtime)
    make_terminal(store, item_id, phase, error="executor blew up", attempts=5)
    before = row_of(store, item_id)
    assert before["phase"] == phase
    assert before["admission"] == "done"
    assert before["attempts"] == 5

    response = client.post(f"/api/work-items/{item_id}/retry")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == str(item_id)
    assert body["phase"] == "active"
    assert body["attempts"] == 0
    assert body["error"] is None
    assert body["run_after"] is None
    # The chain decider wants step1, so the item is queued again with a fresh seq.
    assert body["admission"] == "queued"
    assert body["seq"] > before["seq"]

    after = row_of(store, item_id)
    assert after["phase"] == "active"
    assert after["attempts"] == 0
    assert after["error"] is None
    assert after["admission"] == "queued"
    assert after["seq"] == body["seq"]

    # The GET view agrees with the retry response.
    shown = client.get(f"/api/work-items/{item_id}").json()
    assert (shown["phase"], shown["attempts"], shown["error"], shown["seq"]) == (
        "active",
        0,
        None,
        body["seq"],
    )

    # Audited: one "retried" row by the caller, from the terminal phase to active.
    retried = [row for row in audit_rows(store, item_id) if row.event_type == "retried"]
    assert len(retried) == 1
    (row,) = retried
    assert row.actor == "local"
    assert row.old_state["phase"] == phase
    assert row.new_state["phase"] == "active"
    assert row.trigger["source"] == "api"
    # Re-queueing after the retry is audited too, after the retry row.
    kinds = [row.event_type for row in audit_rows(store, item_id)]
    assert kinds.index("retried") < len(kinds) - 1
    assert kinds[-1] == "queued"

    # A second retry finds an active item: 409, nothing changes.
    audits = audit_count(store)
    again = client.post(f"/api/work-items/{item_id}/retry")
    assert again.status_code == 409
    assert "active" in error_of(again)
    assert row_of(store, item_id) == after
    assert audit_count(store) == audits


def test_retry_leaves_other_items_alone(client: TestClient, store: Store, runtime: Runtime) -> None:
    target = add_item(store, runtime, now=T0)
    bystander = add_item(store, runtime, now=T0 + timedelta(seconds=1))
    make_terminal(store, target, "failed", error="boom", attempts=5)
    make_terminal(store, bystander, "failed", error="other", attempts=3)
    before = row_of(store, bystander)
    assert client.post(f"/api/work-items/{target}/retry").status_code == 200
    assert row_of(store, bystander) == before
    assert not [row for row in audit_rows(store, bystander) if row.event_type == "retried"]


def locks_waited_on(store: Store) -> int:
    """Statements of the test's database waiting for a lock."""
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
        )


def test_concurrent_retries_retry_once(runtime: Runtime, store: Store, token: str) -> None:
    """Two simultaneous retries of one failed item: one 200, one 409, one audit row.

    On PostgreSQL the test holds the item's row lock until both requests wait for it,
    so the second request always runs after the first committed.
    """
    item_id = add_item(store, runtime)
    make_terminal(store, item_id, "failed", error="boom", attempts=5)
    app = create_app(runtime)
    codes: list[int] = []

    def post() -> None:
        with TestClient(
            app, raise_server_exceptions=False, headers={"Authorization": f"Bearer {token}"}
        ) as client:
            codes.append(client.post(f"/api/work-items/{item_id}/retry").status_code)

    threads = [threading.Thread(target=post, daemon=True) for _ in range(2)]
    if store.dialect == "postgresql":
        with store.engine.connect() as blocker:
            blocker.execute(select(WorkItem.id).where(WorkItem.id == item_id).with_for_update())
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if locks_waited_on(store) >= 2 or not any(t.is_alive() for t in threads):
                    break
                time.sleep(0.01)
            blocker.rollback()
    else:
        for thread in threads:
            thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)

    retried = [row for row in audit_rows(store, item_id) if row.event_type == "retried"]
    assert sorted(codes) == [200, 409]
    assert len(retried) == 1
    assert row_of(store, item_id)["phase"] == "active"


class _ReadChainOnly:
    """A tier whose one token may read `chain` items only."""

    def authenticate(self, token: str) -> Principal | None:
        if token != "chain-reader":
            return None
        return Principal("reader", "test", permissions={"chain": frozenset({"read"})})


def test_list_pages_only_what_the_caller_may_read(store: Store, runtime: Runtime) -> None:
    chain_ids = [add_item(store, runtime, now=T0 + timedelta(seconds=n)) for n in range(4)]
    for n in range(4):
        add_item(store, runtime, kind=OtherItem, now=T0 + timedelta(seconds=10 + n))
    runtime.authenticator = Authenticator([_ReadChainOnly()])
    headers = {"Authorization": "Bearer chain-reader"}
    with TestClient(create_app(runtime), headers=headers) as reader:
        first = reader.get("/api/work-items", params={"limit": 2}).json()
        second = reader.get(
            "/api/work-items", params={"limit": 2, "cursor": first["next_cursor"]}
        ).json()
        assert (
            reader.get("/api/work-items", params={"type": "daemon_test_other"}).status_code == 403
        )
    seen = [item["id"] for item in first["items"] + second["items"]]
    assert seen == [str(item_id) for item_id in reversed(chain_ids)]
    assert second["next_cursor"] is None


def test_search_finds_items_by_project_error_or_id_prefix(
    runtime: Runtime, client: TestClient
) -> None:
    from tests.engine.helpers import submit
    from wq.engine.items import set_phase
    from wq.engine.models import WorkItem

    ids = {}
    for name, project in (("alpha", "team/Alpha_1"), ("beta", "team/beta"), ("gamma", "x/gamma")):
        intake = submit(runtime.sessions, runtime.registry, runtime.config, project)
        assert intake.item is not None
        ids[name] = str(intake.item.id)
    with runtime.sessions.begin() as session:
        item = session.get(WorkItem, uuid.UUID(ids["gamma"]))
        assert item is not None
        set_phase(session, item, "failed", actor="t", trigger={"source": "t"}, error="Disk FULL")

    def found(text: str) -> set[str]:
        response = client.get("/api/work-items", params={"search": text})
        assert response.status_code == 200, response.text
        return {item["id"] for item in response.json()["items"]}

    assert found("alpha") == {ids["alpha"]}  # any case
    assert found("team/") == {ids["alpha"], ids["beta"]}
    assert found("disk full") == {ids["gamma"]}  # the error
    assert found(ids["beta"][:8]) == {ids["beta"]}  # the id as the TUI shows it
    assert found("a_1") == {ids["alpha"]}  # `_` and `%` are text, not patterns
    assert found("%") == set()
    filtered = client.get("/api/work-items", params={"search": "team/", "project": "team/beta"})
    assert {item["id"] for item in filtered.json()["items"]} == {ids["beta"]}
