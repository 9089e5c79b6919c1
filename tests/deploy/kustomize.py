"""A small Kustomize renderer for the tests: what `kubectl kustomize DIR` gives, for the
part of Kustomize that deploy/ uses.

No kustomize or helm binary can be installed from the package registries CI reaches, so
the tests render with this. `test_the_renderer_agrees_with_kubectl` compares it with the
real Kustomize wherever `kubectl` is on PATH. Anything else in a kustomization is
refused, so that deploy/ cannot start using a feature the tests would silently ignore.

Supported: `resources` (files and directories with a kustomization of their own),
`namespace`, `images`, `replicas` and `patches` (strategic-merge patches and JSON 6902
patches, inline or from a file). Transformations run in Kustomize's order: patches,
then namespace, replicas, images.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

Obj = dict[str, Any]

SUPPORTED_FIELDS = {"apiVersion", "kind", "namespace", "resources", "images", "replicas", "patches"}
# Kinds without a namespace: Kustomize's namespace transformer leaves them alone.
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "Namespace",
    "CustomResourceDefinition",
    "PersistentVolume",
    "StorageClass",
    "PriorityClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
}
SCALABLE = {"Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"}
BINDINGS = {"RoleBinding", "ClusterRoleBinding"}
# The Kubernetes API's merge keys for the lists a strategic-merge patch merges; every
# other list is replaced whole, as the API server and Kustomize do.
MERGE_KEYS = {
    ("spec", "containers"): "name",
    ("spec", "initContainers"): "name",
    ("spec", "volumes"): "name",
    ("containers", "env"): "name",
    ("initContainers", "env"): "name",
    ("containers", "volumeMounts"): "mountPath",
    ("initContainers", "volumeMounts"): "mountPath",
    ("containers", "ports"): "containerPort",
    ("initContainers", "ports"): "containerPort",
    # Service ports (no other kind deploy/ uses has a list at spec.ports).
    ("spec", "ports"): "port",
}


class KustomizeError(Exception):
    """The kustomization uses something this renderer does not do, or is wrong."""


@dataclass
class Resource:
    """One object, with the binding subjects that follow their ServiceAccount's namespace.

    Kustomize moves a ServiceAccount subject of a (Cluster)RoleBinding along with the
    ServiceAccount when the subject's namespace was left out (or `default`); a subject
    with another explicit namespace is never touched.
    """

    obj: Obj
    following_subjects: set[int] = field(default_factory=set)


def render(directory: Path) -> list[Obj]:
    """The objects a kustomization directory renders to, in the order they were listed."""
    return [copy.deepcopy(r.obj) for r in _build(directory.resolve())]


def _build(directory: Path) -> list[Resource]:
    path = directory / "kustomization.yaml"
    if not path.is_file():
        raise KustomizeError(f"{directory}: no kustomization.yaml")
    kustomization = yaml.safe_load(path.read_text()) or {}
    unknown = set(kustomization) - SUPPORTED_FIELDS
    if unknown:
        raise KustomizeError(f"{path}: not supported by the test renderer: {sorted(unknown)}")
    resources: list[Resource] = []
    for entry in kustomization.get("resources", []):
        resources.extend(_load(directory / entry))
    _follow_service_accounts(resources)
    for patch in kustomization.get("patches", []):
        _apply_patch(directory, patch, resources)
    if "namespace" in kustomization:
        _set_namespace(resources, kustomization["namespace"])
    for replicas in kustomization.get("replicas", []):
        _set_replicas(resources, replicas)
    for image in kustomization.get("images", []):
        for resource in resources:
            _set_image(resource.obj, image)
    return resources


def _load(path: Path) -> list[Resource]:
    if path.is_dir():
        return _build(path)
    return [Resource(doc) for doc in yaml.safe_load_all(path.read_text()) if doc]


def _follow_service_accounts(resources: list[Resource]) -> None:
    """Mark the subjects that name a ServiceAccount of these resources without a namespace."""
    accounts = {r.obj["metadata"]["name"] for r in resources if r.obj["kind"] == "ServiceAccount"}
    for resource in resources:
        if resource.obj["kind"] not in BINDINGS:
            continue
        for index, subject in enumerate(resource.obj.get("subjects", [])):
            if (
                subject.get("kind") == "ServiceAccount"
                and subject.get("namespace") in (None, "default")
                and subject.get("name") in accounts
            ):
                resource.following_subjects.add(index)


def _set_namespace(resources: list[Resource], namespace: str) -> None:
    for resource in resources:
        obj = resource.obj
        if obj["kind"] not in CLUSTER_SCOPED:
            obj["metadata"]["namespace"] = namespace
        for index in resource.following_subjects:
            obj["subjects"][index]["namespace"] = namespace


def _set_replicas(resources: list[Resource], entry: Obj) -> None:
    for resource in resources:
        obj = resource.obj
        if obj["kind"] in SCALABLE and obj["metadata"]["name"] == entry["name"]:
            obj["spec"]["replicas"] = entry["count"]


def _split_image(image: str) -> tuple[str, str]:
    """(name, ":tag" or "@digest" or "") of an image reference."""
    if "@" in image:
        name, digest = image.split("@", 1)
        return name, "@" + digest
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        return image[:colon], image[colon:]
    return image, ""


def _set_image(node: Any, entry: Obj) -> None:
    """Kustomize's `images`: every container image named `entry.name` gets the new name/tag."""
    if isinstance(node, list):
        for item in node:
            _set_image(item, entry)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key in ("containers", "initContainers") and isinstance(value, list):
            for container in value:
                name, suffix = _split_image(container.get("image", ""))
                if name != entry["name"]:
                    continue
                if "digest" in entry:
                    suffix = "@" + entry["digest"]
                elif "newTag" in entry:
                    suffix = ":" + str(entry["newTag"])
                container["image"] = entry.get("newName", name) + suffix
        else:
            _set_image(value, entry)


