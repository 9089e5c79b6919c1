"""A stored payload the API cannot write back never fails a list or the item's read."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest
from sqlalchemy import update

from tests.conftest import Store
from tests.types.task.helpers import task_daemon
from wq.types.task.models import TaskItem


def test_an_unshowable_row_is_marked_and_the_list_still_answers(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with task_daemon(store, tmp_path / "runs", start=False) as (runtime, client):
        bad = client.post("/api/work-items/task", json={"project": "p", "kind": "echo"})
        good = client.post("/api/work-items/task", json={"project": "p", "kind": "echo"})
        assert bad.status_code == good.status_code == 201
        bad_id = bad.json()["item"]["id"]
        deep: object = []
        for _ in range(600):
            deep = [deep]
        # Bypass the door: a row stored before it checked payloads.
        with runtime.sessions() as session, session.begin():
            session.execute(
                update(TaskItem).where(TaskItem.id == uuid.UUID(bad_id)).values(payload={"a": deep})
            )
        with caplog.at_level(logging.ERROR, logger="wq.daemon.schemas"):
            for _ in range(3):
                listed = client.get("/api/work-items")
                assert listed.status_code == 200, listed.text[:300]
            one = client.get(f"/api/work-items/{bad_id}")
        assert one.status_code == 200, one.text[:300]
        assert one.json()["details"] == {"error": "the stored details cannot be shown"}
        items = {item["id"]: item for item in listed.json()["items"]}
        assert items[bad_id]["details"] == {"error": "the stored details cannot be shown"}
        assert items[good.json()["item"]["id"]]["details"]["kind"] == "echo"
        logged = [r for r in caplog.records if bad_id in r.getMessage()]
        assert len(logged) == 1, logged
