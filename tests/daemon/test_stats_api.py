"""`GET /api/stats`: buckets counted from known audit rows, the waits of admissions and
ends, the lanes now."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient

from tests.engine.helpers import submit
from wq.daemon.runtime import Runtime
from wq.engine.admission import dispatch
from wq.engine.audit import AuditRecord, audit
from wq.engine.models import WorkItem, utcnow


def add_item(runtime: Runtime, project: str, **times: datetime) -> uuid.UUID:
    """A chain item with the given timestamps, written behind the API's back."""
    intake = submit(runtime.sessions, runtime.registry, runtime.config, project)
    assert intake.item is not None
    with runtime.sessions.begin() as session:
        item = session.get(WorkItem, intake.item.id)
        assert item is not None
        for name, value in times.items():
            setattr(item, name, value)
        item.admission = "done"
    return intake.item.id


def record(runtime: Runtime, item_id: uuid.UUID, at: datetime, event: str, **new: Any) -> None:
    with runtime.sessions.begin() as session:
        audit(
            session,
            AuditRecord(
                event,
                "test",
                item_id,
                old_state={"phase": "active"},
                new_state={"phase": "active", **new},
                trigger={"source": "test"},
                at=at,
            ),
        )


def bucket_at(document: dict[str, Any], at: datetime) -> dict[str, Any]:
    step = timedelta(seconds=document["step_seconds"])
    for bucket in document["buckets"]:
        start = datetime.fromisoformat(bucket["start"])
        if start <= at < start + step:
            return dict(bucket)
    raise AssertionError(f"no bucket holds {at}")


def totals(document: dict[str, Any]) -> dict[str, int]:
    series = ("created", "admitted", "completed", "failed", "retried", "cancelled")
    return {name: sum(b[name] for b in document["buckets"]) for name in series}


def test_buckets_count_each_transition_once_where_it_happened(
    runtime: Runtime, client: TestClient
) -> None:
    now = utcnow()
    # Buckets fall on whole minutes: each moment here is 5 s into one, so that 30 s
    # later is still in the same bucket.
    minute = now.replace(second=0, microsecond=0)
    t = {k: minute - timedelta(minutes=k) + timedelta(seconds=5) for k in (1, 2, 3, 4, 5)}
    done = add_item(runtime, "team/a", queued_at=t[5], admitted_at=t[4])
    failed = add_item(runtime, "team/b", queued_at=t[5], admitted_at=t[4] + timedelta(seconds=30))
    cancelled = add_item(runtime, "team/b", queued_at=t[5])
    # `submit` wrote one `created` row per item now; the rest is placed in the window.
    record(runtime, done, t[4], "admitted", project="team/a")
    record(runtime, failed, t[4] + timedelta(seconds=30), "admitted", project="team/b")
    record(runtime, done, t[3], "phase_changed", phase="completed", project="team/a")
    # The same end seen again by an action's own row is not a second completion.
    record(runtime, done, t[3], "action_completed", phase="completed", project="team/a")
    record(runtime, failed, t[3], "phase_changed", phase="failed", project="team/b")
    record(runtime, failed, t[2], "retried", project="team/b")
    record(runtime, cancelled, t[1], "phase_changed", phase="cancelled", project="team/b")
    # Outside the window: not counted.
    record(runtime, done, now - timedelta(hours=2), "created", project="team/a")

    response = client.get("/api/stats", params={"window": "10m", "step": "1m"})
    assert response.status_code == 200, response.text
    document = response.json()
    assert document["step_seconds"] == 60
    assert len(document["buckets"]) == 10
    assert totals(document) == {
        "created": 3,
        "admitted": 2,
        "completed": 1,
        "failed": 1,
        "retried": 1,
        "cancelled": 1,
    }
    assert bucket_at(document, t[3])["completed"] == 1
    assert bucket_at(document, t[3])["failed"] == 1
    assert bucket_at(document, t[2])["retried"] == 1
    assert bucket_at(document, t[1])["cancelled"] == 1
    # Queued 60 s and 90 s before admission; ran 60 s and 30 s until they ended.
    admissions = bucket_at(document, t[4])
    assert admissions["admitted"] == 2
    assert (admissions["wait_p50_seconds"], admissions["wait_p95_seconds"]) == (60.0, 90.0)
    ends = bucket_at(document, t[3])
    assert (ends["run_p50_seconds"], ends["run_p95_seconds"]) == (30.0, 60.0)

    only_b = client.get("/api/stats", params={"window": "10m", "project": "team/b"}).json()
    assert totals(only_b) == {
        "created": 2,
        "admitted": 1,
        "completed": 0,
        "failed": 1,
        "retried": 1,
        "cancelled": 1,
    }
    by_type = client.get("/api/stats", params={"window": "10m", "type": "chain"}).json()
    assert totals(by_type) == totals(document)


