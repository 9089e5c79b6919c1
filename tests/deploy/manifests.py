"""What the deployment tests share: rendering, lookups, schema validation, and what the
seed requires of the oauth-proxy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.deploy import kustomize
from wq.daemon import commands

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "base"
EXAMPLE = ROOT / "deploy" / "overlays" / "example"
KUBERNETES_VERSION = "1.30.0"
# Kinds kubernetes-validate has no schema for: their required fields are checked here.
CUSTOM_KINDS = {
    ("route.openshift.io/v1", "Route"): ("to",),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ("selector", "endpoints"),
}
# What the seed requires of the oauth-proxy: OpenShift login, the session cookie refreshed
# hourly so the OCP token inside stays valid, the access token passed to wq for
# POST /oauth/token, the cookie secret from a Secret, and only /oauth/* authenticated.
PROXY_SKIP_AUTH = "^/($|[^o]|o($|[^a])|oa($|[^u])|oau($|[^t])|oaut($|[^h])|oauth($|[^/]))"
PROXY_ARGS = [
    "--provider=openshift",
    "--openshift-service-account=wq",
    "--https-address=:8443",
    "--upstream=http://localhost:8080",
    "--tls-cert=/etc/tls/private/tls.crt",
    "--tls-key=/etc/tls/private/tls.key",
    "--cookie-secret-file=/etc/proxy/cookie/session_secret",
    "--cookie-refresh=1h",
    "--pass-access-token",
    f"--skip-auth-regex={PROXY_SKIP_AUTH}",
]
PROXY_COOKIE_SECRET = "wq-proxy-cookie"

Obj = dict[str, Any]


def render(directory: Path) -> list[Obj]:
    """What `kubectl kustomize DIRECTORY` gives (tests/deploy/kustomize.py)."""
    return kustomize.render(directory)


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    """The one object of a kind and name."""
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} objects"
    return found[0]


def pod_spec(objects: list[Obj], kind: str = "Deployment", name: str = "wq") -> Obj:
    """The pod template's spec of a Deployment or Job."""
    spec: Obj = find(objects, kind, name)["spec"]["template"]["spec"]
    return spec


def container(objects: list[Obj], name: str) -> Obj:
    """A container of the wq Deployment."""
    return next(c for c in pod_spec(objects)["containers"] if c["name"] == name)


def migrate_container(objects: list[Obj]) -> Obj:
    """The migration Job's container."""
    found: Obj = pod_spec(objects, "Job", "wq-db-migrate")["containers"][0]
    return found


def validate(objects: list[Obj]) -> None:
    """Every object against the Kubernetes schemas (offline), custom kinds by their
    required fields."""
    for obj in objects:
        required = CUSTOM_KINDS.get((obj["apiVersion"], obj["kind"]))
        if required is None:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
            continue
        for field in required:
            assert obj["spec"].get(field), f"{obj['kind']}: spec.{field} missing"


def config_text(objects: list[Obj]) -> str:
    """The config.yml the ConfigMap carries."""
    text: str = find(objects, "ConfigMap", "wq-config")["data"]["config.yml"]
    return text


def config(objects: list[Obj]) -> Obj:
    """The config.yml the ConfigMap carries, parsed."""
    data: Obj = yaml.safe_load(config_text(objects))
    return data


def from_secrets(entry: Obj) -> set[str]:
    """The variables a container takes from a Secret, one by one."""
    return {e["name"] for e in entry.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})}


def start_needs(
    objects: list[Obj], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> list[str]:
    """`wq config check --no-env` on the rendered config: it must pass, and it lists the
    environment variables a real start needs."""
    path = tmp_path / "config.yml"
    path.write_text(config_text(objects))
    capsys.readouterr()
    code = commands.config_check(str(path), no_env=True)
    out, err = capsys.readouterr()
    assert code == commands.EXIT_OK, err
    assert out.splitlines()[0] == f"{path}: structure ok (environment not checked)"
    listed = out.splitlines()[1].removeprefix("a real start needs: ")
    return [] if listed == "no environment variables" else listed.split(", ")
