"""The `k8s` issuer shorthand: in a pod, the service-account issuer is discovered through
the API server (HTTPS with the pod's CA and token); outside, `k8s.issuer` names it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.auth.conftest import AUD, Clock, authenticator
from tests.fakes.loopback import make_tls
from tests.fakes.oidc import DISCOVERY_PATH, FakeOidcIssuer, rsa_key
from tests.fakes.openshift import USERS_TILDE, FakeOpenShift
from wq.daemon.auth import AuthenticationFailed, AuthenticationUnavailable, Authenticator
from wq.daemon.auth.oidc import FAILURE_MEMORY_SECONDS

CLUSTER_ISSUER = "https://kubernetes.default.svc"
JWKS = "/openid/v1/jwks"
POD_TOKEN = "pod-service-account-token"
CI = "system:serviceaccount:ci:rpms-ci"
RULES = [
    {"issuer": "k8s", "claims": {"aud": AUD}, "permissions": ["read"]},
    {"issuer": "k8s", "claims": {"aud": AUD, "sub": CI}, "permissions": ["submit"]},
]


@pytest.fixture
def api_server(tmp_path: Path) -> Iterator[FakeOidcIssuer]:
    """A cluster API server's issuer discovery: HTTPS, and only for the pod's token."""
    with FakeOidcIssuer(
        issuer=CLUSTER_ISSUER,
        jwks_path=JWKS,
        require_bearer=POD_TOKEN,
        tls_dir=tmp_path / "tls",
    ) as server:
        assert isinstance(server, FakeOidcIssuer)
        server.add_key(rsa_key("sa-1"))
        yield server


@pytest.fixture
def pod(tmp_path: Path, api_server: FakeOidcIssuer) -> dict[str, Any]:
    """The pod's environment and its service-account files."""
    token_file = tmp_path / "token"
    token_file.write_text(POD_TOKEN + "\n")
    port = api_server.url.rsplit(":", 1)[1]
    return {
        "environ": {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port},
        "k8s": {"ca_file": api_server.ca_file, "token_file": str(token_file)},
    }


def in_pod(pod: dict[str, Any], clock: Clock | None = None, **extra: Any) -> Authenticator:
    k8s = {**pod["k8s"], **extra.pop("k8s", {})}
    return authenticator({"rules": RULES, "k8s": k8s, **extra}, environ=pod["environ"], clock=clock)


def test_in_cluster_discovery(pod: dict[str, Any], api_server: FakeOidcIssuer) -> None:
    auth = in_pod(pod)
    principal = auth.authenticate(api_server.token(sub=CI, aud=[AUD]))
    assert principal.issuer == CLUSTER_ISSUER and principal.identity == CI
    assert principal.allows("submit", "mr") and principal.allows("read", "mr")
    assert [r.path for r in api_server.requests] == [DISCOVERY_PATH, JWKS]
    assert {r.bearer for r in api_server.requests} == {POD_TOKEN}
    other = api_server.token(sub="system:serviceaccount:web:app", aud=AUD)
    assert not auth.authenticate(other).allows("submit", "mr")
    auth.close()


def test_the_pod_token_is_read_again_for_each_fetch(
    pod: dict[str, Any], api_server: FakeOidcIssuer, clock: Clock
) -> None:
    auth = in_pod(pod, clock)
    token = api_server.token(sub=CI, aud=AUD)
    auth.authenticate(token)
    Path(pod["k8s"]["token_file"]).write_text("rotated")
    api_server.require_bearer = "rotated"
    clock.advance(300)
    assert auth.authenticate(token)
    assert api_server.requests[-1].bearer == "rotated"
    auth.close()


def test_the_pods_ca_is_required(
    pod: dict[str, Any], api_server: FakeOidcIssuer, tmp_path: Path
) -> None:
    other_ca = make_tls(tmp_path / "other").ca_file
    auth = in_pod(pod, k8s={"ca_file": str(other_ca)})
    with pytest.raises(AuthenticationUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
        auth.authenticate(api_server.token(sub=CI, aud=AUD))
    assert api_server.requests == []
    auth.close()


def test_a_configured_issuer_must_match_the_discovered_one(
    pod: dict[str, Any], api_server: FakeOidcIssuer
) -> None:
    auth = in_pod(pod, k8s={"issuer": "https://oidc.example.com/cluster"})
    token = api_server.token(sub=CI, aud=AUD, iss="https://oidc.example.com/cluster")
    with pytest.raises(AuthenticationUnavailable, match=f"names issuer '{CLUSTER_ISSUER}'"):
        auth.authenticate(token)
    auth.close()


def test_an_unknown_issuer_while_the_cluster_is_unreachable(
    pod: dict[str, Any], api_server: FakeOidcIssuer
) -> None:
    clock = Clock()
    auth = in_pod(pod, clock)
    api_server.stop()
    with FakeOidcIssuer() as stranger:
        stranger.add_key(rsa_key("stranger"))
        # Until the cluster's issuer is known, no JWT can be placed: 503, not 401.
        with pytest.raises(AuthenticationUnavailable, match="cannot fetch the discovery"):
            auth.authenticate(stranger.token(sub="x", aud=AUD))
        api_server.start()
        clock.advance(FAILURE_MEMORY_SECONDS)
        with pytest.raises(AuthenticationFailed, match="no rule accepts tokens from issuer"):
            auth.authenticate(stranger.token(sub="x", aud=AUD))
    auth.close()


def test_outside_a_cluster_k8s_issuer_names_the_issuer() -> None:
    with FakeOidcIssuer() as public:
        public.add_key(rsa_key("sa-public"))
        auth = authenticator({"rules": RULES, "k8s": {"issuer": public.issuer}})
        assert auth.authenticate(public.token(sub=CI, aud=AUD)).allows("submit", "mr")
        auth.close()


def test_openshift_in_a_pod_uses_the_cluster_api_and_the_pods_ca(tmp_path: Path) -> None:
    with FakeOpenShift(tls_dir=tmp_path / "ocp") as api:
        assert isinstance(api, FakeOpenShift)
        token = api.add_user("alice", ["admins"])
        port = api.url.rsplit(":", 1)[1]
        auth = authenticator(
            {
                "rules": [{"groups": ["admins"], "permissions": ["read"]}],
                "k8s": {"ca_file": api.ca_file},
            },
            environ={"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port},
        )
        assert auth.authenticate(token).identity == "alice"
        assert api.count(USERS_TILDE) == 1
        auth.close()
