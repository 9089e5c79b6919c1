"""GitLab issue and note events → tasks, by the rules in `handled_types.task.issue_rules`.

The type's event resolver: for an `issue` event whose label changes add a rule's
label, an `issueLifecycle`-like task for that repository (dedup key SHA-256 of the
repository and the issue reference); for a `note` on a merge request that mentions a
rule's handle, a `review`-like task (dedup key from the note). Such tasks are never
autonomous, so never capped. The event is then stored on the tasks it made (the
handler records nothing: a task does not change on GitLab events).
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from wq.engine.config import PoolConfig
from wq.engine.events import storable
from wq.engine.models import utcnow
from wq.engine.registry import EventContext, SubmissionRejected, TypeRegistry
from wq.types.task.schemas import TaskCreate
from wq.types.task.settings import IssueRule, TaskSettings
from wq.types.task.submit import sha256, submit_task

ACTOR = "gitlab-rules"


def _titles(labels: Any) -> set[str]:
    if not isinstance(labels, list):
        return set()
    return {
        label["title"]
        for label in labels
        if isinstance(label, dict) and isinstance(label.get("title"), str)
    }


def _added_labels(payload: dict[str, Any]) -> set[str]:
    changes = payload.get("changes")
    if not isinstance(changes, dict) or not isinstance(changes.get("labels"), dict):
        return set()
    labels = changes["labels"]
    return _titles(labels.get("current")) - _titles(labels.get("previous"))


def _repository(payload: dict[str, Any]) -> str | None:
    project = payload.get("project")
    path = project.get("path_with_namespace") if isinstance(project, dict) else None
    return path if isinstance(path, str) and path and "\x00" not in path else None


def _project_of(rule: IssueRule, repository: str) -> str:
    # wq's project: the rule's, else the repository's group (a repository at the top
    # level is its own project).
    if rule.project:
        return rule.project
    group, _, _ = repository.rpartition("/")
    return group or repository


# GitLab's own bounds on an issue's title; a URL of its is far shorter than this. An
# event is taken from whoever holds the webhook secret, and a task's payload is shown
# in every list: its text is cut to these, as a note is to `NOTE_CHARS`.
TITLE_CHARS = 255
URL_CHARS = 2048
NOTE_CHARS = 4000


def _text(value: Any, limit: int) -> str | None:
    """A text field of the event, cut to `limit` characters; None unless text."""
    return value[:limit] if isinstance(value, str) else None


def _mentions(text: str, handle: str) -> bool:
    return re.search(rf"(?<![\w@]){re.escape(handle)}(?![\w-])", text) is not None


def _requests(
    payload: dict[str, Any], rules: list[IssueRule]
) -> list[tuple[IssueRule, dict[str, Any], str]]:
    """(rule, task payload, dedup key) for every rule the event matches."""
    kind = payload.get("object_kind")
    repository = _repository(payload)
    attributes = payload.get("object_attributes")
    if repository is None or not isinstance(attributes, dict):
        return []
    matched = []
    if kind == "issue":
        iid = attributes.get("iid")
        if not isinstance(iid, int):
            return []
        added = _added_labels(payload)
        for rule in rules:
            if rule.event == "issue_label_added" and rule.label in added:
                task_payload = {
                    "source": "gitlab",
                    "issue": iid,
                    "issue_url": _text(attributes.get("url"), URL_CHARS),
                    "title": _text(attributes.get("title"), TITLE_CHARS),
                    "label": rule.label,
                }
                matched.append((rule, task_payload, sha256(repository, f"#{iid}")))
    elif kind == "note" and attributes.get("noteable_type") == "MergeRequest":
        note = attributes.get("note")
        merge_request = payload.get("merge_request")
        note_id = attributes.get("id")
        if not isinstance(note, str) or not isinstance(merge_request, dict):
            return []
        iid = merge_request.get("iid")
        if not isinstance(iid, int) or not isinstance(note_id, int):
            return []
        for rule in rules:
            if rule.event == "mr_note_mention" and rule.handle and _mentions(note, rule.handle):
                task_payload = {
                    "source": "gitlab",
                    "merge_request": iid,
                    "note_id": note_id,
                    "note": note[:NOTE_CHARS],
                    "note_url": _text(attributes.get("url"), URL_CHARS),
                }
                matched.append(
                    (rule, task_payload, sha256(repository, f"!{iid}", f"note {note_id}"))
                )
    return matched


# The event kinds the task type's issue rules look at.
RESOLVED_KINDS = frozenset({"issue", "note"})


def make_resolver(settings: TaskSettings, registry: TypeRegistry) -> Any:
    """The task type's event resolver (bound to its settings and registry)."""

    def resolve(
        session: Session, kind: str, payload: Any
    ) -> tuple[list[uuid.UUID], datetime | None]:
        if kind not in RESOLVED_KINDS or not isinstance(payload, dict) or not settings.issue_rules:
            return [], None
        made: list[uuid.UUID] = []
        repository = _repository(payload)
        for rule, task_payload, key in _requests(payload, settings.issue_rules):
            assert repository is not None
            try:
                result = submit_task(
                    session,
                    TaskCreate(
                        project=_project_of(rule, repository),
                        kind=rule.kind,
                        repository=repository,
                        # Text from GitLab as the event is stored: NUL replaced.
                        payload=storable(task_payload),
                        dedup_key=key,
                    ),
                    settings=settings,
                    registry=registry,
                    pool=PoolConfig(),  # not autonomous: the cap never applies
                    now=utcnow(),
                    actor=ACTOR,
                    trigger={"source": "gitlab", "event": kind, "rule": rule.event},
                )
            except (SubmissionRejected, ValidationError):
                continue  # no task can be made of it (a repository path no task holds)
            if result.item is not None:
                made.append(result.item.id)
        return made, None

    return resolve


def handle(ctx: EventContext) -> None:
    """Events stored on a task change nothing: the task was made from them."""
