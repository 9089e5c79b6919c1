"""The webhook's lane past the router (`wq.daemon.lanes`): the same layers, handlers and
answers as every other route, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.conftest import Store, make_config
from tests.daemon.test_metrics import G, scrape, value
from tests.types.mr.helpers import mr_registry
from wq.daemon import lanes
from wq.daemon.app import create_app
from wq.daemon.routers import webhooks
from wq.daemon.runtime import Runtime, build_runtime

SECRET_ENV = "WQ_TEST_WEBHOOK_SECRET"
HOOK = "/api/webhooks/gitlab"
GOOD = {"X-Gitlab-Token": "s3cret"}
EVENT = {"object_kind": "push", "project": {"path_with_namespace": "group/app"}}


@pytest.fixture
def runtime(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    monkeypatch.setenv(SECRET_ENV, "s3cret")
    config = make_config(store.url, events={"webhook_secret_env": SECRET_ENV})
    runtime = build_runtime(config, registry=mr_registry(monkeypatch))
    yield runtime
    runtime.engine.dispose()


class Stamp:
    """A layer added to the app after it was built: it marks every answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def stamped(message: dict) -> None:  # type: ignore[type-arg]
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"x-stamp", b"1")]
            await send(message)

        await self.app(scope, receive, stamped)


def test_the_webhook_takes_its_lane_with_every_layer_of_the_app(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken: list[str] = []
    serve = lanes.Lanes.__call__

    async def noting(self: lanes.Lanes, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            taken.append("lane" if (scope["method"], scope["path"]) in self.lanes else "stack")
        await serve(self, scope, receive, send)

    monkeypatch.setattr(lanes.Lanes, "__call__", noting)
    app = create_app(runtime)
    app.add_middleware(Stamp)
    with TestClient(app, raise_server_exceptions=False) as client:
        accepted = client.post(HOOK, json=EVENT, headers=GOOD)
        refused = client.post(HOOK, json=EVENT, headers={"X-Gitlab-Token": "wrong"})
        too_large = client.post(
            HOOK, content=b"x" * (runtime.config.server.max_body_bytes + 1), headers=GOOD
        )
        other_method = client.get(HOOK)
        metrics = scrape(client)
    assert (accepted.status_code, accepted.json()) == (202, {"event": "push", "stored": 0})
    # The app's handlers (the refusal's), its body guard, and the added layer.
    assert refused.status_code == 401 and "X-Gitlab-Token" in refused.json()["error"]
    assert too_large.status_code == 413 and too_large.json()["error"]
    assert all(answer.headers["x-stamp"] == "1" for answer in (accepted, refused, too_large))
    # Another method on the path is the router's: 405, as before.
    assert other_method.status_code == 405 and other_method.headers["x-stamp"] == "1"
    assert taken[:4] == ["lane", "lane", "lane", "stack"]
    # Counted under the route's label like any request.
    assert value(metrics, G + "http_requests_total", method="POST", route=HOOK, status="202") == 1
    assert value(metrics, G + "http_requests_total", method="POST", route=HOOK, status="401") == 1


def test_an_unexpected_error_on_the_lane_is_the_apps_500(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(_: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(webhooks, "event_from_payload", broken)
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        answer = client.post(HOOK, json=EVENT, headers=GOOD)
        assert client.get("/healthz").status_code == 200
    assert answer.status_code == 500
    assert answer.json() == {"error": "internal error; the daemon's log has the details"}
