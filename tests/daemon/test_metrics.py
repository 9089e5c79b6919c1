"""`/metrics` after a scripted scenario: names, labels and values an operator relies on."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tests.conftest import Store, make_config
from tests.support.chain import Behaviour, chain_registry
from tests.support.waiting import wait_for
from wq.daemon.app import create_app
from wq.daemon.http_metrics import (
    MAX_REMEMBERED_PATH_LENGTH,
    MAX_REMEMBERED_PATHS,
    HttpMetrics,
    normalize_template,
)
from wq.daemon.runtime import Runtime, build_runtime
from wq.engine.events import store_event
from wq.engine.metrics import Metrics
from wq.engine.models import WorkItem

G, S = "hummingbird_", "hummingbird_workqueue_"
SECRET_ENV = "WQ_TEST_METRICS_WEBHOOK_SECRET"
SECRET = "metrics-webhook-secret"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(client: TestClient) -> Samples:
    response = client.get("/metrics", follow_redirects=False)
    assert response.status_code == 200, response.text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def series(samples: Samples, name: str) -> list[dict[str, str]]:
    return [dict(labels) for sample_name, labels in samples if sample_name == name]


@pytest.fixture(params=[False, True], ids=["workers", "batch"])
def daemon(
    store: Store, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[tuple[Runtime, TestClient, Behaviour]]:
    """A daemon whose chain actions run on workers, or as cheap actions in the batch."""
    monkeypatch.setenv(SECRET_ENV, SECRET)
    behaviour = Behaviour(fail_times={"step2": 1})
    config = make_config(
        store.url,
        pools={"default": {"capacity": 1}},
        events={"webhook_secret_env": SECRET_ENV},
        metrics={"cache_seconds": 0},
    )
    runtime = build_runtime(config, registry=chain_registry(behaviour, cheap=request.param))
    assert runtime.local_tier is not None
    headers = {"Authorization": f"Bearer {runtime.local_tier.token}"}
    with TestClient(create_app(runtime), raise_server_exceptions=False, headers=headers) as client:
        yield runtime, client, behaviour
    if runtime.manager is not None:
        runtime.manager.stop(grace=2)
    runtime.engine.dispose()


def admission_of(runtime: Runtime, item_id: str) -> str:
    with runtime.read_sessions() as session:
        item = session.get(WorkItem, uuid.UUID(item_id))
        assert item is not None
        return item.admission


def test_a_scripted_scenario_shows_in_the_metrics(
    daemon: tuple[Runtime, TestClient, Behaviour],
) -> None:
    runtime, client, behaviour = daemon
    ids = []
    for _ in range(3):
        created = client.post("/api/work-items/chain", json={"project": "team/app"})
        assert created.status_code == 201, created.text
        ids.append(created.json()["item"]["id"])

    # Nothing runs yet: the whole backlog waits in the pool's one-slot normal lane.
    before = scrape(client)
    app = {"project": "team/app", "lane": "normal"}
    assert value(before, S + "pool_queued", **app) == 3
    assert value(before, S + "pool_in_flight", **app) == 0
    assert value(before, S + "pool_capacity", **app) == 1
    assert value(before, S + "items", type="chain", phase="active", admission="queued") == 3

    runtime.start_processing()
    wait_for(
        lambda: all(admission_of(runtime, item_id) == "idle" for item_id in ids),
        timeout=30,
        message="the three items to run their chain",
    )
    with runtime.sessions.begin() as session:  # an event for the first item: redo step3
        store_event(session, uuid.UUID(ids[0]), "redo", {})
    wait_for(
        lambda: (
            behaviour.actions_of(uuid.UUID(ids[0])).count("step3") == 2
            and admission_of(runtime, ids[0]) == "idle"
        ),
        timeout=30,
        message="the event to be applied and step3 to run again",
    )
    good, bad = {"X-Gitlab-Token": SECRET}, {"X-Gitlab-Token": "wrong"}
    hook = client.post("/api/webhooks/gitlab", json={"object_kind": "push"}, headers=good)
    assert hook.status_code == 202, hook.text
    assert client.post("/api/webhooks/gitlab", json={}, headers=bad).status_code == 401
    stranger = client.get("/api/work-items", headers={"Authorization": "Bearer not-a-token"})
    assert stranger.status_code == 401
    assert client.post(f"/api/work-items/{ids[2]}/cancel").status_code == 200
    assert client.post(f"/api/work-items/{ids[2]}/retry").status_code == 200
    assert client.get(f"/api/work-items/{ids[1]}").status_code == 200
    assert client.get(f"/api/work-items/{uuid.uuid4()}/history").status_code == 404
    assert client.get(f"/no/such/{uuid.uuid4()}").status_code == 404
    assert client.request("BREW", "/api/work-items").status_code == 405
    for probe in ("/healthz", "/readyz", "/metrics"):
        assert client.get(probe).status_code == 200
    assert runtime.manager is not None
    wait_for(
        lambda: value(scrape(client), S + "sweep_runs_total", outcome="ok"),
        message="the start-up sweep",
    )

    after = scrape(client)
    # Intake and admission: three submissions, four admissions (the redo queued again).
    assert value(after, S + "submissions_total", type="chain", outcome="created") == 3
    assert value(after, S + "admission_wait_seconds_count", lane="normal") == 4
    waited = value(after, S + "admission_wait_seconds_sum", lane="normal")
    assert waited is not None and waited > 0  # the second and third waited for the slot
    # Processing: step2 failed once and was retried; step3 ran again for the event.
    runs = S + "executor_runs_total"
    assert value(after, runs, type="chain", action="step1", outcome="succeeded") == 3
    assert value(after, runs, type="chain", action="step2", outcome="error") == 1
    assert value(after, runs, type="chain", action="step2", outcome="succeeded") == 3
    assert value(after, runs, type="chain", action="step3", outcome="succeeded") == 4
    duration = S + "executor_run_duration_seconds_count"
    assert value(after, duration, type="chain", action="step2") == 4
    claimed = value(after, S + "claims_per_pass_sum")
    assert claimed is not None and claimed >= 5
    assert value(after, S + "phase_transitions_total", type="chain", phase="cancelled") == 1
    assert value(after, S + "phase_transitions_total", type="chain", phase="active") == 1
    # Events: one stored and applied; one from the webhook that concerned no item.
    assert value(after, S + "event_applications_total", outcome="applied") == 1
    assert value(after, S + "events_total", source="webhook", outcome="received") == 1
    assert value(after, S + "events_total", source="webhook", outcome="unmatched") == 1
    # Auth: the wrong webhook secret and the unknown token, and the local token's allows.
    decisions = S + "auth_decisions_total"
    assert value(after, decisions, tier="webhook", outcome="failed") == 1
    assert value(after, decisions, tier="none", outcome="failed") == 1
    assert (value(after, decisions, tier="local", outcome="allowed") or 0) >= 5
    # Database gauges: all three items are active and idle again, nothing waits.
    assert value(after, S + "items", type="chain", phase="active", admission="idle") == 3
    assert value(after, S + "pool_queued", **app) == 0  # idle now, still a series
    assert value(after, S + "pool_in_flight", **app) == 0
    assert value(after, S + "pending_events") == 0

    # HTTP: route templates with `{id}`, unmatched paths and odd methods folded, no probes.
    requests = G + "http_requests_total"
    assert value(after, requests, method="POST", route="/api/work-items/chain", status="201") == 3
    assert value(after, requests, method="GET", route="/api/work-items/{id}", status="200") == 1
    history = "/api/work-items/{id}/history"
    assert value(after, requests, method="GET", route=history, status="404") == 1
    assert value(after, requests, method="GET", route="unmatched", status="404") == 1
    assert value(after, requests, method="other", route="/api/work-items", status="405") == 1
    assert value(after, requests, method="GET", route="/api/work-items", status="401") == 1
    hook_route = "/api/webhooks/gitlab"
    assert value(after, requests, method="POST", route=hook_route, status="401") == 1
    assert value(after, requests, method="POST", route=hook_route, status="202") == 1
    for name in (requests, G + "http_request_duration_seconds_count"):
        routes = {labels["route"] for labels in series(after, name)}
        assert not routes & {"/healthz", "/readyz", "/metrics"}, routes
        assert not any(part in route for route in routes for part in ids), routes
    count = G + "http_request_duration_seconds_count"
    assert value(after, count, method="POST", route="/api/work-items/chain") == 3
    in_progress = G + "http_requests_in_progress"
    assert value(after, in_progress, method="POST", route="/api/work-items/chain") == 0


def test_prefixes_come_from_the_config(store: Store) -> None:
    config = make_config(store.url, metrics={"prefix": "acme_", "service_prefix": "acme_queue_"})
    runtime = build_runtime(config, registry=chain_registry(Behaviour()))
    try:
        with TestClient(create_app(runtime)) as client:
            client.get("/api/whoami")
            text = client.get("/metrics").text
    finally:
        runtime.engine.dispose()
    assert 'acme_http_requests_total{method="GET",route="/api/whoami",status="401"} 1.0' in text
    assert "acme_queue_executor_runs_total" in text and "acme_queue_pool_queued" in text
    assert "hummingbird_" not in text


@pytest.mark.parametrize(
    ("template", "label"),
    [
        ("/api/work-items/{item_id}", "/api/work-items/{id}"),
        ("/api/work-items/{item_id}/history", "/api/work-items/{id}/history"),
        ("/api/pools/{project:path}", "/api/pools/{project}"),
        ("/api/work-items/{item_type}", "/api/work-items/{item_type}"),
        ("/things/{id}", "/things/{id}"),
    ],
)
def test_route_templates_become_labels(template: str, label: str) -> None:
    assert normalize_template(template) == label


def test_paths_under_a_parameter_stay_one_route(
    daemon: tuple[Runtime, TestClient, Behaviour],
) -> None:
    _, client, _ = daemon
    for project in ("a/b", "c/d/e", "f"):
        assert client.get(f"/api/pools/{project}").status_code == 200
    samples: Any = scrape(client)
    routes = {labels["route"] for labels in series(samples, G + "http_requests_total")}
    assert routes == {"/api/pools/{project}"}


def test_labels_are_remembered_per_method_and_path_and_stay_bounded() -> None:
    async def ok(_request: Any) -> PlainTextResponse:
        return PlainTextResponse("")

    routes = [
        Route("/api/work-items/chain", ok, methods=["POST"]),
        Route("/api/work-items/{item_id}", ok, methods=["GET"]),
        Route("/api/webhooks/gitlab", ok, methods=["POST"]),
    ]
    metrics = HttpMetrics(PlainTextResponse(""), metrics=Metrics(), routes=routes)

    def label(method: str, path: str) -> str:
        return metrics.label({"type": "http", "method": method, "path": path, "root_path": ""})

    for _ in range(2):  # answered the same whether remembered or not
        assert label("POST", "/api/webhooks/gitlab") == "/api/webhooks/gitlab"
        assert label("GET", "/api/webhooks/gitlab") == "/api/webhooks/gitlab"  # a 405
        assert label("GET", "/api/work-items/1") == "/api/work-items/{id}"
        assert label("POST", "/api/work-items/chain") == "/api/work-items/chain"
        assert label("GET", "/api/work-items/chain") == "/api/work-items/{id}"
        assert label("GET", "/nowhere") == "unmatched"
    for number in range(3 * MAX_REMEMBERED_PATHS):  # ids without end in the paths
        assert label("GET", f"/api/work-items/{number}") == "/api/work-items/{id}"
    assert len(metrics._labels) <= MAX_REMEMBERED_PATHS
    metrics._labels.clear()
    long_id = "7" * MAX_REMEMBERED_PATH_LENGTH
    assert label("GET", f"/api/work-items/{long_id}") == "/api/work-items/{id}"
    assert not metrics._labels  # matched, not kept
    assert label("POST", "/api/webhooks/gitlab") == "/api/webhooks/gitlab"
