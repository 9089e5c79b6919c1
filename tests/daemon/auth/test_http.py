"""Authentication and authorization through the HTTP API, on SQLite and PostgreSQL:
whoami per tier, 403 naming the missing permission, audited refusals (never the
token), X-Forwarded-* ignored on /api/, and POST /oauth/token."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from tests.conftest import Store, make_config
from tests.daemon.auth.conftest import AUD
from tests.daemon.test_item_pages import add_items
from tests.fakes.oidc import FakeOidcIssuer, forge_unsigned
from tests.fakes.openshift import FakeOpenShift
from tests.support.chain import Behaviour, chain_registry
from wq.daemon.app import create_app
from wq.daemon.runtime import Runtime, build_runtime
from wq.engine.models import AuditEntry

ALL = ["read", "retry", "submit"]


@dataclass
class Setup:
    runtime: Runtime
    client: TestClient
    store: Store
    issuer: FakeOidcIssuer
    openshift: FakeOpenShift
    admin: str  # OpenShift tokens
    dev: str
    nobody: str

    def get(self, path: str, token: str | None, **headers: str) -> Any:
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return self.client.get(path, headers=headers)

    def jwt(self, **claims: Any) -> str:
        return self.issuer.token(**{"aud": AUD, **claims})


@pytest.fixture
def setup(
    store: Store, fake_oidc: FakeOidcIssuer, fake_openshift: FakeOpenShift
) -> Iterator[Setup]:
    authorization = {
        "rules": [
            {"groups": ["admins"], "permissions": ["read", "submit", "retry"]},
            {"groups": ["devs"], "permissions": ["read"], "item_types": ["chain"]},
            {"issuer": fake_oidc.issuer, "claims": {"aud": AUD}, "permissions": ["read"]},
            {
                "issuer": fake_oidc.issuer,
                "claims": {"aud": AUD, "sub": "deployer", "project_id": 7},
                "permissions": ["submit"],
                "types": ["chain"],  # the deprecated spelling still works
            },
            {  # a CI job's token: its own project (and those under it) only
                "issuer": fake_oidc.issuer,
                "claims": {"aud": AUD, "project_path": "group/alpha"},
                "permissions": ["submit", "retry"],
                "item_types": ["chain"],
                "projects": ["group/alpha"],
            },
        ],
        "openshift": {"api_url": fake_openshift.url},
    }
    config = make_config(store.url, authorization=authorization)
    runtime = build_runtime(config, registry=chain_registry(Behaviour()))
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        yield Setup(
            runtime=runtime,
            client=client,
            store=store,
            issuer=fake_oidc,
            openshift=fake_openshift,
            admin=fake_openshift.add_user("admin-user", ["admins"]),
            dev=fake_openshift.add_user("dev-user", ["devs", "system:authenticated"]),
            nobody=fake_openshift.add_user("nobody", ["system:authenticated"]),
        )
    runtime.authenticator.close()
    runtime.engine.dispose()


def audit_rows(store: Store) -> list[dict[str, Any]]:
    with store.sessions() as session:
        rows = session.execute(
            select(AuditEntry).where(AuditEntry.event_type.like("auth_%")).order_by(AuditEntry.id)
        ).scalars()
        return [
            {
                "event_type": row.event_type,
                "actor": row.actor,
                "work_item_id": row.work_item_id,
                "trigger": row.trigger,
                "metadata": row.extra,
            }
            for row in rows
        ]


# --------------------------------------------------------------------------- whoami


def test_whoami_of_an_openshift_user(setup: Setup) -> None:
    response = setup.get("/api/whoami", setup.admin)
    assert response.status_code == 200, response.text
    assert response.json() == {
        "authentication": {"tier": "ocp-user", "identity": "admin-user", "groups": ["admins"]},
        "authorization": {
            "effective_permissions": {"chain": ALL},
            "matching_rules": [
                {
                    "groups": ["admins"],
                    "permissions": ["read", "submit", "retry"],
                    "item_types": [],
                }
            ],
        },
    }


def test_whoami_of_a_jwt(setup: Setup) -> None:
    token = setup.jwt(sub="deployer", project_id="7", email="not@shown.example")
    body = setup.get("/api/whoami", token).json()
    assert body["authentication"] == {
        "tier": "jwt",
        "identity": "deployer",
        "issuer": setup.issuer.issuer,
        "claims": {"iss": setup.issuer.issuer, "sub": "deployer", "aud": AUD, "project_id": "7"},
    }
    assert body["authorization"]["effective_permissions"] == {"chain": ["read", "submit"]}
    assert [rule["permissions"] for rule in body["authorization"]["matching_rules"]] == [
        ["read"],
        ["submit"],
    ]
    assert body["authorization"]["matching_rules"][1]["item_types"] == ["chain"]


def test_whoami_of_the_local_token(setup: Setup) -> None:
    assert setup.runtime.local_tier is not None
    body = setup.get("/api/whoami", setup.runtime.local_tier.token).json()
    assert body == {
        "authentication": {"tier": "local", "identity": "local"},
        "authorization": {"effective_permissions": {"chain": ALL}, "matching_rules": []},
    }


def test_whoami_needs_a_token_but_no_permission(setup: Setup) -> None:
    body = setup.get("/api/whoami", setup.nobody).json()
    assert body["authorization"] == {"effective_permissions": {}, "matching_rules": []}
    assert setup.get("/api/whoami", None).status_code == 401


# --------------------------------------------------------------------------- permissions


def test_no_matching_rule_is_403_naming_permission_and_type(setup: Setup) -> None:
    response = setup.get("/api/work-items", setup.nobody)
    assert response.status_code == 403
    assert response.json() == {"error": "nobody lacks the 'read' permission on any type"}
    response = setup.client.post(
        "/api/work-items/chain",
        json={"project": "group/alpha"},
        headers={"Authorization": f"Bearer {setup.dev}"},
    )
    assert response.status_code == 403
    assert response.json() == {"error": "dev-user lacks the 'submit' permission on type 'chain'"}
    assert setup.get("/api/work-items", setup.dev).status_code == 200


def test_a_list_shows_only_the_types_the_caller_may_read(setup: Setup) -> None:
    ids = add_items(setup.store, setup.runtime)  # one of them a chain item
    shown = setup.get("/api/work-items?limit=1", setup.dev).json()
    assert [item["id"] for item in shown["items"]] == [str(ids[1])]
    assert shown["next_cursor"] is None  # the page holds what the caller may read
    everything = setup.get("/api/work-items", setup.admin).json()["items"]
    assert [item["id"] for item in everything] == [str(i) for i in reversed(ids)]


def test_submit_and_retry_follow_the_rules(setup: Setup) -> None:
    deployer = setup.jwt(sub="deployer", project_id=7)
    reader = setup.jwt(sub="someone-else", project_id=7)
    post = setup.client.post
    created = post(
        "/api/work-items/chain",
        json={"project": "group/alpha"},
        headers={"Authorization": f"Bearer {deployer}"},
    )
    assert created.status_code == 201, created.text
    item_id = created.json()["item"]["id"]
    refused = post(
        "/api/work-items/chain",
        json={"project": "group/beta"},
        headers={"Authorization": f"Bearer {reader}"},
    )
    assert refused.status_code == 403
    retry = post(
        f"/api/work-items/{item_id}/retry", headers={"Authorization": f"Bearer {deployer}"}
    )
    assert retry.status_code == 403
    assert retry.json()["error"] == "deployer lacks the 'retry' permission on any type"
    # The admin may retry (409: the item is not failed, but the permission held).
    retry = post(
        f"/api/work-items/{item_id}/retry", headers={"Authorization": f"Bearer {setup.admin}"}
    )
    assert retry.status_code == 409


def test_a_rule_limited_to_projects_acts_on_their_items_only(setup: Setup) -> None:
    ci = {"Authorization": f"Bearer {setup.jwt(sub='ci', project_path='group/alpha')}"}
    admin = {"Authorization": f"Bearer {setup.admin}"}
    post = setup.client.post
    for project in ("group/alpha", "group/alpha/sub"):
        created = post("/api/work-items/chain", json={"project": project}, headers=ci)
        assert created.status_code == 201, created.text
    own = created.json()["item"]["id"]
    refused = post("/api/work-items/chain", json={"project": "group/alphabet"}, headers=ci)
    assert refused.status_code == 403
    assert refused.json()["error"] == (
        "ci lacks the 'submit' permission on type 'chain' in project 'group/alphabet'"
    )
    foreign = post("/api/work-items/chain", json={"project": "group/beta"}, headers=admin)
    foreign_id = foreign.json()["item"]["id"]
    for action in ("cancel", "retry"):
        answer = post(f"/api/work-items/{foreign_id}/{action}", headers=ci)
        assert answer.status_code == 403, answer.text
        assert "in project 'group/beta'" in answer.json()["error"]
    assert post(f"/api/work-items/{own}/cancel", headers=ci).status_code == 200
    assert post(f"/api/work-items/{own}/retry", headers=ci).status_code == 200
    # In bulk: a project named outright that the rule does not cover is refused as such
    # (it answered "no items match", though the caller can read its items), and one
    # it covers is acted on (nothing was ever selected).
    bulk = post("/api/work-items/cancel", json={"project": "group/beta"}, headers=ci)
    assert bulk.status_code == 403, bulk.text
    assert "'retry' permission" in bulk.json()["error"]
    assert "in project 'group/beta'" in bulk.json()["error"]
    fresh = post("/api/work-items/chain", json={"project": "group/alpha"}, headers=ci)
    bulk = post("/api/work-items/cancel", json={"project": "group/alpha"}, headers=ci)
    assert bulk.status_code == 200, bulk.text
    # The first group/alpha item and the fresh one (the other was in group/alpha/sub).
    results = bulk.json()["results"]
    assert [result["outcome"] for result in results] == ["cancelled", "cancelled"], results
    assert results[-1]["id"] == fresh.json()["item"]["id"]
    # By ids alone: each named item is acted on where the rule covers its project, and
    # one elsewhere is refused as one alone is (it was "not found", as if unreadable).
    mine = post("/api/work-items/chain", json={"project": "group/alpha"}, headers=ci)
    mine_id = mine.json()["item"]["id"]
    bulk = post("/api/work-items/cancel", json={"ids": [foreign_id, mine_id]}, headers=ci)
    assert bulk.status_code == 200, bulk.text
    outcomes = {result["id"]: result for result in bulk.json()["results"]}
    assert outcomes[mine_id]["outcome"] == "cancelled"
    assert outcomes[foreign_id]["outcome"] == "skipped"
    assert outcomes[foreign_id]["error"] == (
        "ci lacks the 'retry' permission on type 'chain' in project 'group/beta'"
    )
    shown = setup.get("/api/whoami", setup.jwt(sub="ci", project_path="group/alpha")).json()
    rule = shown["authorization"]["matching_rules"][-1]
    assert (rule["permissions"], rule["projects"]) == (["submit", "retry"], ["group/alpha"])


def make_refusals(setup: Setup) -> list[str]:
    """Four refused requests; the tokens they used."""
    forged = forge_unsigned(setup.issuer.claims(sub="mallory", aud=AUD), kid="rsa-1")
    assert setup.get("/api/work-items", forged).status_code == 401
    assert setup.get("/api/pools", "sha256~unknown-token").status_code == 401
    assert setup.get("/api/whoami", None).status_code == 401
    assert setup.get("/api/queue?project=x", setup.nobody).status_code == 403
    return [forged, "sha256~unknown-token", setup.nobody]


REFUSAL_METADATA = [
    {"method": "GET", "path": "/api/work-items", "route": "/api/work-items", "status": 401},
    {"method": "GET", "path": "/api/pools", "route": "/api/pools", "status": 401},
    {"method": "GET", "path": "/api/whoami", "route": "/api/whoami", "status": 401},
    {
        "method": "GET",
        "path": "/api/queue",
        "route": "/api/queue",
        "status": 403,
        "tier": "ocp-user",
        "identity": "nobody",
        "permission": "read",
    },
]


def test_refusals_are_audited_without_the_token(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="wq.audit"):
        tokens = make_refusals(setup)
    rows = audit_rows(setup.store)
    assert [
        {key: row[key] for key in ("event_type", "actor", "work_item_id", "trigger")}
        for row in rows
    ] == [
        {
            "event_type": "auth_failed",
            "actor": "anonymous",
            "work_item_id": None,
            "trigger": {"source": "api", "reason": "the token's algorithm 'none' is not accepted"},
        },
        {
            "event_type": "auth_failed",
            "actor": "anonymous",
            "work_item_id": None,
            "trigger": {"source": "api", "reason": "the OpenShift API does not accept the token"},
        },
        {
            "event_type": "auth_failed",
            "actor": "anonymous",
            "work_item_id": None,
            "trigger": {"source": "api", "reason": "a Bearer token is required"},
        },
        {
            "event_type": "auth_denied",
            "actor": "ocp:nobody",
            "work_item_id": None,
            "trigger": {
                "source": "api",
                "reason": "nobody lacks the 'read' permission on any type",
            },
        },
    ]
    # Every entry is also logged at INFO once committed, with the request in metadata.
    logged = [
        json.loads(record.getMessage().removeprefix("audit "))
        for record in caplog.records
        if record.name == "wq.audit"
    ]
    assert [entry["metadata"] for entry in logged] == REFUSAL_METADATA
    text = json.dumps(rows, default=str) + caplog.text
    for token in tokens:
        assert token not in text


def test_refusal_metadata_reaches_the_audit_table(setup: Setup) -> None:
    make_refusals(setup)
    assert [row["metadata"] for row in audit_rows(setup.store)] == REFUSAL_METADATA


def test_an_unreachable_openshift_api_is_503(setup: Setup) -> None:
    setup.openshift.stop()
    response = setup.get("/api/whoami", setup.admin)
    assert response.status_code == 503
    assert "OpenShift API" in response.json()["error"] and "unreachable" in response.json()["error"]
    assert response.headers["retry-after"]
    assert setup.admin not in response.text
    last = audit_rows(setup.store)[-1]
    assert (last["event_type"], last["trigger"]["reason"]) == (
        "auth_failed",
        response.json()["error"],
    )
    # JWTs do not depend on OpenShift.
    assert setup.get("/api/whoami", setup.jwt(sub="x")).status_code == 200
    counted = setup.runtime.metrics.registry.get_sample_value
    name = "hummingbird_workqueue_auth_decisions_total"
    assert counted(name, {"tier": "none", "outcome": "unavailable"}) == 1


def test_an_oversized_token_is_401_without_a_lookup(setup: Setup) -> None:
    token = "sha256~" + "x" * (64 * 1024)
    response = setup.get("/api/whoami", token)
    assert response.status_code == 401
    assert response.json() == {"error": "the token is longer than 8192 characters"}
    assert setup.openshift.lookups == 0
    last = audit_rows(setup.store)[-1]
    assert (last["event_type"], last["trigger"]["reason"]) == (
        "auth_failed",
        "the token is longer than 8192 characters",
    )


def test_a_repeated_unknown_token_costs_one_lookup(setup: Setup) -> None:
    for _ in range(3):
        assert setup.get("/api/work-items", "sha256~unknown-token").status_code == 401
    assert setup.openshift.lookups == 1
    assert len(audit_rows(setup.store)) == 3  # every refusal is still audited


# --------------------------------------------------------------------------- proxy headers


def test_forwarded_headers_are_ignored_on_api_paths(setup: Setup) -> None:
    proxy = {
        "X-Forwarded-User": "admin-user",
        "X-Forwarded-Email": "admin@example.com",
        "X-Forwarded-Groups": "admins",
        "X-Forwarded-Access-Token": setup.admin,
        "Forwarded": "for=10.0.0.1;by=proxy",
    }
    # No Bearer token: the forwarded identity and token count for nothing.
    response = setup.get("/api/whoami", None, **proxy)
    assert response.status_code == 401
    assert setup.get("/api/work-items", None, **proxy).status_code == 401
    # With a token, the caller is who the token says, whatever the headers claim.
    body = setup.get("/api/whoami", setup.dev, **proxy).json()
    assert body["authentication"]["identity"] == "dev-user"
    assert setup.get("/api/work-items?type=other", setup.dev, **proxy).status_code == 403


def test_a_credential_sent_twice_is_refused(setup: Setup) -> None:
    """Of two Authorization headers the daemon read the first (a proxy in front of it
    may read the last): a viewer's token first and an admin's second got the viewer."""
    for token in (setup.dev, setup.admin):
        assert setup.get("/api/whoami", token).status_code == 200
    twice = [("Authorization", f"Bearer {setup.dev}"), ("Authorization", f"Bearer {setup.admin}")]
    for path in ("/api/whoami", "/api/work-items"):
        answer = setup.client.get(path, headers=twice)
        assert (answer.status_code, answer.json()) == (
            400,
            {"error": "Authorization is sent more than once"},
        )
    hook = setup.client.post(
        "/api/webhooks/gitlab",
        json={"object_kind": "push"},
        headers=[("X-Gitlab-Token", "a"), ("X-Gitlab-Token", "b")],
    )
    assert (hook.status_code, hook.json()["error"]) == (
        400,
        "X-Gitlab-Token is sent more than once",
    )


# --------------------------------------------------------------------------- /oauth/token


def test_oauth_token_returns_the_forwarded_access_token(setup: Setup) -> None:
    response = setup.client.post("/oauth/token", headers={"X-Forwarded-Access-Token": setup.dev})
    assert response.status_code == 200
    assert response.json() == {"access_token": setup.dev, "token_type": "Bearer"}
    assert response.headers["cache-control"] == "no-store"
    # The bridged token is a Bearer token for the API.
    assert setup.get("/api/whoami", response.json()["access_token"]).status_code == 200


@pytest.mark.parametrize("headers", [{}, {"X-Forwarded-Access-Token": "  "}])
def test_oauth_token_without_the_proxy_header_is_401(setup: Setup, headers: dict[str, str]) -> None:
    response = setup.client.post("/oauth/token", headers=headers)
    assert response.status_code == 401
    assert "X-Forwarded-Access-Token" in response.json()["error"]
    last = audit_rows(setup.store)[-1]
    assert (last["event_type"], last["trigger"]["reason"]) == (
        "auth_failed",
        response.json()["error"],
    )


def test_oauth_token_is_post_only(setup: Setup) -> None:
    response = setup.client.get("/oauth/token", headers={"X-Forwarded-Access-Token": setup.dev})
    assert response.status_code == 405
    assert setup.dev not in response.text
