"""An overlay changes what a site changes, and nothing else: deploy/overlays/example sets
the namespace, image, replicas, resources, config and the Route's host. The test
renderer is checked against the real Kustomize where `kubectl` is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy import kustomize
from tests.deploy.manifests import (
    BASE,
    EXAMPLE,
    Obj,
    config,
    container,
    find,
    migrate_container,
    render,
)

IMAGE = "registry.example.com/platform/wq:0.1.0"


@pytest.fixture(scope="module")
def base() -> list[Obj]:
    """The base, rendered."""
    return render(BASE)


@pytest.fixture(scope="module")
def example() -> list[Obj]:
    """The example overlay, rendered."""
    return render(EXAMPLE)


def test_replicas_image_and_resources_are_the_overlays(base: list[Obj], example: list[Obj]) -> None:
    assert find(example, "Deployment", "wq")["spec"]["replicas"] == 5
    assert container(example, "wq")["image"] == IMAGE
    assert migrate_container(example)["image"] == IMAGE
    assert container(example, "wq")["resources"] == {
        "requests": {"cpu": "500m", "memory": "512Mi"},
        "limits": {"memory": "1Gi"},
    }
    # The sidecar is not the overlay's business: image, flags and resources as in the base.
    assert container(example, "oauth-proxy") == container(base, "oauth-proxy")
    # Nothing else about the wq container changed.
    for key in ("args", "ports", "livenessProbe", "readinessProbe", "volumeMounts", "envFrom"):
        assert container(example, "wq")[key] == container(base, "wq")[key], key


def test_the_overlay_adds_a_secret_variable_and_keeps_the_bases(
    base: list[Obj], example: list[Obj]
) -> None:
    before = {e["name"]: e for e in container(base, "wq")["env"]}
    after = {e["name"]: e for e in container(example, "wq")["env"]}
    assert set(after) - set(before) == {"GITLAB_TOKEN_RHEL"}
    assert after["GITLAB_TOKEN_RHEL"]["valueFrom"]["secretKeyRef"] == {
        "name": "wq-gitlab-tokens",
        "key": "GITLAB_TOKEN_RHEL",
    }
    assert all(after[name] == entry for name, entry in before.items())


def test_the_config_is_the_overlays(example: list[Obj]) -> None:
    settings = config(example)
    assert settings["processing"]["workers"] == 15
    assert settings["handled_types"]["mr"]["gitlab_url"] == "https://gitlab.example.com"
    assert settings["handled_types"]["mr"]["projects"]["example/rhel"] == {
        "token_env": "GITLAB_TOKEN_RHEL"
    }
    assert settings["pools"]["example/rhel"] == {"capacity": 4}


def test_the_namespace_and_the_route_host_are_the_overlays(example: list[Obj]) -> None:
    assert find(example, "Deployment", "wq")["metadata"]["namespace"] == "wq-example"
    subject = find(example, "ClusterRoleBinding", "wq-oauth-proxy-auth-delegator")["subjects"][0]
    assert subject["namespace"] == "wq-example"
    assert find(example, "Route", "wq")["spec"]["host"] == "wq.apps.example.com"


def test_the_base_keeps_its_own_values(base: list[Obj]) -> None:
    # Rendering the overlay must not have changed the base it was built on.
    assert find(base, "Deployment", "wq")["spec"]["replicas"] == 3
    assert container(base, "wq")["image"] == "quay.io/example/wq:latest"
    assert find(base, "Deployment", "wq")["metadata"]["namespace"] == "wq"


def _key(obj: Obj) -> tuple[str, str, str]:
    return (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with kustomize) not here")
@pytest.mark.parametrize("directory", [BASE, EXAMPLE], ids=["base", "example-overlay"])
def test_the_renderer_agrees_with_kubectl(directory: Path) -> None:
    result = subprocess.run(
        ["kubectl", "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    real = {_key(o): o for o in yaml.safe_load_all(result.stdout) if o}
    ours = {_key(o): o for o in render(directory)}
    assert sorted(ours) == sorted(real)
    for key, obj in ours.items():
        assert obj == real[key], key


def _kustomization(tmp_path: Path, text: str) -> Path:
    directory = tmp_path / "overlay"
    directory.mkdir()
    shutil.copytree(BASE, tmp_path / "base")
    (directory / "kustomization.yaml").write_text(text)
    return directory


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("resources: [../base]\ncommonLabels: {team: a}\n", "commonLabels"),
        ("resources: [../base]\npatches:\n  - target: {kind: Route}\n", "exactly one"),
        (
            "resources: [../base]\npatches:\n  - patch: '[{op: add, path: /x, value: 1}]'\n",
            "needs a target",
        ),
        (
            "resources: [../base]\npatches:\n"
            "  - patch: '{kind: Deployment, metadata: {name: nope}, spec: {replicas: 1}}'\n",
            "matches no resource",
        ),
    ],
)
def test_the_renderer_refuses_what_it_does_not_do(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(kustomize.KustomizeError, match=message):
        render(_kustomization(tmp_path, text))


def test_a_patch_merges_containers_by_name_and_null_deletes(tmp_path: Path) -> None:
    directory = _kustomization(
        tmp_path,
        "resources: [../base]\npatches:\n  - patch: |-\n"
        "      {kind: Deployment, metadata: {name: wq}, spec: {template: {spec: {\n"
        "        terminationGracePeriodSeconds: null,\n"
        "        containers: [{name: oauth-proxy, args: [--only]}]}}}}\n",
    )
    spec = find(render(directory), "Deployment", "wq")["spec"]["template"]["spec"]
    assert "terminationGracePeriodSeconds" not in spec
    assert [c["name"] for c in spec["containers"]] == ["wq", "oauth-proxy"]
    # args is not a keyed list: the patch's replaces the base's whole.
    assert spec["containers"][1]["args"] == ["--only"]
    assert spec["containers"][1]["image"].startswith("quay.io/openshift/origin-oauth-proxy")
