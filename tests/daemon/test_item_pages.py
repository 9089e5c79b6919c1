"""A page of the list is read as rows (wq.daemon.reads) and shows items as GET item does.

On SQLite and PostgreSQL, with items of the real types (mr, task), a generic type that
reads its details from the loaded item, and one without details.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, inspect, select

from tests.conftest import Store
from tests.daemon.test_api import T0, OtherItem
from tests.support.chain import new_chain_item
from wq.daemon.reads import ITEM_COLUMNS, NEWEST_FIRST, page_documents, page_select
from wq.daemon.runtime import Runtime
from wq.daemon.schemas import WorkItemPublic
from wq.engine.dimensions import set_dimension
from wq.engine.items import submit
from wq.engine.models import WorkItem
from wq.types import KNOWN_TYPES, load_all_models
from wq.types.mr.models import MrItem
from wq.types.task.models import TaskItem


def mr_fields(n: int) -> dict[str, Any]:
    return {
        "package": f"pkg{n}",
        "source": None,
        "change_kind": "sync",
        "source_branch": f"wq/sync-{n}",
        "target_branch": "main",
        "title": f"Sync {n}",
        "description": "not shown",
        "labels": ["sync", f"n{n}"],
        "applied_labels": ["sync"],
        "commit_message": "not shown either",
        "file_actions": [{"action": "update", "file_path": "a.txt", "content": "x" * 100}],
        "content_hash": f"{n:064x}",
        "generation": n,
        "draft": bool(n % 2),
        "auto_merge": False,
        "mr_iid": 40 + n,
        "mr_url": f"https://gitlab.example.com/g/p/-/merge_requests/{40 + n}",
        "head_pipeline_id": 2**40 + n,
    }


def task_fields(n: int, *, finished: bool) -> dict[str, Any]:
    return {
        "kind": "review",
        "repository": None if finished else "ops/app",
        "payload": {"goal": f"review {n}", "nested": {"list": [1, 2.5, None, "é"]}},
        "runner": "command",
        "run_id": f"run-{n}",
        "started_at": T0 + timedelta(seconds=n),
        "finished_at": T0 + timedelta(minutes=n, microseconds=123) if finished else None,
        "exit_status": 3 if finished else None,
        "log_tail": "line one\nline two\n" if finished else None,
        "cancel_requested": not finished,
    }


def add(store: Store, runtime: Runtime, item: WorkItem, seconds: int) -> uuid.UUID:
    """Submit an unsaved item created `seconds` after T0; its id."""
    with store.sessions() as session:
        intake = submit(
            session,
            item,
            registry=runtime.registry,
            pool=store.config.pool_for(item.project),
            now=T0 + timedelta(seconds=seconds),
            actor="test",
            trigger={"source": "test"},
        )
        session.commit()
        assert intake.item is not None
        return intake.item.id


def add_items(store: Store, runtime: Runtime) -> list[uuid.UUID]:
    """Items of every kind, created in this order; some have dimensions."""
    made: list[WorkItem] = [
        MrItem(project="group/rpms", lane="normal", autonomous=False, **mr_fields(1)),
        new_chain_item("group/alpha"),  # details from code, no table of its own
        TaskItem(project="ops", lane="normal", autonomous=True, **task_fields(2, finished=True)),
        OtherItem(project="group/alpha", lane="normal", autonomous=False),  # no details
        MrItem(project="group/rpms", lane="normal", autonomous=False, **mr_fields(4)),
        TaskItem(project="ops", lane="alert", autonomous=False, **task_fields(5, finished=False)),
    ]
    ids = [add(store, runtime, item, seconds) for seconds, item in enumerate(made)]
    with store.sessions() as session:
        for n, item_id in enumerate(ids):
            item = session.get(WorkItem, item_id)
            assert item is not None
            for step in range(n % 3):
                set_dimension(session, item, f"step{step}", bool(step % 2), detail={"n": n})
        session.commit()
    return ids


def test_a_page_of_every_kind_shows_each_item_as_get_item_does(
    client: TestClient, store: Store, runtime: Runtime
) -> None:
    ids = add_items(store, runtime)

    page = client.get("/api/work-items", params={"limit": 50}).json()

    assert [item["id"] for item in page["items"]] == [str(i) for i in reversed(ids)]
    assert page["next_cursor"] is None
    for item in page["items"]:
        assert item == client.get(f"/api/work-items/{item['id']}").json()
    shown = {item["id"]: item for item in page["items"]}
    mr = shown[str(ids[4])]
    assert mr["type"] == "mr"
    assert mr["details"]["title"] == "Sync 4" and mr["details"]["labels"] == ["sync", "n4"]
    assert mr["details"]["head_pipeline_id"] == 2**40 + 4
    assert not {"description", "commit_message", "file_actions", "applied_labels"} & set(
        mr["details"]
    )
    task = shown[str(ids[2])]
    assert task["details"]["payload"] == {
        "goal": "review 2",
        "nested": {"list": [1, 2.5, None, "é"]},
    }
    assert task["details"]["finished_at"] == "2024-05-01T12:02:00.000123+00:00"
    assert shown[str(ids[1])]["details"] == {"steps": ["step1", "step2", "step3"]}
    assert shown[str(ids[3])]["details"] == {}
    assert [len(shown[str(i)]["dimensions"]) for i in ids] == [0, 1, 2, 0, 1, 2]


def test_get_item_shows_each_kind_as_its_loaded_item_does(
    client: TestClient, store: Store, runtime: Runtime
) -> None:
    # GET item reads rows like the list; submit, retry and cancel answer with the
    # loaded item (`WorkItemPublic.of`): the same document.
    ids = add_items(store, runtime)
    for item_id in ids:
        with store.sessions() as session:
            item = session.get(WorkItem, item_id)
            assert item is not None
            loaded = WorkItemPublic.of(item).model_dump(mode="json")
        assert client.get(f"/api/work-items/{item_id}").json() == loaded
    assert client.get(f"/api/work-items/{uuid.uuid4()}").status_code == 404


def test_pages_of_mixed_kinds_with_filters_and_cursors(
    client: TestClient, store: Store, runtime: Runtime
) -> None:
    ids = add_items(store, runtime)

    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = client.get("/api/work-items", params=params).json()
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [str(i) for i in reversed(ids)]
    tasks = client.get("/api/work-items", params={"type": "task"}).json()["items"]
    assert [item["id"] for item in tasks] == [str(ids[5]), str(ids[2])]
    assert tasks[0]["details"]["repository"] == "ops/app"


def test_an_item_deleted_while_its_page_is_read(store: Store, runtime: Runtime) -> None:
    # The page's rows carry the details of mr and task items; a generic item's are
    # loaded afterwards, and one deleted by then is left out (not a server error).
    ids = add_items(store, runtime)
    with store.sessions() as session:
        page = select(*ITEM_COLUMNS).order_by(*NEWEST_FIRST).limit(50)
        rows = session.execute(page_select(page)).all()
    with store.sessions() as session:
        session.execute(delete(WorkItem).where(WorkItem.id.in_([ids[0], ids[3]])))
        session.commit()

    with store.sessions() as session:
        documents = page_documents(session, rows)

    assert [document["id"] for document in documents] == [ids[5], ids[4], ids[2], ids[1], ids[0]]
    assert documents[-1]["details"]["title"] == "Sync 1"  # as read
    assert documents[-1]["dimensions"] == []


def _mappers() -> list[Any]:
    load_all_models()
    return list(inspect(WorkItem).polymorphic_map.values())


@pytest.mark.parametrize("name", sorted(KNOWN_TYPES))
def test_every_type_names_the_columns_its_details_read(name: str) -> None:
    # A page hands each type a row of its `api_details_columns` alone: reading any
    # other attribute there would fail, so `details_of` must read those only.
    (mapper,) = [m for m in _mappers() if m.polymorphic_identity == name]
    kind = mapper.class_
    assert kind.api_details_columns, f"{name} reads its page as objects"
    assert set(kind.api_details_columns) <= set(mapper.local_table.c.keys())
    assert not set(kind.api_details_columns) & set(kind.api_unshown)
    item = kind()
    row = SimpleNamespace(**{column: getattr(item, column) for column in kind.api_details_columns})
    assert kind.details_of(row) == item.details_dict()
