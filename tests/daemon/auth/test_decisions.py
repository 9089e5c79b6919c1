"""Auth decisions through the HTTP API, on SQLite and PostgreSQL: every allow and deny
is logged (tier, identity, route template, permission, decision; never the token);
state-changing allows and all refusals leave an audit row; the actor is qualified by
its tier; ids cannot be probed; a caller without read learns only id and phase."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from tests.conftest import Store, make_config
from tests.daemon.auth.conftest import AUD
from tests.fakes.oidc import FakeOidcIssuer
from tests.fakes.openshift import FakeOpenShift
from tests.support.chain import Behaviour, chain_registry, new_chain_item
from wq.daemon.app import create_app
from wq.daemon.auth.audit import PATH_MAX, FailureBudget
from wq.daemon.runtime import Runtime, build_runtime
from wq.engine.items import set_phase, submit
from wq.engine.models import AuditEntry, WorkItem, utcnow

SECRET_ENV = "WQ_TEST_DECISIONS_WEBHOOK_SECRET"
SECRET = "webhook-secret-value"


class HiddenItem(WorkItem):
    """An item of a type no rule below lets anyone but the admins read."""

    __mapper_args__ = {"polymorphic_identity": "auth_test_hidden"}  # noqa: RUF012


@dataclass
class Api:
    runtime: Runtime
    client: TestClient
    store: Store
    issuer: FakeOidcIssuer
    tokens: dict[str, str]  # name -> token

    def call(self, method: str, path: str, who: str | None, **kwargs: Any) -> Any:
        headers = kwargs.pop("headers", {})
        if who is not None:
            headers["Authorization"] = f"Bearer {self.tokens[who]}"
        return self.client.request(method, path, headers=headers, **kwargs)

    def jwt(self, sub: str) -> str:
        return self.issuer.token(sub=sub, aud=AUD)

    def item(self, kind: type[WorkItem] | None = None, phase: str | None = None) -> uuid.UUID:
        """A stored item (chain unless `kind`), made terminal when `phase` is given."""
        project = "group/alpha"
        with self.store.sessions() as session:
            item = (
                new_chain_item(project)
                if kind is None
                else kind(project=project, lane="normal", autonomous=False)
            )
            intake = submit(
                session,
                item,
                registry=self.runtime.registry,
                pool=self.store.config.pool_for(project),
                now=utcnow(),
                actor="test",
                trigger={"source": "test"},
            )
            assert intake.item is not None
            if phase is not None:
                set_phase(session, intake.item, phase, actor="test", trigger={"source": "test"})
            session.commit()
            return intake.item.id


@pytest.fixture
def api(
    store: Store,
    fake_oidc: FakeOidcIssuer,
    fake_openshift: FakeOpenShift,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Api]:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    issuer = fake_oidc.issuer
    authorization = {
        "rules": [
            {"groups": ["admins"], "permissions": ["read", "submit", "retry"]},
            {"groups": ["chain-readers"], "permissions": ["read"], "item_types": ["chain"]},
            {"groups": ["chain-ops"], "permissions": ["read", "retry"], "item_types": ["chain"]},
            {"groups": ["retriers"], "permissions": ["retry"]},
            {"groups": ["chain-submitters"], "permissions": ["submit"], "item_types": ["chain"]},
            {"groups": ["mr-retriers"], "permissions": ["retry"], "item_types": ["mr"]},
            # JWT subjects that look like the engine's and the local token's names
            {
                "issuer": issuer,
                "claims": {"aud": AUD, "sub": ["system", "local", "deployer"]},
                "permissions": ["submit", "read"],
                "item_types": ["chain"],
            },
        ],
        "openshift": {"api_url": fake_openshift.url},
    }
    config = make_config(
        store.url, authorization=authorization, events={"webhook_secret_env": SECRET_ENV}
    )
    runtime = build_runtime(config, registry=chain_registry(Behaviour()))
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        assert runtime.local_tier is not None
        tokens = {
            "admin": fake_openshift.add_user("admin-user", ["admins"]),
            "reader": fake_openshift.add_user("reader", ["chain-readers"]),
            "ops": fake_openshift.add_user("ops", ["chain-ops"]),
            "retrier": fake_openshift.add_user("retrier", ["retriers"]),
            "submitter": fake_openshift.add_user("submitter", ["chain-submitters"]),
            "mr-ops": fake_openshift.add_user("mr-ops", ["chain-readers", "mr-retriers"]),
            "nobody": fake_openshift.add_user("nobody", ["system:authenticated"]),
            "local": runtime.local_tier.token,
        }
        api = Api(runtime, client, store, fake_oidc, tokens)
        for sub in ("system", "local", "deployer", "stranger"):
            tokens[f"jwt-{sub}"] = api.jwt(sub)
        yield api
    runtime.authenticator.close()
    runtime.engine.dispose()


def auth_rows(store: Store) -> list[AuditEntry]:
    with store.sessions() as session:
        query = select(AuditEntry).where(AuditEntry.event_type.like("auth_%"))
        return list(session.execute(query.order_by(AuditEntry.id)).scalars())


def rows_of(store: Store, item_id: uuid.UUID) -> list[AuditEntry]:
    with store.sessions() as session:
        query = select(AuditEntry).where(AuditEntry.work_item_id == item_id)
        return list(session.execute(query.order_by(AuditEntry.id)).scalars())


def decisions(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [
        json.loads(record.getMessage().removeprefix("auth "))
        for record in caplog.records
        if record.name == "wq.auth"
    ]


# --------------------------------------------------------------------------- point 11: probing


@pytest.mark.parametrize("who", ["nobody", "retrier"])
def test_a_caller_without_read_cannot_tell_existing_ids_from_unknown_ones(
    api: Api, who: str
) -> None:
    existing = api.item()
    unknown = uuid.uuid4()
    answers = [api.call("GET", f"/api/work-items/{i}", who) for i in (existing, unknown)]
    assert [a.status_code for a in answers] == [403, 403]
    assert answers[0].json() == answers[1].json()
    assert answers[0].json() == {"error": f"{who} lacks the 'read' permission on any type"}


def test_an_item_of_a_type_the_caller_may_not_read_answers_like_an_unknown_id(
    api: Api,
) -> None:
    hidden = api.item(HiddenItem, phase="failed")
    unknown = uuid.uuid4()
    for method, path, who in [
        ("GET", "/api/work-items/{}", "reader"),
        ("POST", "/api/work-items/{}/retry", "ops"),
    ]:
        found = api.call(method, path.format(hidden), who)
        missing = api.call(method, path.format(unknown), who)
        assert (found.status_code, missing.status_code) == (404, 404), (method, who)
        assert found.json() == {"error": f"work item {hidden} not found"}
        assert missing.json() == {"error": f"work item {unknown} not found"}
        assert set(found.headers) == set(missing.headers)
    with api.store.sessions() as session:
        item = session.get(WorkItem, hidden)
        assert item is not None and item.phase == "failed"  # the retry changed nothing
    # The refusals are denials in the audit trail, with the item they concern.
    denied = [row for row in auth_rows(api.store) if row.work_item_id == hidden]
    assert [(row.event_type, row.actor, row.extra["status"]) for row in denied] == [
        ("auth_denied", "ocp:reader", 404),
        ("auth_denied", "ocp:ops", 404),
    ]


def test_a_caller_who_may_read_the_type_is_told_what_it_lacks(api: Api) -> None:
    item = api.item(phase="failed")
    response = api.call("POST", f"/api/work-items/{item}/retry", "reader")
    assert response.status_code == 403
    assert response.json() == {"error": "reader lacks the 'retry' permission on any type"}
    response = api.call("POST", f"/api/work-items/{item}/retry", "jwt-deployer")
    assert response.status_code == 403
    # Retry on another type only: refused on the item's type, after the lookup.
    response = api.call("POST", f"/api/work-items/{item}/retry", "mr-ops")
    assert response.status_code == 403
    assert response.json() == {"error": "mr-ops lacks the 'retry' permission on type 'chain'"}
    last = auth_rows(api.store)[-1]
    assert (last.event_type, last.work_item_id, last.extra["item_type"]) == (
        "auth_denied",
        item,
        "chain",
    )


def test_a_retry_only_caller_learns_only_id_and_phase(api: Api) -> None:
    item = api.item(phase="failed")
    response = api.call("POST", f"/api/work-items/{item}/retry", "retrier")
    assert response.status_code == 200, response.text
    assert response.json() == {"id": str(item), "phase": "active"}
    # A caller who may read still gets the whole item.
    again = api.item(phase="failed")
    response = api.call("POST", f"/api/work-items/{again}/retry", "ops")
    assert response.status_code == 200
    assert response.json()["id"] == str(again) and response.json()["type"] == "chain"
    assert "attempts" in response.json()


def test_a_submit_only_caller_learns_only_id_and_phase_of_the_item_it_meets(api: Api) -> None:
    """A dedup key (often made of the content) finds another caller's item: a caller who
    may not read the type must not learn its payload, error or dimensions from it."""
    body = {"project": "group/alpha", "dedup_key": "dk-1"}
    first = api.call("POST", "/api/work-items/chain", "local", json=body)
    assert first.status_code == 201, first.text
    item_id = first.json()["item"]["id"]
    hit = api.call("POST", "/api/work-items/chain", "submitter", json=body)
    assert hit.status_code == 200, hit.text
    assert hit.json() == {"action": "dedup", "item": {"id": item_id, "phase": "active"}}
    made = api.call("POST", "/api/work-items/chain", "submitter", json={"project": "group/b"})
    assert made.status_code == 201, made.text
    assert set(made.json()["item"]) == {"id", "phase"}
    # A caller who may read still gets the whole item.
    seen = api.call("POST", "/api/work-items/chain", "jwt-deployer", json=body)
    assert seen.json()["item"]["id"] == item_id and "dimensions" in seen.json()["item"]


def test_stats_count_only_the_types_the_caller_may_read(api: Api) -> None:
    api.item()
    api.item(HiddenItem)

    def created(who: str) -> tuple[int, int]:
        response = api.call("GET", "/api/stats", who, params={"window": "1h", "step": "1h"})
        assert response.status_code == 200, response.text
        document = response.json()
        return sum(b["created"] for b in document["buckets"]), document["lanes"][1]["depth"]

    assert created("admin") == (2, 2)
    assert created("reader") == (1, 1)  # the hidden type is neither counted nor queued


def test_a_bulk_action_on_a_type_named_outright_needs_its_permission(api: Api) -> None:
    failed = api.item(phase="failed")
    body = {"type": "chain", "dry_run": True}
    # Retry on another type only: told so, not "no items match".
    refused = api.call("POST", "/api/work-items/retry", "mr-ops", json=body)
    assert refused.status_code == 403, refused.text
    assert "retry" in refused.json()["error"] and "chain" in refused.json()["error"]
    answered = api.call("POST", "/api/work-items/retry", "ops", json=body)
    assert answered.status_code == 200, answered.text
    assert [r["id"] for r in answered.json()["results"]] == [str(failed)]


# --------------------------------------------------------------------------- point 12: actor


def test_the_audit_actor_is_qualified_by_tier(api: Api) -> None:
    issuer = api.issuer.issuer
    created = {}
    for who in ("jwt-system", "jwt-local", "local", "admin"):
        response = api.call("POST", "/api/work-items/chain", who, json={"project": f"group/{who}"})
        assert response.status_code == 201, response.text
        created[who] = uuid.UUID(response.json()["item"]["id"])
    expected = {
        "jwt-system": (f"jwt:{issuer}#system", "system", "jwt"),
        "jwt-local": (f"jwt:{issuer}#local", "local", "jwt"),
        "local": ("local", "local", "local"),
        "admin": ("ocp:admin-user", "admin-user", "ocp-user"),
    }
    # The decision is taken before the item exists: the allow rows come in call order.
    allows = [row for row in auth_rows(api.store) if row.event_type == "auth_allowed"]
    for (who, (actor, identity, tier)), allowed in zip(expected.items(), allows, strict=True):
        # The item's own rows name the qualified actor, never a bare `system` or `local`.
        assert {row.actor for row in rows_of(api.store, created[who])} == {actor}, who
        assert (allowed.actor, allowed.extra["identity"], allowed.extra["tier"]) == (
            actor,
            identity,
            tier,
        )
    # A denied JWT is qualified too.
    response = api.call("POST", "/api/work-items/chain", "jwt-stranger", json={"project": "x/y"})
    assert response.status_code == 403
    last = auth_rows(api.store)[-1]
    assert (last.event_type, last.actor, last.extra["identity"]) == (
        "auth_denied",
        f"jwt:{issuer}#stranger",
        "stranger",
    )


# --------------------------------------------------------------------------- point 10: audit


def test_every_decision_is_logged_without_the_token(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    item = api.item(phase="failed")
    with caplog.at_level(logging.DEBUG, logger="wq.auth"):
        assert api.call("GET", f"/api/work-items/{item}", "admin").status_code == 200
        assert api.call("GET", "/api/work-items", "reader").status_code == 200
        assert api.call("GET", "/api/whoami", "nobody").status_code == 200
        assert api.call("GET", "/api/pools", "nobody").status_code == 403
        assert api.call("GET", "/api/pools", None).status_code == 401
        assert api.call("POST", f"/api/work-items/{item}/retry", "ops").status_code == 200
    lines = decisions(caplog)
    keys = ("decision", "tier", "identity", "method", "route", "permission", "item_type")
    assert [{key: line.get(key) for key in keys} for line in lines] == [
        {
            "decision": "allow",
            "tier": "ocp-user",
            "identity": "admin-user",
            "method": "GET",
            "route": "/api/work-items/{item_id}",
            "permission": "read",
            "item_type": "chain",
        },
        {
            "decision": "allow",
            "tier": "ocp-user",
            "identity": "reader",
            "method": "GET",
            "route": "/api/work-items",
            "permission": "read",
            "item_type": None,
        },
        {
            "decision": "allow",
            "tier": "ocp-user",
            "identity": "nobody",
            "method": "GET",
            "route": "/api/whoami",
            "permission": None,
            "item_type": None,
        },
        {
            "decision": "deny",
            "tier": "ocp-user",
            "identity": "nobody",
            "method": "GET",
            "route": "/api/pools",
            "permission": "read",
            "item_type": None,
        },
        {
            "decision": "deny",
            "tier": None,
            "identity": None,
            "method": "GET",
            "route": "/api/pools",
            "permission": None,
            "item_type": None,
        },
        {
            "decision": "allow",
            "tier": "ocp-user",
            "identity": "ops",
            "method": "POST",
            "route": "/api/work-items/{item_id}/retry",
            "permission": "retry",
            "item_type": "chain",
        },
    ]
    assert [line["actor"] for line in lines] == [
        "ocp:admin-user",
        "ocp:reader",
        "ocp:nobody",
        "ocp:nobody",
        "anonymous",
        "ocp:ops",
    ]
    assert lines[3]["status"] == 403 and lines[4]["status"] == 401
    for token in api.tokens.values():
        assert token not in caplog.text
    # The same decisions, counted by tier and outcome for Prometheus.
    counted = api.runtime.metrics.registry.get_sample_value
    name = "hummingbird_workqueue_auth_decisions_total"
    assert counted(name, {"tier": "ocp-user", "outcome": "allowed"}) == 4
    assert counted(name, {"tier": "ocp-user", "outcome": "denied"}) == 1
    assert counted(name, {"tier": "none", "outcome": "failed"}) == 1


def test_state_changing_allows_and_all_refusals_leave_rows_reads_do_not(api: Api) -> None:
    item = api.item(phase="failed")
    assert api.call("GET", f"/api/work-items/{item}", "admin").status_code == 200
    assert api.call("GET", "/api/work-items", "admin").status_code == 200
    assert auth_rows(api.store) == []  # allowed reads: a log line only
    submitted = api.call("POST", "/api/work-items/chain", "jwt-deployer", json={"project": "g/a"})
    assert submitted.status_code == 201
    assert api.call("POST", f"/api/work-items/{item}/retry", "admin").status_code == 200
    assert api.call("POST", f"/api/work-items/{item}/retry", "nobody").status_code == 403
    rows = auth_rows(api.store)
    issuer = api.issuer.issuer
    assert [(row.event_type, row.actor, row.work_item_id) for row in rows] == [
        ("auth_allowed", f"jwt:{issuer}#deployer", None),  # taken before the item exists
        ("auth_allowed", "ocp:admin-user", item),
        ("auth_denied", "ocp:nobody", None),
    ]
    assert rows[0].extra == {
        "method": "POST",
        "route": "/api/work-items/chain",
        "tier": "jwt",
        "identity": "deployer",
        "permission": "submit",
        "item_type": "chain",
    }
    assert rows[1].extra["route"] == "/api/work-items/{item_id}/retry"
    assert rows[1].extra["item_id"] == str(item)
    assert rows[0].trigger == {"source": "api"}


def test_a_refusal_whose_path_holds_a_nul_is_audited_all_the_same(api: Api) -> None:
    """PostgreSQL refuses NUL in text: the row is kept with a stand-in, not lost."""
    assert api.call("GET", "/api/pools/a%00b", None).status_code == 401
    (row,) = auth_rows(api.store)
    assert (row.event_type, row.actor) == ("auth_failed", "anonymous")
    assert row.extra["path"] == "/api/pools/a\N{SYMBOL FOR NULL}b"


def test_an_allowed_call_that_changes_nothing_leaves_only_its_log_line(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    item = api.item()  # active: a retry is a conflict
    with caplog.at_level(logging.DEBUG, logger="wq.auth"):
        assert api.call("POST", f"/api/work-items/{item}/retry", "admin").status_code == 409
    assert [line["decision"] for line in decisions(caplog)] == ["allow"]
    assert auth_rows(api.store) == []


def test_webhook_refusals_are_audited_without_the_secret(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="wq.auth"):
        for headers in ({}, {"X-Gitlab-Token": "wrong"}):
            response = api.call("POST", "/api/webhooks/gitlab", None, headers=headers, json={})
            assert response.status_code == 401
            assert response.json() == {"error": "missing or wrong X-Gitlab-Token"}
        accepted = api.call(
            "POST", "/api/webhooks/gitlab", None, headers={"X-Gitlab-Token": SECRET}, content=b"x"
        )
        assert accepted.status_code == 400  # past the secret: the body is not JSON
    rows = auth_rows(api.store)
    assert [(row.event_type, row.actor, row.extra["tier"]) for row in rows] == [
        ("auth_failed", "webhook:gitlab", "webhook"),
        ("auth_failed", "webhook:gitlab", "webhook"),
    ]
    assert rows[0].extra["route"] == "/api/webhooks/gitlab"
    assert [line["decision"] for line in decisions(caplog)] == ["deny", "deny", "allow"]
    assert SECRET not in caplog.text and "wrong" not in json.dumps([r.extra for r in rows])


def test_the_submit_permission_is_checked_before_the_body_is_validated(api: Api) -> None:
    bad = {"not": "a submission"}
    refused = api.call("POST", "/api/work-items/chain", "nobody", json=bad)
    assert refused.status_code == 403  # not a 422: nothing about the schema is told
    invalid = api.call("POST", "/api/work-items/chain", "jwt-deployer", json=bad)
    assert invalid.status_code == 422 and "project" in invalid.json()["error"]
    # The refused body changed nothing, so its allow was not audited; the denial was.
    assert [row.event_type for row in auth_rows(api.store)] == ["auth_denied"]


def test_authentication_failures_are_audited_within_a_budget(api: Api) -> None:
    """Anyone who reaches the port can fail to authenticate: each failure wrote a row,
    so a loop of requests without a token grew the audit table without bound."""
    clock = [0.0]
    api.client.app.state.auth_failures = FailureBudget(per_minute=5, clock=lambda: clock[0])
    for _ in range(8):
        assert api.call("GET", "/api/whoami", None).status_code == 401
    assert len(auth_rows(api.store)) == 5  # three left out
    # A denial names an authenticated caller: always audited.
    assert api.call("POST", "/api/work-items/chain", "nobody", json={}).status_code == 403
    clock[0] = 60.0  # the next minute
    assert api.call("GET", "/api/pools", None).status_code == 401
    rows = auth_rows(api.store)
    assert [row.event_type for row in rows] == ["auth_failed"] * 5 + ["auth_denied", "auth_failed"]
    assert rows[-1].extra["unaudited"] == 3 and "unaudited" not in rows[0].extra
    assert rows[-1].extra["route"] == "/api/pools"


def test_a_refused_requests_path_is_kept_cut_short(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    """Anyone may send a path of any length: a 60,000-character one filled its refusal's
    audit row and log line (twice) in full."""
    caplog.set_level(logging.INFO)
    path = "/api/work-items/" + "a" * 60_000
    assert api.call("GET", path, None).status_code == 401
    (row,) = auth_rows(api.store)
    assert len(row.extra["path"]) <= PATH_MAX + 3 and row.extra["path"].endswith("...")
    daemon = [r for r in caplog.records if r.name.startswith("wq")]
    long = [(r.name, r.getMessage()[:300]) for r in daemon if len(r.getMessage()) >= 4_000]
    assert not long, long