def test_each_admission_keeps_its_own_wait(runtime: Runtime, client: TestClient) -> None:
    """The dispatcher's row carries the wait: an item admitted again later (a retry, a
    new run) does not rewrite the waits of its earlier admissions."""
    # Buckets fall on whole minutes (see above): the two admissions land in two of them.
    minute = utcnow().replace(second=0, microsecond=0)
    queued = minute - timedelta(minutes=5) + timedelta(seconds=5)
    first = add_item(runtime, "team/a", queued_at=queued)
    second = add_item(runtime, "team/b", queued_at=queued)
    with runtime.sessions.begin() as session:
        for item_id in (first, second):
            item = session.get(WorkItem, item_id)
            assert item is not None
            item.admission = "queued"
    admitted = {"team/a": queued + timedelta(seconds=40), "team/b": queued + timedelta(seconds=100)}
    for project, at in admitted.items():
        dispatch(runtime.sessions, runtime.config, [project], clock=lambda at=at: at)
    # The first item is queued and admitted again much later: its item row now says
    # 5 s, its first admission still waited 40 s.
    with runtime.sessions.begin() as session:
        item = session.get(WorkItem, first)
        assert item is not None
        item.queued_at = queued + timedelta(minutes=3)
        item.admitted_at = item.queued_at + timedelta(seconds=5)

    document = client.get("/api/stats", params={"window": "10m", "step": "1m"}).json()
    assert totals(document)["admitted"] == 2
    for at, wait in ((admitted["team/a"], 40.0), (admitted["team/b"], 100.0)):
        bucket = bucket_at(document, at)
        assert (bucket["admitted"], bucket["wait_p50_seconds"]) == (1, wait)


def test_lanes_show_the_queue_now(runtime: Runtime, client: TestClient) -> None:
    for _ in range(2):
        submit(runtime.sessions, runtime.registry, runtime.config, "team/a")
    submit(runtime.sessions, runtime.registry, runtime.config, "team/a", lane="alert")
    lanes = {lane["lane"]: lane for lane in client.get("/api/stats").json()["lanes"]}
    assert lanes["normal"]["depth"] == 2
    assert lanes["alert"]["depth"] == 1
    assert lanes["normal"]["oldest_wait_seconds"] >= 0
    other = client.get("/api/stats", params={"project": "team/z"}).json()["lanes"]
    assert [lane["depth"] for lane in other] == [0, 0]


def test_out_of_range_windows_are_refused_and_steps_fitted(client: TestClient) -> None:
    for query in ("window=8d", "window=169h", "step=5s", "window=1 hour", "window=0m"):
        response = client.get(f"/api/stats?{query}")
        assert response.status_code == 422, query
        assert "window" in response.text or "step" in response.text
    fitted = {
        "window=1h&step=2h": 3600,  # never wider than the window
        "window=7d&step=10s": 420,  # 1440 buckets at most
        "window=30m&step=30s": 30,
    }
    for query, step in fitted.items():
        document = client.get(f"/api/stats?{query}").json()
        assert document["step_seconds"] == step, query
        assert len(document["buckets"]) <= 1440


def test_an_unknown_type_counts_nothing(runtime: Runtime, client: TestClient) -> None:
    submit(runtime.sessions, runtime.registry, runtime.config, "team/a")
    document = client.get("/api/stats", params={"type": "bogus"}).json()
    assert sum(bucket["created"] for bucket in document["buckets"]) == 0
    assert [lane["depth"] for lane in document["lanes"]] == [0, 0]