def _apply_patch(directory: Path, entry: Obj, resources: list[Resource]) -> None:
    unknown = set(entry) - {"path", "patch", "target"}
    if unknown or ("path" in entry) == ("patch" in entry):
        raise KustomizeError(f"patch entry {entry}: give exactly one of path/patch, and target")
    text = (directory / entry["path"]).read_text() if "path" in entry else entry["patch"]
    patch = yaml.safe_load(text)
    target = entry.get("target")
    if isinstance(patch, list):
        if target is None:
            raise KustomizeError(f"a JSON 6902 patch needs a target: {entry}")
        matched = _matching(resources, target)
        for resource in matched:
            resource.obj = jsonpatch.apply_patch(resource.obj, patch)
        return
    if target is None:
        target = {"kind": patch["kind"], "name": patch["metadata"]["name"]}
    matched = _matching(resources, target)
    for resource in matched:
        resource.obj = _merge(resource.obj, patch, ())


def _matching(resources: list[Resource], target: Obj) -> list[Resource]:
    unknown = set(target) - {"kind", "name", "namespace"}
    if unknown:
        raise KustomizeError(f"patch target {target}: not supported: {sorted(unknown)}")
    matched = [
        r
        for r in resources
        if all(
            (r.obj["kind"] if key == "kind" else r.obj["metadata"].get(key)) == value
            for key, value in target.items()
        )
    ]
    if not matched:
        raise KustomizeError(f"patch target {target} matches no resource")
    return matched


def _merge(original: Any, patch: Any, path: tuple[str, ...]) -> Any:
    """A strategic-merge patch: maps merge, `null` deletes, keyed lists merge by key."""
    if isinstance(patch, dict) and isinstance(original, dict):
        directives = [key for key in patch if key.startswith("$")]
        if directives:
            raise KustomizeError(f"patch directives are not supported: {directives}")
        merged = dict(original)
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            elif key in merged:
                merged[key] = _merge(merged[key], value, (*path, key))
            else:
                merged[key] = copy.deepcopy(value)
        return merged
    if isinstance(patch, list) and isinstance(original, list):
        merge_key = MERGE_KEYS.get(path[-2:])
        if merge_key is None:
            return copy.deepcopy(patch)
        merged_list = list(original)
        added = []
        for item in patch:
            index = next(
                (i for i, old in enumerate(merged_list) if old.get(merge_key) == item[merge_key]),
                None,
            )
            if index is None:
                added.append(copy.deepcopy(item))
            else:
                merged_list[index] = _merge(merged_list[index], item, path)
        # Kustomize puts the entries only the patch has first.
        return added + merged_list
    return copy.deepcopy(patch)
