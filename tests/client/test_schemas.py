"""The client's answer shapes are the daemon's response models, seen as JSON.

`wq.client.schemas` repeats the daemon's models instead of importing them (that would
load FastAPI, SQLAlchemy and the engine at every `wq` command). These tests keep them in
step: the same models, fields, required fields and JSON types, nested models included;
only formats (date-time, uuid), enums, titles and descriptions may differ.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

from wq.client import api
from wq.client import schemas as client
from wq.daemon import schemas as daemon
from wq.daemon.routers import bulk, identity, pools, replicas, stats, submissions, work_items

PAIRS: list[tuple[Any, Any]] = [
    (client.WorkItemPublic, daemon.WorkItemPublic),
    (client.WorkItemPage, daemon.WorkItemPage),
    (client.HistoryPage, daemon.HistoryPage),
    (client.PendingEventPage, daemon.PendingEventPage),
    (client.Health, daemon.Health),
    (client.Retried, work_items.WorkItemPublic | work_items.WorkItemRef),
    (client.CancelPublic, work_items.CancelPublic),
    (client.SubmissionPublic, submissions.SubmissionPublic),
    (client.Pools, list[pools.PoolPublic]),
    (client.PoolPublic, pools.PoolPublic),
    (client.QueueEntries, list[pools.QueueEntryPublic]),
    (client.QueuePagePublic, pools.QueuePagePublic),
    (client.WhoamiPublic, identity.WhoamiPublic),
    (client.StatsPublic, stats.StatsPublic),
    (client.Replicas, list[replicas.ReplicaPublic]),
    (client.BulkPublic, bulk.BulkPublic),
]

# What JSON cannot tell apart, and names that only document.
IGNORED = {"title", "description", "format", "enum", "const", "default"}


def _json_schema(shape: Any) -> dict[str, Any]:
    if isinstance(shape, type) and issubclass(shape, BaseModel):
        return shape.model_json_schema()
    return TypeAdapter(shape).json_schema()


def normalised(node: Any) -> Any:
    """A JSON schema with only what a JSON document can show: types and structure."""
    if isinstance(node, list):
        return [normalised(value) for value in node]
    if not isinstance(node, dict):
        return node
    result: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("properties", "$defs"):
            # Names of fields and of models: kept whatever they are.
            result[key] = {name: normalised(schema) for name, schema in value.items()}
        elif key == "required":
            result[key] = sorted(value)
        elif key not in IGNORED:
            result[key] = normalised(value)
    return result


@pytest.mark.parametrize(("mine", "theirs"), PAIRS, ids=lambda shape: str(shape))
def test_a_client_shape_is_the_daemon_model_as_json(mine: Any, theirs: Any) -> None:
    ours, server = normalised(_json_schema(mine)), normalised(_json_schema(theirs))
    # A root model carries its own title only; the rest must be the same document.
    assert ours == server


def test_every_shape_the_client_checks_is_pinned_to_the_daemon() -> None:
    source = Path(api.__file__).read_text()
    checked = set(re.findall(r"shape=(\w+)", source))
    assert checked, "the client checks no answer"
    # The OpenAPI document is FastAPI's, not one of the daemon's models.
    assert checked - {"OpenApiPaths"} == {mine.__name__ for mine, _ in PAIRS}


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ({"foo": 1}, "authentication: missing (and 1 more)"),
        ([], "expected an object, got a list"),
        (None, "expected an object, got null"),
        (
            {
                "authentication": {"tier": "local", "identity": 5},
                "authorization": {"effective_permissions": {}, "matching_rules": []},
            },
            "authentication.identity: expected a string, got a number",
        ),
    ],
)
def test_a_problem_is_said_in_words(document: Any, expected: str) -> None:
    with pytest.raises(ValidationError) as caught:
        client.WhoamiPublic.model_validate(document)
    assert client.problem(caught.value) == expected


def test_a_count_must_be_a_number_not_text() -> None:
    lane = {"capacity": 1, "in_flight": "0", "queued": 0}
    with pytest.raises(ValidationError) as caught:
        client.LanePublic.model_validate(lane)
    assert client.problem(caught.value) == "in_flight: expected an integer, got a string"


def test_a_union_problem_does_not_name_the_client_models() -> None:
    with pytest.raises(ValidationError) as caught:
        client.CancelPublic.model_validate({"action": "cancelled", "item": {"id": "x"}})
    said = client.problem(caught.value)
    assert said.startswith("item.") and "WorkItem" not in said, said
