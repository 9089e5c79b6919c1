"""Callers known without I/O are authenticated on the event loop (`Authenticator.known`),
with exactly the answer `authenticate` gives; anything else still goes the long way.
Read-only permission checks take no session and refuse to serve a state-changing call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient

from tests.conftest import Store, make_config
from tests.daemon.auth.conftest import AUD, Clock, authenticator
from tests.fakes.oidc import FakeOidcIssuer
from tests.fakes.openshift import FakeOpenShift
from tests.support.chain import Behaviour, chain_registry
from wq.daemon.app import create_app
from wq.daemon.auth import (
    AuthenticationFailed,
    Authenticator,
    LocalTokenTier,
    Principal,
    install_auth_handling,
)
from wq.daemon.auth.openshift_tier import OpenShiftTier
from wq.daemon.deps import require_to_read
from wq.daemon.runtime import build_runtime

RULES = [
    {"groups": ["admins"], "permissions": ["read", "submit", "retry"]},
    {"issuer": None, "claims": {"aud": AUD}, "permissions": ["read"]},
]
# Module level: FastAPI resolves the routes' annotations here.
Reader = Annotated[Principal, Depends(require_to_read())]


@pytest.fixture
def auth(
    fake_openshift: FakeOpenShift, fake_oidc: FakeOidcIssuer, clock: Clock
) -> Iterator[Authenticator]:
    rules = [RULES[0], {**RULES[1], "issuer": fake_oidc.issuer}]
    built = authenticator(
        {"rules": rules, "openshift": {"api_url": fake_openshift.url}}, clock=clock
    )
    yield Authenticator([LocalTokenTier("the-local-token"), *built.tiers])
    built.close()


def test_the_local_token_is_known_at_once(auth: Authenticator) -> None:
    assert auth.known("the-local-token") == auth.authenticate("the-local-token")
    assert auth.known("the-local-token!") is None  # not it: the other tiers decide


def test_an_openshift_user_is_known_while_cached_and_only_then(
    auth: Authenticator, fake_openshift: FakeOpenShift, clock: Clock
) -> None:
    token = fake_openshift.add_user("alice", ["admins"])
    assert auth.known(token) is None
    assert fake_openshift.lookups == 0  # knowing never looks up

    principal = auth.authenticate(token)
    assert auth.known(token) == principal
    assert fake_openshift.lookups == 1

    clock.advance(300)  # the cache's TTL
    assert auth.known(token) is None
    assert fake_openshift.lookups == 1


def test_refused_malformed_oversized_and_jwt_tokens_are_never_known(
    auth: Authenticator, fake_openshift: FakeOpenShift, fake_oidc: FakeOidcIssuer
) -> None:
    with pytest.raises(AuthenticationFailed):
        auth.authenticate("sha256~unknown")
    assert auth.known("sha256~unknown") is None  # remembered as refused: the long way words it
    assert auth.known("not a token!") is None
    assert auth.known("sha256~" + "x" * 9000) is None
    jwt = fake_oidc.token(aud=AUD, sub="ci")
    assert auth.authenticate(jwt).identity == "ci"
    assert auth.known(jwt) is None  # its issuer's keys may need fetching
    assert fake_openshift.lookups == 1


def test_an_api_caller_known_from_the_cache_is_looked_up_again_once_it_expires(
    store: Store, fake_openshift: FakeOpenShift
) -> None:
    config = make_config(
        store.url,
        authorization={"rules": [RULES[0]], "openshift": {"api_url": fake_openshift.url}},
    )
    runtime = build_runtime(config, registry=chain_registry(Behaviour()))
    (tier,) = [t for t in runtime.authenticator.tiers if isinstance(t, OpenShiftTier)]
    clock = Clock()
    tier.cache.clock = clock
    token = fake_openshift.add_user("alice", ["admins"])
    headers = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        assert client.get("/api/work-items", headers=headers).status_code == 200
        assert client.get("/api/pools", headers=headers).status_code == 200
        assert client.post("/api/work-items/chain", json={"project": "a/b"}, headers=headers)
        assert fake_openshift.lookups == 1

        clock.advance(300)
        fake_openshift.revoke(token)
        refused = client.get("/api/work-items", headers=headers)
        assert refused.status_code == 401
        assert fake_openshift.lookups == 2
    runtime.authenticator.close()
    runtime.engine.dispose()


def test_a_read_only_check_refuses_to_serve_a_state_changing_call(tmp_path: Path) -> None:
    # `require_to_read` audits no allow: on a POST the change would go unaudited.
    app = FastAPI()
    install_auth_handling(app)
    config = make_config(f"sqlite:///{tmp_path / 'wq.db'}")  # never connected to
    runtime = build_runtime(config, registry=chain_registry(Behaviour()))
    app.state.runtime = runtime

    @app.get("/api/thing")
    def read(principal: Reader) -> str:
        return principal.identity

    @app.post("/api/thing")
    def change(principal: Reader) -> str:
        return principal.identity

    assert runtime.local_tier is not None
    headers = {"Authorization": f"Bearer {runtime.local_tier.token}"}
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/api/thing", headers=headers).json() == "local"
        assert client.post("/api/thing", headers=headers).status_code == 500
    runtime.engine.dispose()
