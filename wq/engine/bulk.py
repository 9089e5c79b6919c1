"""Retry or cancel many items at once: the items a selector matches, a bounded number.

The selection is read first (oldest first, `limit` + 1 rows, so the caller learns
whether more match); then each item is retried or cancelled in a transaction of its
own with the same rules and audit rows as one at a time, so one that changed meanwhile
(a conflict) is reported and does not undo the others.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, Select, false, func, or_, select
from sqlalchemy.orm import Session, sessionmaker

from wq.engine import items as item_service
from wq.engine.models import ACTIVE, CANCELLED, FAILED, WorkItem
from wq.engine.registry import TypeRegistry

RETRYABLE = (FAILED, CANCELLED)


@dataclass(frozen=True)
class Selector:
    """Which items: every given field must hold."""

    phase: str | None = None
    type: str | None = None
    project: str | None = None
    kind: str | None = None
    error_contains: str | None = None
    older_than: timedelta | None = None
    ids: tuple[uuid.UUID, ...] | None = None


@dataclass(frozen=True)
class Outcome:
    """What happened to one selected item (`error` says why it was not done)."""

    id: uuid.UUID
    type: str
    outcome: str
    error: str | None = None


def _phase(action: str, phase: str | None) -> str:
    """The phase the action takes items from (retry: failed unless told cancelled)."""
    wanted = ACTIVE if action == "cancel" else phase or FAILED
    if wanted not in (RETRYABLE if action == "retry" else (ACTIVE,)):
        raise ValueError(f"{action} takes no {wanted} items")  # the API's schema says so
    return wanted


def statement(
    action: str,
    selector: Selector,
    *,
    types: Iterable[str],
    registry: TypeRegistry,
    now: datetime,
    limit: int,
) -> Select[uuid.UUID, str, str]:
    """The ids, types and projects of the items to act on, oldest first, `limit` + 1.

    `types` are those the caller may act on; `kind` is a column of a type's own model,
    so it narrows the selection to the types that have one.
    """
    allowed = sorted(set(types) & set(registry.names))
    if selector.type is not None:
        allowed = [name for name in allowed if name == selector.type]
    conditions: list[ColumnElement[bool]] = [WorkItem.phase == _phase(action, selector.phase)]
    if selector.ids is not None:
        conditions.append(WorkItem.id.in_(selector.ids))
    if selector.project is not None:
        conditions.append(WorkItem.project == selector.project)
    if selector.error_contains:
        needle = selector.error_contains.lower()
        conditions.append(func.lower(WorkItem.error).contains(needle, autoescape=True))
    if selector.older_than is not None:
        conditions.append(WorkItem.updated_at < now - selector.older_than)
    if selector.kind is not None:
        kinds = {
            name: registry.get(name).model
            for name in allowed
            if hasattr(registry.get(name).model, "kind")
        }
        allowed = sorted(kinds)
        conditions.append(
            or_(
                false(),  # no type with kinds: nothing matches
                *(
                    WorkItem.id.in_(select(model.id).where(model.kind == selector.kind))  # type: ignore[attr-defined]
                    for model in kinds.values()
                ),
            )
        )
    return (
        select(WorkItem.id, WorkItem.type, WorkItem.project)
        .where(WorkItem.type.in_(allowed), *conditions)
        .order_by(WorkItem.created_at, WorkItem.id)
        .limit(limit + 1)
    )


def unmatched(
    session: Session,
    action: str,
    selector: Selector,
    selected: Iterable[uuid.UUID],
    *,
    types: Iterable[str],
    registry: TypeRegistry,
) -> list[Outcome]:
    """A `skipped` outcome for each named id (`selector.ids`) that was not selected, in
    the order given, saying why: not found (or of a type the caller may not act on,
    as one at a time), in another phase, or outside the selector's other fields."""
    if selector.ids is None:
        return []
    chosen = set(selected)
    missing = [item_id for item_id in dict.fromkeys(selector.ids) if item_id not in chosen]
    if not missing:
        return []
    allowed = set(types) & set(registry.names)
    rows = session.execute(
        select(WorkItem.id, WorkItem.type, WorkItem.phase).where(WorkItem.id.in_(missing))
    )
    found = {row.id: row for row in rows if row.type in allowed}
    wanted = _phase(action, selector.phase)
    outcomes = []
    for item_id in missing:
        row = found.get(item_id)
        if row is None:
            outcomes.append(Outcome(item_id, "", "skipped", f"work item {item_id} not found"))
            continue
        why = (
            f"is {row.phase}, not {wanted}"
            if row.phase != wanted
            else "does not match the selector's other fields"
        )
        outcomes.append(Outcome(item_id, row.type, "skipped", f"work item {item_id} {why}"))
    return outcomes


def act(
    sessions: sessionmaker[Session],
    action: str,
    selected: Iterable[tuple[uuid.UUID, str]],
    *,
    registry: TypeRegistry,
    actor: str,
    now: Callable[[], datetime],
    before: Callable[[Session, uuid.UUID, str], None] | None = None,
) -> list[Outcome]:
    """Retry or cancel each selected item in its own transaction; one outcome each.

    `before` runs in each item's transaction first (the caller's audit of its permission).
    """
    outcomes = []
    for item_id, item_type in selected:
        try:
            with sessions.begin() as session:
                if before is not None:
                    before(session, item_id, item_type)
                if action == "retry":
                    item_service.retry(session, item_id, registry=registry, now=now(), actor=actor)
                    outcome = "retried"
                else:
                    outcome, _ = item_service.cancel(
                        session, item_id, registry=registry, now=now(), actor=actor
                    )
        except (item_service.ItemConflict, item_service.ItemNotFound) as err:
            outcomes.append(Outcome(item_id, item_type, "skipped", str(err)))
        else:
            outcomes.append(Outcome(item_id, item_type, outcome))
    return outcomes
