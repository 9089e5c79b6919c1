"""Task intake: validate kind and scope, derive the dedup key, queue through the engine.

Every producer (the API, the Grafana webhook, GitLab rules, schedules) goes through
`submit_task`, so a task is checked the same way whoever asks for it.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from wq.engine import items
from wq.engine.config import PoolConfig
from wq.engine.registry import SubmissionRejected, SubmitContext, SubmitResult, TypeRegistry
from wq.types.task.models import TaskItem
from wq.types.task.schemas import TaskCreate
from wq.types.task.settings import KindConfig, TaskSettings, scope_message


def sha256(*parts: str) -> str:
    """A dedup key from parts (length-prefixed, so no two part lists collide)."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode()
        digest.update(f"{len(data)}:".encode() + data)
    return digest.hexdigest()


def derived_dedup_key(kind_name: str, kind: KindConfig, payload: TaskCreate) -> str | None:
    """The key the kind's `dedup` rule makes for a submission, or None without a rule."""
    if not kind.dedup:
        return None
    values: list[str] = [kind_name]
    for field in kind.dedup:
        if field == "project":
            values.append(payload.project)
        elif field == "repository":
            values.append(payload.repository or "")
        else:
            value: Any = payload.payload.get(field.removeprefix("payload."))
            values.append(json.dumps(value, sort_keys=True))
    return sha256(*values)


def validate(settings: TaskSettings, payload: TaskCreate) -> KindConfig:
    """The kind's config; SubmissionRejected (422) for an unknown kind, a wrong scope or
    a payload its schema refuses."""
    kind = settings.kinds.get(payload.kind)
    if kind is None:
        known = ", ".join(sorted(settings.kinds)) or "none"
        raise SubmissionRejected(f"unknown task kind {payload.kind!r} (known: {known})")
    repository_scoped = kind.scope == "repository"
    if repository_scoped != (payload.repository is not None):
        raise SubmissionRejected(scope_message(payload.kind, repository_scoped))
    problems = kind.payload_problems(payload.payload)
    if problems:
        raise SubmissionRejected("; ".join(problems[:5]))
    return kind


def submit_task(
    session: Session,
    payload: TaskCreate,
    *,
    settings: TaskSettings,
    registry: TypeRegistry,
    pool: PoolConfig,
    now: datetime,
    actor: str,
    trigger: dict[str, Any],
) -> SubmitResult:
    """Take one task in (the caller commits)."""
    kind = validate(settings, payload)
    item = TaskItem(
        project=payload.project,
        lane=payload.lane or kind.lane,
        autonomous=payload.autonomous,
        dedup_key=payload.dedup_key or derived_dedup_key(payload.kind, kind, payload),
        kind=payload.kind,
        repository=payload.repository,
        payload=payload.payload,
        runner=kind.runner,
        run_generation=0,
        cancel_requested=False,
    )
    return items.submit(
        session, item, registry=registry, pool=pool, now=now, actor=actor, trigger=trigger
    )


def submit_from_api(
    session: Session, payload: TaskCreate, ctx: SubmitContext, settings: TaskSettings
) -> SubmitResult:
    """The handler of `POST /api/work-items/task`."""
    return submit_task(
        session,
        payload,
        settings=settings,
        registry=ctx.registry,
        pool=ctx.pool,
        now=ctx.now,
        actor=ctx.actor,
        trigger={"source": "api"},
    )
