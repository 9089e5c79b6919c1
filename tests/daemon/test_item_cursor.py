"""The client builds the list's cursor from an item (`wq.client.cursors`), as the TUI
does to refresh the rows after any item: it must be the cursor the daemon issues."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient

from tests.conftest import Store
from tests.daemon.test_api import T0, add_item
from wq.client.cursors import item_cursor
from wq.daemon.runtime import Runtime


def test_a_cursor_built_from_an_item_is_the_one_the_daemon_issues(
    client: TestClient, store: Store, runtime: Runtime
) -> None:
    # Microseconds that a careless conversion (float seconds, rounding) would lose.
    for i in range(5):
        add_item(store, runtime, now=T0 + timedelta(seconds=i, microseconds=999_999 - 7 * i))
    first = client.get("/api/work-items", params={"limit": 2}).json()
    assert first["next_cursor"] == item_cursor(first["items"][-1])
    # And any item's cursor lists exactly the items after it.
    everything = client.get("/api/work-items").json()["items"]
    after = client.get("/api/work-items", params={"cursor": item_cursor(everything[1])}).json()
    assert [i["id"] for i in after["items"]] == [i["id"] for i in everything[2:]]
