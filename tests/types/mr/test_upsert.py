"""MR submissions: hash normalization, every arrow of the upsert diagram, the race."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import func, select

from tests.conftest import Store
from tests.types.mr.helpers import TOKEN_ENV, mr_registry, payload
from wq.engine.config import ConfigError, PoolConfig
from wq.engine.items import set_phase
from wq.engine.models import WorkItem, utcnow
from wq.engine.registry import SubmissionRejected, SubmitContext, SubmitResult, TypeRegistry
from wq.types.mr.models import MrItem
from wq.types.mr.schemas import MrCreate, content_hash
from wq.types.mr.settings import parse_settings
from wq.types.mr.upsert import submit_mr


def submit(store: Store, registry: TypeRegistry, **overrides: Any) -> tuple[str, uuid.UUID]:
    item_type = registry.get("mr")
    ctx = SubmitContext(registry=registry, pool=PoolConfig(), actor="tester", now=utcnow())
    with store.sessions.begin() as session:
        result: SubmitResult = submit_mr(
            session, MrCreate.model_validate(payload(**overrides)), ctx, item_type.settings
        )
        assert result.item_id is not None
        return result.outcome, result.item_id


def mr(store: Store, item_id: uuid.UUID) -> MrItem:
    with store.sessions() as session:
        item = session.get(WorkItem, item_id)
        assert isinstance(item, MrItem)
        session.expunge_all()
        return item


# ---------------------------------------------------------------- content hash


def test_hash_ignores_order_of_actions_and_keys() -> None:
    one = [
        {"action": "update", "file_path": "b", "content": "x"},
        {"file_path": "a", "content": "y", "action": "create"},
    ]
    two = [
        {"content": "y", "action": "create", "file_path": "a"},
        {"action": "update", "content": "x", "file_path": "b"},
    ]
    assert content_hash(one) == content_hash(two)
    assert len(content_hash(one)) == 64


def test_hash_changes_with_content_path_and_action() -> None:
    base = [{"action": "update", "file_path": "a", "content": "x"}]
    variants = [
        [{"action": "update", "file_path": "a", "content": "x2"}],
        [{"action": "update", "file_path": "b", "content": "x"}],
        [{"action": "create", "file_path": "a", "content": "x"}],
    ]
    assert all(content_hash(base) != content_hash(variant) for variant in variants)


@pytest.mark.parametrize(
    "action",
    [
        {"action": "create", "file_path": "a"},  # no content
        {"action": "delete", "file_path": "a", "content": "x"},
        {"action": "move", "file_path": "a", "content": "x"},  # no previous_path
        {"action": "update", "file_path": "/abs", "content": "x"},
        {"action": "update", "file_path": "a", "content": "%%%", "encoding": "base64"},
        {"action": "rename", "file_path": "a"},
        {"action": "update", "file_path": "a", "content": "x", "previous_path": "b"},
    ],
)
def test_bad_file_actions_are_refused(action: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        MrCreate.model_validate(payload(file_actions=[action]))


def test_same_source_and_target_branch_is_refused() -> None:
    with pytest.raises(ValidationError, match="must differ"):
        MrCreate.model_validate(payload(source_branch="main"))


# ---------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("project", "entry"),
    [
        ("redhat/rhel/src", "redhat/rhel/src"),
        ("redhat/rhel/src/kernel", "redhat/rhel/src"),
        ("redhat/hummingbird/rpms", "redhat/hummingbird/rpms"),
        ("redhat/hummingbird/containers/x", "redhat/hummingbird"),
        ("redhat/rhel/srcfoo", None),
        ("other/project", None),
    ],
)
def test_token_entry_exact_then_longest_prefix(
    monkeypatch: pytest.MonkeyPatch, project: str, entry: str | None
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "t")
    settings = parse_settings(
        {
            "projects": {
                "redhat/rhel/src": {"token_env": TOKEN_ENV},
                "redhat/hummingbird": {"token_env": TOKEN_ENV},
                "redhat/hummingbird/rpms": {"token_env": TOKEN_ENV, "gitlab_url": "https://x"},
            }
        }
    )
    found = settings.entry_for(project)
    assert (found[0] if found else None) == entry


def test_missing_token_variable_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WQ_NO_SUCH_TOKEN", raising=False)
    with pytest.raises(ConfigError) as err:
        parse_settings({"projects": {"g/p": {"token_env": "WQ_NO_SUCH_TOKEN"}}}, source="c.yml")
    assert "handled_types.mr.projects.g/p.token_env" in str(err.value)
    assert "WQ_NO_SUCH_TOKEN" in str(err.value)


def test_unknown_setting_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"handled_types\.mr\.gitlab_uri: unknown key"):
        parse_settings({"gitlab_uri": "x"}, source="c.yml")


# ---------------------------------------------------------------- upsert


def test_created_then_unchanged_then_updated(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    registry = mr_registry(monkeypatch)
    outcome, item_id = submit(store, registry)
    assert outcome == "created"
    created = mr(store, item_id)
    assert created.idempotency_key == "mr:group/project:wq/sync-1:0"
    assert created.admission == "queued" and created.details_dict()["package"] == "kernel"

    assert submit(store, registry) == ("unchanged", item_id)
    # A new title alone is an update too: the MR is brought to it.
    assert submit(store, registry, title="Another title") == ("updated", item_id)
    assert mr(store, item_id).title == "Another title"
    assert submit(store, registry, title="Another title") == ("unchanged", item_id)
    # Another target changes the branch as much as new content does.
    assert submit(store, registry, target_branch="release") == ("updated", item_id)
    assert mr(store, item_id).target_branch == "release"

    new_actions = [{"action": "update", "file_path": "sources", "content": "v3\n"}]
    changed = {"title": "Another title", "file_actions": new_actions}
    assert submit(store, registry, **changed) == ("updated", item_id)
    updated = mr(store, item_id)
    assert updated.file_actions == [{**new_actions[0], "encoding": "text"}]
    assert updated.content_hash != created.content_hash
    assert updated.target_branch == "main"
    assert updated.status("needs_mr").status == "true"  # type: ignore[union-attr]


def test_failed_item_is_retried_and_terminal_ones_start_a_new_generation(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = mr_registry(monkeypatch)
    _, first = submit(store, registry)
    with store.sessions.begin() as session:
        item = session.get(WorkItem, first)
        item.attempts = 5  # type: ignore[union-attr]
        set_phase(session, item, "failed", actor="t", trigger={"source": "test"}, error="boom")  # type: ignore[arg-type]
    assert submit(store, registry) == ("retried", first)
    retried = mr(store, first)
    assert (retried.phase, retried.attempts, retried.error) == ("active", 0, None)
    assert retried.admission == "queued"

    with store.sessions.begin() as session:
        set_phase(
            session,
            session.get(WorkItem, first),
            "completed",
            actor="t",  # type: ignore[arg-type]
            trigger={"source": "test"},
        )
    outcome, second = submit(store, registry)
    assert outcome == "created" and second != first
    assert mr(store, second).idempotency_key == "mr:group/project:wq/sync-1:1"
    assert mr(store, second).generation == 1


def test_unknown_project_is_rejected_and_nothing_is_stored(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = mr_registry(monkeypatch)
    with pytest.raises(SubmissionRejected, match="elsewhere/project"):
        submit(store, registry, project="elsewhere/project")
    with store.sessions() as session:
        assert session.execute(select(func.count()).select_from(WorkItem)).scalar_one() == 0


def test_two_simultaneous_submissions_make_one_item(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = mr_registry(monkeypatch)
    barrier = threading.Barrier(6)
    results: list[tuple[str, uuid.UUID]] = []
    errors: list[BaseException] = []

    def go() -> None:
        barrier.wait()
        try:
            results.append(submit(store, registry))
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=go) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(outcome for outcome, _ in results) == ["created"] + ["unchanged"] * 5
    assert len({item_id for _, item_id in results}) == 1


def test_an_old_generation_cannot_be_retried_over_a_newer_one(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wq.engine.items import ItemConflict, retry

    registry = mr_registry(monkeypatch)
    _, old = submit(store, registry)
    with store.sessions.begin() as session:
        set_phase(
            session,
            session.get(WorkItem, old),
            "cancelled",
            actor="t",  # type: ignore[arg-type]
            trigger={"source": "test"},
        )
    _, new = submit(store, registry)
    assert new != old
    with store.sessions.begin() as session, pytest.raises(ItemConflict, match="newer work item"):
        retry(session, old, registry=registry, now=utcnow(), actor="t")
    assert mr(store, old).phase == "cancelled"
    with store.sessions.begin() as session:
        set_phase(
            session,
            session.get(WorkItem, new),
            "failed",
            actor="t",  # type: ignore[arg-type]
            trigger={"source": "test"},
        )
    with store.sessions.begin() as session:
        assert retry(session, new, registry=registry, now=utcnow(), actor="t").phase == "active"
