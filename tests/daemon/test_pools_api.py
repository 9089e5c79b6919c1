"""The admission views over HTTP: /api/pools, /api/pools/{project}, /api/queue."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from tests.conftest import Store, make_config
from tests.engine.helpers import submit
from tests.support.chain import Behaviour, chain_registry
from wq.daemon.app import create_app
from wq.daemon.runtime import Runtime, build_runtime
from wq.engine.admission import dispatch
from wq.engine.items import set_phase
from wq.engine.models import WorkItem, utcnow

# Spelled as some keyboards and file systems give it: "e" and a combining acute accent.
DECOMPOSED = "e\u0301quipe"
COMPOSED = "\u00e9quipe"
POOLS = {
    "default": {"capacity": 2, "alert_capacity": 1, "queued_autonomous_cap": 3},
    "infra": {"capacity": 1, "alert_capacity": 2},
    DECOMPOSED: {"capacity": 1},
}


@pytest.fixture
def pooled(store: Store) -> Iterator[tuple[Runtime, TestClient]]:
    config = make_config(store.url, pools=POOLS)
    runtime = build_runtime(config, registry=chain_registry(Behaviour()))
    assert runtime.local_tier is not None
    headers = {"Authorization": f"Bearer {runtime.local_tier.token}"}
    with TestClient(create_app(runtime), raise_server_exceptions=False, headers=headers) as client:
        yield runtime, client
    runtime.engine.dispose()


def fill(runtime: Runtime, project: str, count: int, **fields: object) -> list[uuid.UUID]:
    ids = []
    for _ in range(count):
        intake = submit(runtime.sessions, runtime.registry, runtime.config, project, **fields)
        assert intake.item is not None
        ids.append(intake.item.id)
    return ids


def test_pools_show_capacity_usage_and_backlog(pooled: tuple[Runtime, TestClient]) -> None:
    runtime, client = pooled
    fill(runtime, "team/app", 4)
    fill(runtime, "team/app", 2, autonomous=True)
    fill(runtime, "team/app", 1, lane="alert")
    fill(runtime, "infra/dns", 3)
    dispatch(runtime.sessions, runtime.config, clock=utcnow)

    response = client.get("/api/pools")
    assert response.status_code == 200, response.text
    pools = {pool["project"]: pool for pool in response.json()}
    assert set(pools) == {"team/app", "infra/dns"}
    app = pools["team/app"]
    assert (app["capacity"], app["alert_capacity"], app["queued_autonomous_cap"]) == (2, 1, 3)
    assert app["normal"] == {"capacity": 2, "in_flight": 2, "queued": 4}
    assert app["alert"] == {"capacity": 1, "in_flight": 1, "queued": 0}
    assert app["queued_autonomous"] == 2
    assert app["oldest_queued_age_seconds"] >= 0
    dns = pools["infra/dns"]  # the group prefix entry applies to projects below it
    assert (dns["capacity"], dns["alert_capacity"]) == (1, 2)
    assert dns["normal"] == {"capacity": 1, "in_flight": 1, "queued": 2}


def test_one_pool_even_without_work(pooled: tuple[Runtime, TestClient]) -> None:
    _, client = pooled
    response = client.get("/api/pools/infra/new-service")
    assert response.status_code == 200, response.text
    pool = response.json()
    assert pool["project"] == "infra/new-service"
    assert pool["normal"] == {"capacity": 1, "in_flight": 0, "queued": 0}
    assert pool["oldest_queued_at"] is None


def test_a_project_spelled_two_ways_is_one_project(pooled: tuple[Runtime, TestClient]) -> None:
    # Two pools, two queues and two capacities that looked alike in every table.
    runtime, client = pooled
    for spelling in (DECOMPOSED, COMPOSED, DECOMPOSED):
        created = client.post("/api/work-items/chain", json={"project": f"{spelling}/app"})
        assert created.status_code == 201, created.text
        assert created.json()["item"]["project"] == f"{COMPOSED}/app"
    dispatch(runtime.sessions, runtime.config, clock=utcnow)
    for spelling in (DECOMPOSED, COMPOSED):
        pool = client.get(f"/api/pools/{quote(spelling)}/app").json()
        assert pool["project"] == f"{COMPOSED}/app"
        # The pool key's capacity of one, whichever way the key was spelled.
        assert pool["normal"] == {"capacity": 1, "in_flight": 1, "queued": 2}
        listed = client.get("/api/work-items", params={"project": f"{spelling}/app"}).json()
        assert len(listed["items"]) == 3
    assert [pool["project"] for pool in client.get("/api/pools").json()] == [f"{COMPOSED}/app"]


@pytest.mark.parametrize("project", ["a\nb", "\na", "a\n"])
def test_a_pool_path_with_a_newline_is_the_route_not_a_404(
    pooled: tuple[Runtime, TestClient], project: str
) -> None:
    # The route takes the path (a newline does not make it another route): it answers
    # that this is no project path, as a submission would (no item can be in it).
    _, client = pooled
    response = client.get(f"/api/pools/{quote(project)}")
    assert response.status_code == 422, response.text
    assert "path.project: must not contain whitespace" in response.json()["error"]
    assert client.get(f"/api/pools/{quote('a' + chr(0))}").status_code == 422


def test_queue_lists_items_in_admission_order(pooled: tuple[Runtime, TestClient]) -> None:
    runtime, client = pooled
    normal = fill(runtime, "team/app", 5)
    alerts = fill(runtime, "team/app", 3, lane="alert")
    fill(runtime, "team/other", 2)
    dispatch(runtime.sessions, runtime.config, clock=utcnow)

    response = client.get("/api/queue", params={"project": "team/app"})
    assert response.status_code == 200, response.text
    entries = response.json()
    assert [entry["id"] for entry in entries] == [str(i) for i in alerts[1:] + normal[2:]]
    assert [(entry["lane"], entry["position"]) for entry in entries] == [
        ("alert", 1),
        ("alert", 2),
        ("normal", 1),
        ("normal", 2),
        ("normal", 3),
    ]
    seqs = [entry["seq"] for entry in entries if entry["lane"] == "normal"]
    assert seqs == sorted(seqs)

    only_normal = client.get(
        "/api/queue", params={"project": "team/app", "lane": "normal", "limit": 2}
    ).json()
    assert [entry["id"] for entry in only_normal] == [str(i) for i in normal[2:4]]


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/api/queue", {}),
        ("/api/queue", {"project": ""}),
        ("/api/queue", {"project": "a", "lane": "urgent"}),
        ("/api/queue", {"project": "a", "limit": 0}),
        ("/api/queue", {"project": "a\x00b"}),
    ],
)
def test_bad_queue_requests_are_422_with_a_message(
    pooled: tuple[Runtime, TestClient], path: str, params: dict[str, object]
) -> None:
    _, client = pooled
    response = client.get(path, params=params)
    assert response.status_code == 422, response.text
    assert response.json()["error"]


def test_admission_views_need_a_token(pooled: tuple[Runtime, TestClient]) -> None:
    runtime, _ = pooled
    with TestClient(create_app(runtime)) as anonymous:
        for path in ("/api/pools", "/api/pools/x/y", "/api/queue?project=x"):
            response = anonymous.get(path)
            assert response.status_code == 401 and response.json()["error"]


def test_submission_dedup_is_200_with_the_existing_item(
    pooled: tuple[Runtime, TestClient],
) -> None:
    _, client = pooled
    first = client.post("/api/work-items/chain", json={"project": "team/app", "dedup_key": "k1"})
    assert first.status_code == 201, first.text
    assert first.json()["action"] == "created"
    again = client.post("/api/work-items/chain", json={"project": "team/app", "dedup_key": "k1"})
    assert again.status_code == 200, again.text
    assert again.json()["action"] == "dedup"
    assert again.json()["item"]["id"] == first.json()["item"]["id"]


def test_autonomous_submissions_past_the_cap_are_refused(
    pooled: tuple[Runtime, TestClient],
) -> None:
    _, client = pooled
    body = {"project": "team/app", "autonomous": True}
    codes = [client.post("/api/work-items/chain", json=body).status_code for _ in range(4)]
    assert codes == [201, 201, 201, 429]
    refused = client.post("/api/work-items/chain", json=body)
    assert "capped" in refused.json()["error"]
    assert client.post("/api/work-items/chain", json={"project": "team/app"}).status_code == 201
    pool = client.get("/api/pools/team/app").json()
    assert pool["queued_autonomous"] == 3


def test_metrics_are_served_without_auth(pooled: tuple[Runtime, TestClient]) -> None:
    runtime, _ = pooled
    with TestClient(create_app(runtime)) as anonymous:
        # Exactly /metrics, answered directly: scrapers do not all follow redirects.
        response = anonymous.get("/metrics", follow_redirects=False)
    assert response.status_code == 200, response.headers
    assert response.headers["content-type"].startswith("text/plain")
    assert "hummingbird_workqueue_events_total" in response.text


def test_pools_and_queue_show_items_backing_off_and_failed_counts(
    pooled: tuple[Runtime, TestClient],
) -> None:
    runtime, client = pooled
    queued, waiting, admitted, failed = fill(runtime, "team/app", 4)
    later = utcnow() + timedelta(minutes=5)
    with runtime.sessions.begin() as session:
        for item_id, admission, attempts in (
            (waiting, "queued", 2),  # a start that failed twice: back in line, not before later
            (admitted, "admitted", 1),  # an action that failed once, holding its slot
        ):
            item = session.get(WorkItem, item_id)
            assert item is not None
            item.admission, item.attempts, item.run_after = admission, attempts, later
        item = session.get(WorkItem, failed)
        assert item is not None
        set_phase(session, item, "failed", actor="test", trigger={"source": "test"})
    (pool,) = client.get("/api/pools").json()
    assert (pool["backing_off"], pool["failed"]) == (2, 1)
    assert pool["normal"]["queued"] == 2  # backing off is still in line
    entries = {entry["id"]: entry for entry in client.get("/api/queue?project=team/app").json()}
    assert entries[str(waiting)]["attempts"] == 2
    assert datetime.fromisoformat(entries[str(waiting)]["run_after"]) == later
    assert entries[str(queued)]["run_after"] is None
    one = client.get("/api/pools/team/app").json()
    assert (one["backing_off"], one["failed"]) == (2, 1)


def test_dedup_keys_of_one_project_do_not_touch_another_projects_items(
    pooled: tuple[Runtime, TestClient],
) -> None:
    # A caller allowed to submit to one project must not be able to turn another
    # project's submission (an alert, say) into a dedup hit against its own item.
    _, client = pooled
    mine = client.post("/api/work-items/chain", json={"project": "team/app", "dedup_key": "k1"})
    theirs = client.post("/api/work-items/chain", json={"project": "infra/dns", "dedup_key": "k1"})
    assert (mine.status_code, theirs.status_code) == (201, 201), theirs.text
    assert theirs.json()["action"] == "created"
    assert theirs.json()["item"]["project"] == "infra/dns"


def test_retry_of_an_item_whose_key_a_newer_item_holds_is_409(
    pooled: tuple[Runtime, TestClient],
) -> None:
    runtime, client = pooled
    body = {"project": "team/app", "dedup_key": "k1"}
    first = client.post("/api/work-items/chain", json=body).json()["item"]["id"]
    with runtime.sessions.begin() as session:
        item = session.get(WorkItem, uuid.UUID(first))
        assert item is not None
        set_phase(session, item, "failed", actor="test", trigger={"source": "test"})
    second = client.post("/api/work-items/chain", json=body)
    assert second.json()["action"] == "created"
    response = client.post(f"/api/work-items/{first}/retry")
    assert response.status_code == 409, response.text
    assert second.json()["item"]["id"] in response.json()["error"]
    assert client.get(f"/api/work-items/{first}").json()["phase"] == "failed"
