"""GitLab issue and note events mapped to tasks by `issue_rules`."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from tests.conftest import Store
from tests.types.task.helpers import KINDS, task_daemon
from wq.engine.envelope import event_from_payload
from wq.engine.events import ingest
from wq.types.task.models import TaskItem

SECRET_ENV = "WQ_TEST_GITLAB_SECRET"
RULES = [
    {"event": "issue_label_added", "label": "agent::lifecycle", "kind": "lifecycle"},
    {"event": "mr_note_mention", "handle": "@agent", "kind": "review", "project": "shop"},
]
KINDS_WITH_LIFECYCLE = {**KINDS, "lifecycle": {**KINDS["review"]}}


def issue_event(previous: list[str], current: list[str], iid: int = 7) -> dict[str, Any]:
    return {
        "object_kind": "issue",
        "event_type": "issue",
        "project": {"id": 1, "path_with_namespace": "shop/api"},
        "object_attributes": {
            "id": 100 + iid,
            "iid": iid,
            "title": "Checkout breaks",
            "url": f"https://gitlab.example/shop/api/-/issues/{iid}",
            "action": "update",
            "updated_at": "2026-12-01 05:00:00 UTC",
        },
        "labels": [{"title": title} for title in current],
        "changes": {
            "labels": {
                "previous": [{"title": title} for title in previous],
                "current": [{"title": title} for title in current],
            }
        },
    }


def note_event(note: str, note_id: int = 55, repository: str = "shop/api") -> dict[str, Any]:
    return {
        "object_kind": "note",
        "event_type": "note",
        "project": {"id": 1, "path_with_namespace": repository},
        "object_attributes": {
            "id": note_id,
            "note": note,
            "noteable_type": "MergeRequest",
            "url": "https://gitlab.example/shop/api/-/merge_requests/3#note_55",
            "updated_at": "2026-12-01 05:00:00 UTC",
        },
        "merge_request": {"iid": 3, "source_branch": "fix", "target_branch": "main"},
    }


def tasks(runtime: Any) -> list[TaskItem]:
    with runtime.sessions() as session:
        # Tasks made at once share their creation time: seq keeps their order.
        query = select(TaskItem).order_by(TaskItem.created_at, TaskItem.seq)
        rows = list(session.execute(query).scalars())
        session.expunge_all()
        return rows


@pytest.fixture(autouse=True)
def secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, "hook-secret")


def test_label_added_makes_one_task_and_redelivery_is_a_dedup_hit(
    store: Store, tmp_path: Path
) -> None:
    with task_daemon(
        store, tmp_path / "runs", start=False, kinds=KINDS_WITH_LIFECYCLE, issue_rules=RULES
    ) as (runtime, _):

        def deliver(document: dict[str, Any]) -> int:
            return ingest(
                runtime.sessions, runtime.registry, event_from_payload(document), source="webhook"
            )

        assert deliver(issue_event([], ["bug"])) == 0  # another label: nothing
        assert deliver(issue_event(["bug"], ["bug", "agent::lifecycle"])) == 1
        assert deliver(issue_event(["bug"], ["bug", "agent::lifecycle"])) == 1  # redelivered
        assert deliver(issue_event(["agent::lifecycle"], ["agent::lifecycle", "x"])) == 0
        made = tasks(runtime)
        assert len(made) == 1
        task = made[0]
        assert (task.kind, task.project, task.repository) == ("lifecycle", "shop", "shop/api")
        assert task.payload["issue"] == 7 and not task.autonomous and task.lane == "normal"
        expected = hashlib.sha256(b"8:shop/api" + b"2:#7").hexdigest()
        assert task.dedup_key == expected


def test_a_note_mentioning_the_handle_on_an_mr_asks_for_a_review_over_the_webhook(
    store: Store, tmp_path: Path
) -> None:
    with task_daemon(
        store,
        tmp_path / "runs",
        start=False,
        kinds=KINDS_WITH_LIFECYCLE,
        issue_rules=RULES,
    ) as (runtime, client):
        runtime.webhook_secret = "hook-secret"
        headers = {"X-Gitlab-Token": "hook-secret"}
        for note in ("thanks @agentsmith", "cc agent", "@agent please review"):
            response = client.post("/api/webhooks/gitlab", json=note_event(note), headers=headers)
            assert response.status_code == 202, response.text
        made = tasks(runtime)
        assert [(t.kind, t.project, t.repository) for t in made] == [("review", "shop", "shop/api")]
        assert made[0].payload["merge_request"] == 3 and made[0].payload["note_id"] == 55


def test_rules_need_known_repository_scoped_kinds() -> None:
    from wq.engine.config import ConfigError
    from wq.engine.registry import TypeRegistry
    from wq.types.task import register

    with pytest.raises(ConfigError, match=r"issue_rules.0.kind: GitLab rules need a repository"):
        register(
            TypeRegistry(),
            {"issue_rules": [{"event": "issue_label_added", "label": "x", "kind": "echo"}]},
        )


@pytest.mark.parametrize("repository", ["../etc", "a/b/", "org/app\u202e"])
def test_a_note_from_a_repository_no_task_can_hold_is_taken_and_makes_nothing(
    store: Store, tmp_path: Path, repository: str
) -> None:
    with task_daemon(
        store, tmp_path / "runs", start=False, kinds=KINDS_WITH_LIFECYCLE, issue_rules=RULES
    ) as (runtime, client):
        runtime.webhook_secret = "hook-secret"
        headers = {"X-Gitlab-Token": "hook-secret"}
        event = note_event("@agent please review", repository=repository)
        response = client.post("/api/webhooks/gitlab", json=event, headers=headers)
        assert response.status_code == 202, response.text
        assert tasks(runtime) == []


def test_an_issue_title_holding_nul_makes_its_task_with_the_nul_replaced(
    store: Store, tmp_path: Path
) -> None:
    """The database cannot hold NUL: the event was deleted from the queue and lost."""
    with task_daemon(
        store, tmp_path / "runs", start=False, kinds=KINDS_WITH_LIFECYCLE, issue_rules=RULES
    ) as (runtime, _):
        event = issue_event([], ["agent::lifecycle"])
        event["object_attributes"]["title"] = "nul\u0000title"
        made = ingest(runtime.sessions, runtime.registry, event_from_payload(event), source="sqs")
        assert made == 1
        (task,) = tasks(runtime)
        assert task.payload["title"] == "nul\ufffdtitle"


def test_an_event_with_megabytes_of_text_makes_a_task_of_bounded_size(
    store: Store, tmp_path: Path
) -> None:
    """An issue event with an 8 MB title made a task whose payload (shown in every list,
    and passed to a Kubernetes Job, which it could not fit) was 8 MB."""
    with task_daemon(
        store, tmp_path / "runs", start=False, kinds=KINDS_WITH_LIFECYCLE, issue_rules=RULES
    ) as (runtime, _):
        event = issue_event([], ["agent::lifecycle"])
        event["object_attributes"]["title"] = "t" * 8_000_000
        event["object_attributes"]["url"] = "https://gitlab.example/" + "u" * 8_000_000
        made = ingest(runtime.sessions, runtime.registry, event_from_payload(event), source="sqs")
        assert made == 1
        (task,) = tasks(runtime)
        assert task.payload["title"] == "t" * 255
        assert len(task.payload["issue_url"]) == 2048
