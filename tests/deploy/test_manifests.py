"""What holds for the Kustomize base and for an overlay built on it (the example one):
every object validates offline, the oauth-proxy is configured as the seed requires, and
the manifests wire what wq needs (probes, Secrets, the config, the namespace)."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest

from tests.deploy.manifests import (
    BASE,
    EXAMPLE,
    KUBERNETES_VERSION,
    PROXY_ARGS,
    PROXY_COOKIE_SECRET,
    PROXY_SKIP_AUTH,
    ROOT,
    Obj,
    config,
    config_text,
    container,
    find,
    from_secrets,
    migrate_container,
    pod_spec,
    render,
    start_needs,
    validate,
)
from wq.daemon import commands
from wq.daemon.logs import LOG_FORMATS

RENDERINGS = [pytest.param(BASE, id="base"), pytest.param(EXAMPLE, id="example-overlay")]
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding"}


@pytest.fixture(params=RENDERINGS)
def objects(request: pytest.FixtureRequest) -> list[Obj]:
    """The objects one kustomization renders to."""
    rendered: list[Obj] = render(request.param)
    return rendered


def test_every_object_validates_against_the_kubernetes_schemas(objects: list[Obj]) -> None:
    kinds = {o["kind"] for o in objects}
    assert {
        "Deployment", "Service", "Route", "ConfigMap", "ServiceAccount", "Role", "RoleBinding",
        "ClusterRoleBinding", "Job", "PodDisruptionBudget", "NetworkPolicy", "ServiceMonitor",
    } <= kinds  # fmt: skip
    validate(objects)


def test_a_broken_object_is_refused_by_the_validator() -> None:
    deployment = find(render(BASE), "Deployment", "wq")
    deployment["spec"]["replicas"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_the_proxy_runs_with_exactly_the_required_flags(objects: list[Obj]) -> None:
    proxy = container(objects, "oauth-proxy")
    assert proxy["args"] == PROXY_ARGS
    # The cookie secret file comes from a Secret volume mounted where the flag reads it.
    flag = "--cookie-secret-file="
    cookie_file = Path(next(a for a in PROXY_ARGS if a.startswith(flag)).removeprefix(flag))
    mount = next(m for m in proxy["volumeMounts"] if m["mountPath"] == str(cookie_file.parent))
    volume = next(v for v in pod_spec(objects)["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == PROXY_COOKIE_SECRET
    # The proxy forwards to wq's own port.
    wq_port = container(objects, "wq")["ports"][0]["containerPort"]
    assert f"--upstream=http://localhost:{wq_port}" in proxy["args"]


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


def test_probes_spread_and_the_service_account_token(objects: list[Obj]) -> None:
    deployment = find(objects, "Deployment", "wq")
    assert deployment["spec"]["replicas"] >= 2
    spec = pod_spec(objects)
    assert spec["affinity"]["podAntiAffinity"]
    wq = container(objects, "wq")
    assert wq["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert wq["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert wq["resources"]["requests"]
    tokens = [v for v in spec["volumes"] if "projected" in v]
    assert tokens[0]["projected"]["sources"][0]["serviceAccountToken"]["audience"] == (
        "workqueue-service"
    )
    assert migrate_container(objects)["command"][:3] == ["wq", "db", "migrate"]


def test_the_pod_outlives_the_shutdown_grace(objects: list[Obj]) -> None:
    # Killed before the grace is over, a replica would drop running actions.
    grace = config(objects).get("processing", {}).get("shutdown_grace_seconds", 30)
    assert pod_spec(objects)["terminationGracePeriodSeconds"] > grace + 5


def test_the_config_file_is_where_wq_reads_it(objects: list[Obj]) -> None:
    wq = container(objects, "wq")
    path = Path(wq["args"][wq["args"].index("--config") + 1])
    mount = next(m for m in wq["volumeMounts"] if m["mountPath"] == str(path.parent))
    volume = next(v for v in pod_spec(objects)["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == "wq-config"
    assert path.name in find(objects, "ConfigMap", "wq-config")["data"]
    assert config(objects)["server"]["host"] == "0.0.0.0"


def unwired(objects: list[Obj], needs: list[str]) -> set[str]:
    """The variables a start needs that the wq container does not get from a Secret."""
    return set(needs) - from_secrets(container(objects, "wq"))


def test_wq_config_check_no_env_passes_and_every_variable_it_needs_is_a_secret(
    objects: list[Obj], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    needs = start_needs(objects, tmp_path, capsys)
    assert "WQ_GITLAB_WEBHOOK_SECRET" in needs
    assert unwired(objects, needs) == set()
    assert "WQ_DATABASE_URL" in from_secrets(container(objects, "wq"))
    # The check can fail: a container without one of them is caught.
    env = container(objects, "wq")["env"]
    env[:] = [e for e in env if e["name"] != needs[-1]]
    assert unwired(objects, needs) == {needs[-1]}


def test_the_config_passes_a_full_check_with_the_deployments_environment(
    objects: list[Obj],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "config.yml"
    path.write_text(config_text(objects))
    # The environment the Deployment gives the daemon (dummy values for its Secrets),
    # in a pod (Kubernetes names the cluster's API server to every container).
    for name in from_secrets(container(objects, "wq")):
        monkeypatch.setenv(name, "dummy-" + name.lower())
    # The database URL must be one (the check refuses what is not).
    monkeypatch.setenv("WQ_DATABASE_URL", "postgresql://wq@db.invalid/wq")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "172.30.0.1")
    assert commands.config_check(str(path)) == commands.EXIT_OK
    assert capsys.readouterr().out.strip() == f"{path}: ok"
    # The same check refuses the file when a Secret the config needs is not wired in.
    monkeypatch.delenv("GITLAB_TOKEN_RPMS")
    assert commands.config_check(str(path)) != commands.EXIT_OK
    assert "GITLAB_TOKEN_RPMS" in capsys.readouterr().err


def test_the_migration_job_command_works_with_the_jobs_environment(
    objects: list[Obj], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.yml"
    path.write_text(config_text(objects))
    migrate = migrate_container(objects)
    for entry in migrate["env"]:
        monkeypatch.setenv(entry["name"], "dummy")
    # The Secret's URL, here a throwaway SQLite file; the Job's own argv otherwise.
    monkeypatch.setenv("WQ_DATABASE_URL", f"sqlite:///{tmp_path / 'wq.db'}")
    command = migrate["command"]
    assert command[:3] == ["wq", "db", "migrate"]
    assert command[command.index("--config") + 1] == "/etc/workqueue/config.yml"
    assert commands.db_migrate(str(path)) == commands.EXIT_OK
    # The Job's image is the Deployment's: migrations and code come from one release.
    assert migrate["image"] == container(objects, "wq")["image"]


def test_everything_lives_in_one_namespace(objects: list[Obj]) -> None:
    namespaces = {
        o["metadata"].get("namespace") for o in objects if o["kind"] not in CLUSTER_SCOPED
    }
    assert len(namespaces) == 1 and None not in namespaces, namespaces
    (namespace,) = namespaces
    # The proxy's TokenReview rights and the task runner's Role follow the ServiceAccount.
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        for binding in (o for o in objects if o["kind"] == kind):
            for subject in binding["subjects"]:
                assert (subject["name"], subject["namespace"]) == ("wq", namespace), binding
    # The `kubernetes` task runner starts its Jobs where the Role allows it.
    runners = config(objects)["handled_types"].get("task", {}).get("runners", {})
    if "kubernetes" in runners:
        assert runners["kubernetes"]["namespace"] == namespace


def test_the_upgrade_selector_picks_the_migration_job_alone(objects: list[Obj]) -> None:
    # docs/operations.md, "Upgrading": `oc apply -k OVERLAY -l <this>` runs the Job first.
    selected = [
        (o["kind"], o["metadata"]["name"])
        for o in objects
        if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "migration"
    ]
    assert selected == [("Job", "wq-db-migrate")]


def test_the_daemon_logs_json_lines_for_the_collector(objects: list[Obj]) -> None:
    env = {e["name"]: e.get("value") for e in container(objects, "wq")["env"]}
    assert env["WQ_LOG_FORMAT"] == "json"
    assert env["WQ_LOG_FORMAT"] in LOG_FORMATS


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def test_every_reference_between_the_objects_resolves(objects: list[Obj]) -> None:
    pod_labels = find(objects, "Deployment", "wq")["spec"]["template"]["metadata"]["labels"]
    spec = pod_spec(objects)
    container_ports = {
        p["name"]: p["containerPort"] for c in spec["containers"] for p in c["ports"]
    }
    service = find(objects, "Service", "wq")
    assert _matches(service["spec"]["selector"], pod_labels)
    service_ports = {p["name"] for p in service["spec"]["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= set(container_ports)
    route = find(objects, "Route", "wq")
    assert route["spec"]["to"]["name"] == service["metadata"]["name"]
    assert route["spec"]["port"]["targetPort"] in service_ports
    monitor = find(objects, "ServiceMonitor", "wq")
    assert _matches(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= service_ports
    assert _matches(
        find(objects, "PodDisruptionBudget", "wq")["spec"]["selector"]["matchLabels"], pod_labels
    )
    policy = find(objects, "NetworkPolicy", "wq")["spec"]
    assert _matches(policy["podSelector"]["matchLabels"], pod_labels)
    allowed_in = {p["port"] for rule in policy["ingress"] for p in rule["ports"]}
    assert allowed_in == set(container_ports.values())
    accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    assert spec["serviceAccountName"] in accounts
    assert pod_spec(objects, "Job", "wq-db-migrate")["serviceAccountName"] in accounts
    roles = {o["metadata"]["name"] for o in objects if o["kind"] == "Role"}
    for binding in (o for o in objects if o["kind"] == "RoleBinding"):
        assert binding["roleRef"]["name"] in roles
    config_maps = {o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"}
    for volumes in (spec["volumes"], pod_spec(objects, "Job", "wq-db-migrate")["volumes"]):
        assert {v["configMap"]["name"] for v in volumes if "configMap" in v} <= config_maps


def _secrets_referenced(objects: list[Obj]) -> set[str]:
    names: set[str] = set()
    for kind, name in (("Deployment", "wq"), ("Job", "wq-db-migrate")):
        spec = pod_spec(objects, kind, name)
        names |= {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
        for entry in spec["containers"]:
            for env in entry.get("env", []):
                if "secretKeyRef" in env.get("valueFrom", {}):
                    names.add(env["valueFrom"]["secretKeyRef"]["name"])
            names |= {e["secretRef"]["name"] for e in entry.get("envFrom", []) if "secretRef" in e}
    return names


def test_the_guide_creates_every_secret_the_manifests_use(objects: list[Obj]) -> None:
    guide = (ROOT / "docs" / "operations.md").read_text()
    created = set(re.findall(r"create secret generic (\S+)", guide))
    # OpenShift's service CA issues this one from the Service's annotation.
    issued = {
        find(objects, "Service", "wq")["metadata"]["annotations"][
            "service.beta.openshift.io/serving-cert-secret-name"
        ]
    }
    assert _secrets_referenced(objects) == created | issued
