"""JSON documents at the door: undecodable is a 400, unstorable a 422, nothing written."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from tests.conftest import Store
from wq.engine.models import WorkItem

JSON = {"Content-Type": "application/json"}


def item_count(store: Store) -> int:
    with store.sessions() as session:
        return int(session.scalar(select(func.count()).select_from(WorkItem)) or 0)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            '{"project": "group/app", "payload": ' + nested(600) + "}",
            "payload: nested deeper than 32 levels",
        ),
        ('{"project": "group/app", "payload": ' + nested(100_000) + "}", "nested deeper than 32"),
        ('{"project": "group/app", "payload": {"a": NaN}}', "NaN is not a JSON number"),
        ('{"project": "group/app", "payload": {"a": -Infinity}}', "-Infinity is not a JSON"),
        (
            '{"project": "group/app", "payload": "' + "x" * 3_800_000 + '"}',
            "payload: 3.6 MB, at most 256 KiB",
        ),
        # Just over: it said `256 KiB, at most 256 KiB`.
        (
            '{"project": "group/app", "payload": "' + "x" * 262_200 + '"}',
            "payload: 262,202 bytes, at most 262,144 bytes",
        ),
        # A number beyond a float's range was stored as null.
        ('{"project": "group/app", "payload": {"a": 1e999}}', "1e999 is out of the range"),
        ('{"project": "group/app", "payload": [-2E+400]}', "-2E+400 is out of the range"),
        # Integers too: 4,000 digits were stored; past 4,300 Python's own hint was told.
        ('{"project": "group/app", "payload": {"a": ' + "9" * 4000 + "}}", "is out of the range"),
        ('{"project": "group/app", "payload": [-' + "9" * 5000 + "]}", "is out of the range"),
        # An unpaired surrogate escape was a 500 (the size check could not encode it).
        ('{"project": "group/app", "payload": {"a": "\\ud800"}}', "payload: holds text that"),
        ('{"project": "group/app", "dedup_key": "\\udc00x"}', "dedup_key: holds text that"),
        ('{"project": "d\\ud800emo"}', "project: holds text that is not valid Unicode"),
        ('{"project": "group/app", "\\udfff": 1}', "a field's name holds text that"),
    ],
    ids=[
        "deep",
        "very-deep",
        "nan",
        "infinity",
        "large",
        "just-over",
        "overflow",
        "negative-overflow",
        "huge-integer",
        "integer-past-python",
        "surrogate",
        "surrogate-key",
        "surrogate-project",
        "surrogate-name",
    ],
)
def test_unstorable_document_is_422_naming_the_limit_and_writes_nothing(
    client: TestClient, store: Store, body: str, message: str
) -> None:
    response = client.post("/api/work-items/chain", content=body, headers=JSON)
    assert response.status_code == 422, response.text[:300]
    assert message in response.json()["error"]
    assert item_count(store) == 0
    # The list is still readable for everyone.
    assert client.get("/api/work-items").status_code == 200


def test_document_at_the_limits_is_accepted(client: TestClient, store: Store) -> None:
    body = '{"project": "group/app", "dedup_key": "k", "note": ' + nested(32) + "}"
    response = client.post("/api/work-items/chain", content=body, headers=JSON)
    assert response.status_code != 422 or "nested" not in response.text, response.text


@pytest.mark.parametrize(
    "path",
    [
        "/api/work-items/chain",
        "/api/work-items/mr",
        "/api/work-items/task",
        "/api/work-items/00000000-0000-0000-0000-000000000000/retry",
    ],
)
def test_undecodable_body_is_400_on_every_route(client: TestClient, path: str) -> None:
    response = client.post(path, content=b'{"project": ', headers=JSON)
    assert response.status_code == 400, response.text
    assert "not valid JSON" in response.json()["error"]
