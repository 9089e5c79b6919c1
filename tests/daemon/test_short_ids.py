"""`GET /api/work-items?id_prefix=`: the items whose id starts with a short id's hex
digits, on SQLite and PostgreSQL. Ids are chosen so that prefixes share digits and
sit at both ends of their range (all 0s, all fs after the prefix)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from fastapi.testclient import TestClient

from tests.conftest import Store
from tests.daemon.test_api import T0, OtherItem, _ReadChainOnly, add_item
from wq.daemon.app import create_app
from wq.daemon.auth import Authenticator
from wq.daemon.runtime import Runtime

IDS = (
    "abcdef00-0000-4000-8000-000000000000",  # the lowest id of prefix abcdef
    "abcdef12-3456-4789-8abc-def012345678",
    "abcdefff-ffff-4fff-bfff-ffffffffffff",  # near the highest
    "abcdf000-0000-4000-8000-000000000001",  # abcdf: just after the range
    "abcdee99-0000-4000-8000-000000000002",  # abcdee: just before it
)


def _listed(client: TestClient, **params: Any) -> list[str]:
    response = client.get("/api/work-items", params=params)
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


def test_a_prefix_lists_exactly_the_items_whose_id_starts_with_it(
    client: TestClient, store: Store, runtime: Runtime
) -> None:
    for n, value in enumerate(IDS):
        add_item(store, runtime, now=T0 + timedelta(seconds=n), id=uuid.UUID(value))
    assert _listed(client, id_prefix="abcdef") == [IDS[2], IDS[1], IDS[0]]  # newest first
    assert _listed(client, id_prefix="ABCDEF12") == [IDS[1]]  # either case
    assert _listed(client, id_prefix="abcdef123456") == [IDS[1]]  # digits past the first dash
    assert _listed(client, id_prefix=IDS[2].replace("-", "")) == [IDS[2]]  # a whole id
    assert _listed(client, id_prefix="abcdf0") == [IDS[3]]
    assert _listed(client, id_prefix="012345") == []
    # It pages and combines with the other filters like any filter.
    first = client.get("/api/work-items", params={"id_prefix": "abcdef", "limit": 2}).json()
    assert [item["id"] for item in first["items"]] == [IDS[2], IDS[1]]
    rest = _listed(client, id_prefix="abcdef", cursor=first["next_cursor"])
    assert rest == [IDS[0]]
    assert _listed(client, id_prefix="abcdef", type="daemon_test_other") == []


def test_a_prefix_shows_only_the_types_the_caller_may_read(store: Store, runtime: Runtime) -> None:
    add_item(store, runtime, id=uuid.UUID(IDS[0]))
    add_item(store, runtime, kind=OtherItem, id=uuid.UUID(IDS[1]))
    runtime.authenticator = Authenticator([_ReadChainOnly()])
    with TestClient(
        create_app(runtime), headers={"Authorization": "Bearer chain-reader"}
    ) as reader:
        # An item the caller may not read is not there, as GET of its id is a 404.
        assert _listed(reader, id_prefix="abcdef") == [IDS[0]]
        assert _listed(reader, id_prefix="abcdef12") == []


def test_a_prefix_that_is_not_six_to_32_hex_digits_is_refused(client: TestClient) -> None:
    for bad in ("abcde", "abcdeg", "abcdef-1", "a" * 33, ""):
        response = client.get("/api/work-items", params={"id_prefix": bad})
        assert response.status_code == 422, (bad, response.text)
        assert "id_prefix" in response.text
