"""The deployment files: the Kustomize base validates offline, wires what wq needs, and
the Containerfile builds the server image as documented."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from wq.daemon import commands

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "base"
KUBERNETES_VERSION = "1.30.0"
# Kinds kubernetes-validate has no schema for: their required fields are checked here.
CUSTOM_KINDS = {
    ("route.openshift.io/v1", "Route"): ("to",),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ("selector", "endpoints"),
}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "Namespace"}
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


def render() -> list[dict[str, Any]]:
    """What `kubectl kustomize deploy/base` gives: the resources with the namespace set.

    The base uses only `namespace` and `resources`, so this is the whole rendering; the
    first test makes sure it stays that way.
    """
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    objects = []
    for name in kustomization["resources"]:
        for doc in yaml.safe_load_all((BASE / name).read_text()):
            if doc is None:
                continue
            if doc["kind"] not in CLUSTER_SCOPED:
                doc["metadata"]["namespace"] = kustomization["namespace"]
            objects.append(doc)
    return objects


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The one object of a kind and name."""
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} objects"
    return found[0]


def container(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """A container of the wq Deployment."""
    spec = find(objects, "Deployment", "wq")["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] if c["name"] == name)


def test_kustomization_uses_only_what_the_test_renders() -> None:
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    assert set(kustomization) == {"apiVersion", "kind", "namespace", "resources"}
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}


def test_every_object_validates_against_the_kubernetes_schemas() -> None:
    objects = render()
    kinds = {o["kind"] for o in objects}
    assert {
        "Deployment", "Service", "Route", "ConfigMap", "ServiceAccount", "Role", "RoleBinding",
        "Job", "PodDisruptionBudget", "NetworkPolicy", "ServiceMonitor",
    } <= kinds  # fmt: skip
    for obj in objects:
        required = CUSTOM_KINDS.get((obj["apiVersion"], obj["kind"]))
        if required is not None:
            for field in required:
                assert obj["spec"].get(field), f"{obj['kind']}: spec.{field} missing"
            continue
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_a_broken_object_is_refused_by_the_validator() -> None:
    deployment = find(render(), "Deployment", "wq")
    deployment["spec"]["replicas"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_the_proxy_runs_with_exactly_the_required_flags() -> None:
    proxy = container(render(), "oauth-proxy")
    assert proxy["args"] == PROXY_ARGS
    volumes = find(render(), "Deployment", "wq")["spec"]["template"]["spec"]["volumes"]
    cookie = next(v for v in volumes if v["name"] == "proxy-cookie")
    assert cookie["secret"]["secretName"] == "wq-proxy-cookie"


@pytest.mark.parametrize(
    ("path", "authenticated"),
    [
        ("/oauth/start", True),
        ("/oauth/callback", True),
        ("/oauth/token", True),
        ("/api/work-items", False),
        ("/api/whoami", False),
        ("/healthz", False),
        ("/readyz", False),
        ("/docs", False),
        ("/openapi.json", False),
        ("/oauthx", False),
        ("/o", False),
    ],
)
def test_only_oauth_paths_go_through_the_proxy_login(path: str, authenticated: bool) -> None:
    # Go's RE2 and Python's re agree on this regex: no lookarounds, only classes.
    assert (re.search(PROXY_SKIP_AUTH, path) is None) is authenticated


def test_probes_and_replicas() -> None:
    objects = render()
    deployment = find(objects, "Deployment", "wq")
    assert deployment["spec"]["replicas"] >= 2
    spec = deployment["spec"]["template"]["spec"]
    assert spec["affinity"]["podAntiAffinity"]
    wq = container(objects, "wq")
    assert wq["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert wq["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert wq["resources"]["requests"]
    tokens = [v for v in spec["volumes"] if "projected" in v]
    assert tokens[0]["projected"]["sources"][0]["serviceAccountToken"]["audience"] == (
        "workqueue-service"
    )
    job = find(objects, "Job", "wq-db-migrate")
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][:3] == [
        "wq",
        "db",
        "migrate",
    ]


def _config(objects: list[dict[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(
        find(objects, "ConfigMap", "wq-config")["data"]["config.yml"]
    )
    return data


def test_every_secret_the_config_names_comes_from_a_secret() -> None:
    objects = render()
    config = _config(objects)
    wanted = {config["events"]["webhook_secret_env"]}
    wanted |= {p["token_env"] for p in config["handled_types"]["mr"]["projects"].values()}
    env = {e["name"]: e for e in container(objects, "wq")["env"]}
    for name in wanted:
        assert "secretKeyRef" in env[name]["valueFrom"], name
    assert "secretKeyRef" in env["WQ_DATABASE_URL"]["valueFrom"]
    migrate = find(objects, "Job", "wq-db-migrate")["spec"]["template"]["spec"]["containers"][0]
    assert {e["name"] for e in migrate["env"]} >= {
        "WQ_DATABASE_URL",
        config["events"]["webhook_secret_env"],
    }


def test_the_configmap_passes_wq_config_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = render()
    path = tmp_path / "config.yml"
    path.write_text(find(objects, "ConfigMap", "wq-config")["data"]["config.yml"])
    # The environment the Deployment gives the daemon (dummy values for its Secrets).
    for entry in container(objects, "wq")["env"]:
        monkeypatch.setenv(entry["name"], "dummy-" + entry["name"].lower())
    assert commands.config_check(str(path)) == 0
    assert capsys.readouterr().out.strip() == f"{path}: ok"
    # The same check refuses the file when a Secret the config needs is not wired in.
    monkeypatch.delenv("GITLAB_TOKEN_RPMS")
    assert commands.config_check(str(path)) != 0


def _containerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of the Containerfile, continuation lines joined."""
    text = (ROOT / "Containerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    pairs = [tuple(line.split(None, 1)) for line in lines if line and not line.startswith("#")]
    return [(p[0].upper(), p[1]) for p in pairs]  # type: ignore[misc]


def test_containerfile_runs_wq_daemon_as_a_non_root_user() -> None:
    steps = _containerfile()
    bases = [args for op, args in steps if op == "FROM"]
    assert len(bases) >= 2, "multi-stage build"
    assert all(re.match(r"\S+/python:3\.\d+-slim\b", b) for b in bases)
    user = [args for op, args in steps if op == "USER"][-1]
    assert user not in {"0", "root"}
    entrypoint = yaml.safe_load([args for op, args in steps if op == "ENTRYPOINT"][-1])
    assert entrypoint == ["wq", "daemon"]
    cmd = yaml.safe_load([args for op, args in steps if op == "CMD"][-1])
    assert cmd == ["--config", "/etc/workqueue/config.yml"]
    assert any(op == "HEALTHCHECK" and "/healthz" in args for op, args in steps)
    installs = " ".join(args for op, args in steps if op == "RUN")
    assert "kerberos" not in installs
    assert not any(
        op in {"ARG", "ENV"} and re.search(r"TOKEN|SECRET|PASSWORD", args) for op, args in steps
    )


def test_the_image_entrypoint_starts() -> None:
    # The image runs `wq daemon ARGS`; the same console script is installed here.
    wq = Path(sys.executable).with_name("wq")
    result = subprocess.run(
        [str(wq), "daemon", "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "--config" in result.stdout


def test_the_migration_job_command_works_with_the_jobs_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = render()
    path = tmp_path / "config.yml"
    path.write_text(find(objects, "ConfigMap", "wq-config")["data"]["config.yml"])
    migrate = find(objects, "Job", "wq-db-migrate")["spec"]["template"]["spec"]["containers"][0]
    for entry in migrate["env"]:
        monkeypatch.setenv(entry["name"], "dummy")
    # The Secret's URL, here a throwaway SQLite file; the Job's own argv otherwise.
    monkeypatch.setenv("WQ_DATABASE_URL", f"sqlite:///{tmp_path / 'wq.db'}")
    assert migrate["command"][:3] == ["wq", "db", "migrate"]
    config = migrate["command"][migrate["command"].index("--config") + 1]
    assert config == "/etc/workqueue/config.yml"
    assert commands.db_migrate(str(path)) == 0
