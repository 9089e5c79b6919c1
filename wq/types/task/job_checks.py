"""What a kubernetes runner's settings may hold that the API server refuses on every start.

Such a setting would pass the start and then fail each task of its kinds once its
starts ran out (`max_start_failures`); checked with the config instead, naming the key.
Two are checked here: a Job template naming a namespace (the Job is created in the
runner's `namespace`, and the API server refuses a body naming another), and resource
amounts that are not Kubernetes quantities (`500m`, `1Gi`, `2`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

# Kubernetes' own pattern of a quantity (apimachinery's resource.Quantity).
_QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


def quantity_problem(value: Any) -> str | None:
    """Why `value` is not an amount Kubernetes takes for a resource (None if it is)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return f"{value!r} is not a quantity (such as 500m, 1Gi or 2)"
    text = str(value)
    if not _QUANTITY.match(text):
        return f"{text!r} is not a quantity (such as 500m, 1Gi or 2)"
    if text.startswith("-"):
        return f"{text!r}: a resource amount cannot be negative"
    return None


def resources_problems(resources: Any, key: str) -> Iterator[tuple[str, str]]:
    """(key, problem) for each amount of a container's `resources` that is refused."""
    if not isinstance(resources, Mapping):
        yield key, "must be a mapping (limits, requests)"
        return
    for part in ("limits", "requests"):
        amounts = resources.get(part)
        if amounts is None:
            continue
        if not isinstance(amounts, Mapping):
            yield f"{key}.{part}", "must map resource names to quantities"
            continue
        for name, value in amounts.items():
            problem = quantity_problem(value)
            if problem is not None:
                yield f"{key}.{part}.{name}", problem


def template_problems(
    template: Mapping[str, Any], key: str, namespace: str
) -> Iterator[tuple[str, str]]:
    """(key, problem) for what a `job:` template holds that every start would fail on."""
    metadata = template.get("metadata")
    if isinstance(metadata, Mapping) and metadata.get("namespace") not in (None, namespace):
        yield (
            f"{key}.metadata.namespace",
            f"Jobs are created in runners.kubernetes.namespace ({namespace}); set it there",
        )
    spec = template.get("spec")
    pod = spec.get("template") if isinstance(spec, Mapping) else None
    pod_spec = pod.get("spec") if isinstance(pod, Mapping) else None
    containers = pod_spec.get("containers") if isinstance(pod_spec, Mapping) else None
    for index, container in enumerate(containers if isinstance(containers, list) else []):
        if isinstance(container, Mapping) and "resources" in container:
            where = f"{key}.spec.template.spec.containers.{index}.resources"
            yield from resources_problems(container["resources"], where)
