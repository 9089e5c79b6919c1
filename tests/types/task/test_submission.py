"""`POST /api/work-items/task`: kinds, scope, lanes, dedup (also under concurrency)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from tests.conftest import Store
from tests.types.task.helpers import KINDS, task_daemon
from wq.engine.config import ConfigError
from wq.engine.models import WorkItem
from wq.engine.registry import TypeRegistry
from wq.types.task import register


def count(runtime: Any) -> int:
    with runtime.sessions() as session:
        return int(session.execute(select(func.count()).select_from(WorkItem)).scalar_one())


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"project": "p", "kind": "nope"},
            "unknown task kind 'nope' (known: args, echo, fail, incident, missing, review, "
            "sleep, slow)",
        ),
        (
            {"project": "p", "kind": "echo", "repository": "p/r"},
            "kind 'echo' is project-scoped: a repository must not be given",
        ),
        (
            {"project": "p", "kind": "review"},
            "kind 'review' is repository-scoped: a repository is required",
        ),
        ({"project": "p", "kind": "echo", "lane": "fast"}, "lane: Input should be"),
        ({"project": "", "kind": "echo"}, "project: must not be empty"),
        ({"project": "p", "kind": "echo", "payload": [1]}, "payload: Input should be"),
        ({"project": "../etc", "kind": "echo"}, "project: must not contain"),
        ({"project": "/p", "kind": "echo"}, "project: must be a path"),
        ({"project": "a\nb", "kind": "echo"}, "project: must not contain whitespace"),
        ({"project": "my project", "kind": "echo"}, "must not contain whitespace, control"),
        ({"project": "g/\u202ep", "kind": "echo"}, "or invisible formatting characters"),
        ({"project": "a\u200bb", "kind": "echo"}, "or invisible formatting characters"),
        (
            {"project": "p", "kind": "review", "repository": "p/../q"},
            "repository: must not contain empty, '.' or '..' segments",
        ),
        # Handed to a kind's program as `{repository}`: `-rf` would read as an option.
        (
            {"project": "p", "kind": "review", "repository": "-rf"},
            "repository: must not have a segment that starts with '-'",
        ),
        ({"project": "g/--help", "kind": "echo"}, "project: must not have a segment"),
        # Said `at least 1 characters`, and the pattern as a regex.
        ({"project": "p", "kind": ""}, "kind: must not be empty"),
        ({"project": "p", "kind": "a\x00"}, "kind: must not contain NUL (\\u0000)"),
        ({"project": "p", "kind": "echo", "extra": 1}, "extra: Extra inputs are not permitted"),
        # PostgreSQL cannot store NUL in JSON: was a 500 there.
        ({"project": "p", "kind": "echo", "payload": {"a\x00": 1}}, "payload"),
        (
            {"project": "p", "kind": "echo", "payload": {"a": ["b\x00"]}},
            "payload: must not contain NUL",
        ),
        (
            {"project": "p", "kind": "echo", "payload": {"a": {"b": "\x00"}}},
            "payload: must not contain NUL",
        ),
        # The kind's payload_schema: checked at the door, not when its program reads it.
        (
            {"project": "p", "kind": "sleep", "payload": {"seconds": "abc"}},
            "payload.seconds: 'abc' is not of type 'number'",
        ),
        (
            {"project": "p", "kind": "sleep", "payload": {"seconds": -1}},
            "payload.seconds: -1 is less than the minimum of 0",
        ),
        # The schema says boolean; 0 is not one.
        ({"project": "p", "kind": "echo", "autonomous": 0}, "autonomous: Input should be"),
    ],
)
def test_bad_submissions_are_422_and_change_nothing(
    store: Store, tmp_path: Path, body: dict[str, Any], message: str
) -> None:
    with task_daemon(store, tmp_path / "runs", start=False) as (runtime, client):
        response = client.post("/api/work-items/task", json=body)
        assert response.status_code == 422, response.text
        assert message in response.json()["error"]
        assert count(runtime) == 0


def test_lane_defaults_to_the_kinds_and_can_be_given(store: Store, tmp_path: Path) -> None:
    with task_daemon(store, tmp_path / "runs", start=False) as (_, client):
        incident = client.post("/api/work-items/task", json={"project": "p", "kind": "incident"})
        assert incident.status_code == 201 and incident.json()["item"]["lane"] == "alert"
        review = client.post(
            "/api/work-items/task",
            json={"project": "p", "kind": "review", "repository": "p/r", "lane": "alert"},
        )
        assert review.json()["item"]["lane"] == "alert"
        assert review.json()["item"]["details"]["repository"] == "p/r"
        echo = client.post("/api/work-items/task", json={"project": "p", "kind": "echo"})
        assert echo.json()["item"]["lane"] == "normal"


def test_dedup_hit_returns_the_existing_task_with_200(store: Store, tmp_path: Path) -> None:
    with task_daemon(store, tmp_path / "runs", start=False) as (runtime, client):
        body = {"project": "p", "kind": "echo", "dedup_key": "k1"}
        first = client.post("/api/work-items/task", json=body)
        assert first.status_code == 201
        second = client.post("/api/work-items/task", json={**body, "payload": {"x": 1}})
        assert second.status_code == 200, second.text
        assert second.json()["action"] == "dedup"
        assert second.json()["item"]["id"] == first.json()["item"]["id"]
        assert count(runtime) == 1


def test_a_kinds_dedup_rule_makes_the_key(store: Store, tmp_path: Path) -> None:
    from tests.types.task.helpers import KINDS

    kinds = {**KINDS, "triage": {**KINDS["review"], "dedup": ["repository", "payload.issue"]}}
    with task_daemon(store, tmp_path / "runs", start=False, kinds=kinds) as (runtime, client):

        def post(issue: int) -> Any:
            return client.post(
                "/api/work-items/task",
                json={
                    "project": "p",
                    "kind": "triage",
                    "repository": "p/r",
                    "payload": {"issue": issue},
                },
            )

        assert post(1).status_code == 201
        assert post(1).json()["action"] == "dedup"
        assert post(2).status_code == 201
        assert count(runtime) == 2


def test_concurrent_duplicates_make_one_task_and_no_500(store: Store, tmp_path: Path) -> None:
    with task_daemon(store, tmp_path / "runs", start=False) as (runtime, client):
        statuses: list[int] = []
        ids: set[str] = set()
        barrier = threading.Barrier(6)

        def post() -> None:
            barrier.wait()
            response = client.post(
                "/api/work-items/task", json={"project": "p", "kind": "echo", "dedup_key": "same"}
            )
            statuses.append(response.status_code)
            if response.status_code < 300:
                ids.add(response.json()["item"]["id"])

        threads = [threading.Thread(target=post) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(statuses) == [200] * 5 + [201], statuses
        assert len(ids) == 1 and count(runtime) == 1


def test_submit_needs_the_submit_permission(store: Store, tmp_path: Path) -> None:
    with task_daemon(store, tmp_path / "runs", start=False) as (runtime, client):
        response = client.post(
            "/api/work-items/task",
            json={"project": "p", "kind": "echo"},
            headers={"Authorization": "Bearer wrong"},
        )
        assert response.status_code == 401
        assert count(runtime) == 0


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"kinds": {"x": {"scope": "team"}}}, "handled_types.task.kinds.x.scope"),
        ({"kinds": {"x": {"scope": "project"}}}, "kinds.x.command: the command runner needs"),
        (
            {"kinds": {"x": {"scope": "project", "runner": "kubernetes", "command": ["a"]}}},
            "kinds.x.runner: runners.kubernetes is not configured",
        ),
        (
            {
                "runners": {"kubernetes": {"namespace": "agents"}},
                "kinds": {"x": {"scope": "project", "runner": "kubernetes"}},
            },
            "kinds.x.job.image: no image (nor runners.kubernetes.image)",
        ),
        ({"grafana": {"kind": "nope"}}, "grafana.kind: unknown kind 'nope'"),
        (
            {"schedules": [{"project": "p", "kind": "echo", "cron": "every day"}]},
            "schedules.0.cron: not a cron expression",
        ),
        ({"surprise": 1}, "handled_types.task.surprise: unknown key"),
        (
            {"kinds": {"x": {"scope": "project", "command": ["x"], "payload_schema": {"type": 5}}}},
            "kinds.x.payload_schema: not a JSON Schema: 5 is not valid",
        ),
        # Argv templates no task could fill: refused at start, not at each task's.
        (
            {"kinds": {"x": {"scope": "project", "command": ["/bin/echo", "{nope}"]}}},
            "kinds.x.command: [1] '{nope}': unknown placeholder {nope}",
        ),
        (
            {"kinds": {"x": {"scope": "project", "command": ["/bin/echo", "{payload[a"]}}},
            "kinds.x.command: [1] '{payload[a': expected '}'",
        ),
        (
            {"kinds": {"x": {"scope": "project", "command": ["{payload.__class__}"]}}},
            "kinds.x.command: [0] '{payload.__class__}': unknown placeholder",
        ),
        (
            {
                "runners": {"kubernetes": {"image": "i", "command": ["run", "{item}"]}},
                "kinds": {"x": {"scope": "project", "runner": "kubernetes"}},
            },
            "runners.kubernetes.command: [1] '{item}': unknown placeholder",
        ),
        # Kinds that could never run, refused at start instead of at every task.
        (
            {"kinds": {"x": {"scope": "project", "command": ["/bin/echo", "{payload!r}"]}}},
            "kinds.x.command: [1] '{payload!r}': no conversion (!r)",
        ),
        (
            {"kinds": {"x": {"scope": "project", "command": ["x"], "env": {"A=B": "1"}}}},
            "kinds.x.env: 'A=B': not a variable name",
        ),
        (
            {"runners": {"command": {"env": {"A": "with\x00nul"}}}},
            "runners.command.env: 'A': its value holds a NUL character",
        ),
        (
            {
                "kinds": {
                    "x": {
                        "scope": "project",
                        "command": ["x"],
                        "payload_schema": {"properties": {"a": {"$ref": "#/$defs/gone"}}},
                    }
                }
            },
            "kinds.x.payload_schema: $ref '#/$defs/gone' does not resolve",
        ),
        (
            {
                "kinds": {
                    "x": {
                        "scope": "project",
                        "command": ["x"],
                        "payload_schema": {"$ref": "https://schemas.example/task.json"},
                    }
                }
            },
            "$ref 'https://schemas.example/task.json' does not resolve (wq fetches no schema",
        ),
        ({"grafana": {"default_project": "../x"}}, "grafana.default_project:"),
        # What the API server refuses on every Job (the fake refuses them too).
        (
            {
                "runners": {"kubernetes": {"namespace": "agents", "image": "i"}},
                "kinds": {
                    "x": {
                        "scope": "project",
                        "runner": "kubernetes",
                        "job": {"metadata": {"namespace": "default"}},
                    }
                },
            },
            "kinds.x.job.metadata.namespace: Jobs are created in runners.kubernetes.namespace"
            " (agents)",
        ),
        (
            {"runners": {"kubernetes": {"image": "i", "resources": {"limits": {"cpu": "two"}}}}},
            "runners.kubernetes.resources.limits.cpu: 'two' is not a quantity",
        ),
        (
            {"runners": {"kubernetes": {"image": "i", "resources": {"requests": {"memory": -1}}}}},
            "runners.kubernetes.resources.requests.memory: '-1': a resource amount cannot be",
        ),
        (
            {
                "runners": {
                    "kubernetes": {
                        "image": "i",
                        "job": {
                            "spec": {
                                "template": {
                                    "spec": {
                                        "containers": [
                                            {
                                                "name": "x",
                                                "resources": {"limits": {"memory": "1 GB"}},
                                            }
                                        ]
                                    }
                                }
                            }
                        },
                    }
                }
            },
            "runners.kubernetes.job.spec.template.spec.containers.0.resources.limits.memory:"
            " '1 GB' is not a quantity",
        ),
    ],
)
def test_bad_settings_name_the_key(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        register(TypeRegistry(), settings, source="wq.yml")
    assert message in str(caught.value)


def test_kubernetes_quantities_and_the_runners_namespace_are_accepted() -> None:
    register(
        TypeRegistry(),
        {
            "runners": {
                "kubernetes": {
                    "namespace": "agents",
                    "image": "i",
                    "resources": {
                        "limits": {"cpu": "500m", "memory": "1Gi"},
                        "requests": {"cpu": 2},
                    },
                    "job": {"metadata": {"namespace": "agents", "labels": {"team": "a"}}},
                }
            },
            "kinds": {"x": {"scope": "project", "runner": "kubernetes"}},
        },
        source="wq.yml",
    )


def test_the_kinds_their_scopes_and_the_payload_rule_are_in_the_openapi_document(
    store: Store, tmp_path: Path
) -> None:
    with task_daemon(store, tmp_path / "runs", start=False) as (_, client):
        schemas = client.get("/openapi.json").json()["components"]["schemas"]
    task = schemas["TaskCreate"]
    assert task["properties"]["kind"]["enum"] == sorted(KINDS)
    rule = task["allOf"][0]
    assert rule["if"]["properties"]["kind"]["enum"] == ["review"]
    assert rule["then"]["required"] == ["repository"]
    assert rule["else"]["properties"]["repository"] == {"type": "null"}
    payload = task["properties"]["payload"]
    assert payload["additionalProperties"] is False
    assert set(payload["patternProperties"]) == {"^[^\\x00]*$"}
    assert "pattern" in task["properties"]["project"]
    (sleep_rule,) = [
        r
        for r in task["allOf"]
        if r.get("if", {}).get("properties", {}).get("kind") == {"const": "sleep"}
    ]
    assert sleep_rule["then"]["properties"]["payload"] == KINDS["sleep"]["payload_schema"]
