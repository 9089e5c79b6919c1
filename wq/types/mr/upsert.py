"""MR submission: an upsert keyed on (project, source_branch).

Callers always send the desired state. No active item: a new one is created
(generation n+1 after a completed or cancelled one). An active item whose content hash,
target branch and other fields (title, description, labels, commit message, package,
source, change kind, auto-merge) all match is left unchanged; otherwise it is updated
and brought to the new state (a new hash or target pushes the branch again, a new
title or labels are set on the MR). A failed item is refreshed and retried. The idempotency key
`mr:{project}:{source_branch}:{generation}` is unique among non-terminal items, so
two racing submissions make one item: the loser's insert fails and it upserts again.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from wq.engine import items
from wq.engine.audit import AuditRecord, audit
from wq.engine.dimensions import set_dimension
from wq.engine.driver_reads import fetch_all
from wq.engine.items import ItemConflict
from wq.engine.models import ACTIVE, FAILED, WorkItem
from wq.engine.registry import SubmissionRejected, SubmitContext, SubmitResult, UnchangedCheck
from wq.types.mr.models import MrItem
from wq.types.mr.schemas import MrCreate, content_hash
from wq.types.mr.settings import MrSettings

RACE_RETRIES = 3


def idempotency_key(project: str, source_branch: str, generation: int) -> str:
    """The server-side idempotency key of one generation of a branch's MR."""
    return f"mr:{project}:{source_branch}:{generation}"


def submit_mr(
    session: Session, payload: MrCreate, ctx: SubmitContext, settings: MrSettings
) -> SubmitResult:
    """Upsert the MR item for a submission (the caller commits).

    An unchanged resubmission (the common case: callers send their desired state
    again and again) is decided on the item's locked row and writes nothing; the
    item is not loaded (`SubmitResult.row`). Only a change loads it, in a savepoint
    that a racing submission's insert can roll back.
    """
    params = _latest_params(payload, settings)
    digest = _digest(payload)
    for attempt in range(RACE_RETRIES):
        found = fetch_all(session, _LATEST, params)
        latest = found[0] if found else None
        if _leaves_unchanged(latest, payload, digest):
            return SubmitResult("unchanged", None, row=latest)
        try:
            with session.begin_nested():
                return _upsert(session, payload, ctx, digest, latest)
        except IntegrityError:
            # A concurrent submission of the same branch won; the next pass sees it.
            if attempt == RACE_RETRIES - 1:
                raise ItemConflict(
                    f"concurrent submissions for {payload.project} {payload.source_branch}; "
                    "submit again"
                ) from None
    raise AssertionError("unreachable")


_ITEMS = WorkItem.__table__
_DETAILS = MrItem.__table__
# The branch's newest generation as one row, locked: every `work_items` column, the
# details the API shows, and the description and commit message (with those, every
# submitted column the upsert compares). Built once, so that its cache key is too.
_LATEST = (
    select(
        *_ITEMS.c,
        *(_DETAILS.c[name] for name in MrItem.api_details_columns),
        _DETAILS.c.description,
        _DETAILS.c.commit_message,
    )
    .select_from(_ITEMS.join(_DETAILS, _DETAILS.c.id == _ITEMS.c.id))
    .where(
        _ITEMS.c.project == bindparam("project"),
        _DETAILS.c.source_branch == bindparam("source_branch"),
    )
    .order_by(_DETAILS.c.generation.desc())
    .limit(1)
    # Serializes with a worker that is finishing ensure_mr on this item. The answer's
    # dimensions are read after it (`wq.daemon`), so they are as new as the lock.
    .with_for_update()
)


def unchanged_check(settings: MrSettings) -> UnchangedCheck:
    """`submit_mr`'s "unchanged" answer as the API can decide it without a session."""
    return UnchangedCheck(
        statement=_LATEST,
        params=lambda payload: _latest_params(payload, settings),
        holds=lambda row, payload: _leaves_unchanged(row, payload, _digest(payload)),
    )


def _latest_params(payload: MrCreate, settings: MrSettings) -> dict[str, Any]:
    """`_LATEST`'s parameters for the payload's branch, if its project is handled."""
    if settings.entry_for(payload.project) is None:
        raise SubmissionRejected(
            f"project {payload.project} matches no entry of handled_types.mr.projects, "
            "so wq has no GitLab token for it"
        )
    return {"project": payload.project, "source_branch": payload.source_branch}


def _digest(payload: MrCreate) -> str:
    return content_hash([action.gitlab() for action in payload.file_actions])


def _changed_fields(latest: Any, payload: MrCreate, digest: str) -> list[str]:
    """The submitted columns (`MrItem.submitted_columns`) `payload` would change on `latest`."""
    wanted = {
        **payload.model_dump(mode="json", include=set(MrItem.submitted_columns)),
        "content_hash": digest,
    }
    changed = []
    for name in MrItem.submitted_columns:
        old, new = getattr(latest, name), wanted[name]
        if name == "labels":  # a set on GitLab: their order changes nothing
            old, new = sorted(old or []), sorted(new)
        if old != new:
            changed.append(name)
    return changed


def _leaves_unchanged(latest: Any, payload: MrCreate, digest: str) -> bool:
    """An active item already in the payload's state: nothing to do."""
    return (
        latest is not None
        and latest.phase == ACTIVE
        and not _changed_fields(latest, payload, digest)
    )


def _latest(session: Session, project: str, source_branch: str) -> MrItem | None:
    """The branch's newest generation, loaded and locked (as `_LATEST` reads it)."""
    return session.execute(
        select(MrItem)
        .where(MrItem.project == project, MrItem.source_branch == source_branch)
        .order_by(MrItem.generation.desc())
        .limit(1)
        .with_for_update()
    ).scalar_one_or_none()


def _refresh(item: MrItem, payload: MrCreate, digest: str) -> None:
    item.target_branch = payload.target_branch
    item.title = payload.title
    item.description = payload.description
    item.labels = list(payload.labels)
    item.commit_message = payload.commit_message
    item.file_actions = [action.gitlab() for action in payload.file_actions]
    item.content_hash = digest
    item.package = payload.package
    item.source = payload.source
    item.change_kind = payload.change_kind
    item.auto_merge = payload.auto_merge


def _upsert(
    session: Session, payload: MrCreate, ctx: SubmitContext, digest: str, latest: Any
) -> SubmitResult:
    """A new generation after `latest` (none, or terminal); else `latest`, changed or
    failed, updated (or retried)."""
    trigger = {"source": "api", "action": "submit"}
    if latest is None or latest.phase not in (ACTIVE, FAILED):
        generation = 0 if latest is None else latest.generation + 1
        item = MrItem(
            project=payload.project,
            lane="normal",
            autonomous=False,
            source_branch=payload.source_branch,
            generation=generation,
            idempotency_key=idempotency_key(payload.project, payload.source_branch, generation),
            draft=payload.draft,
        )
        _refresh(item, payload, digest)
        if latest is not None and latest.mr_iid is not None:
            # Should this generation adopt its predecessor's MR (reopened by hand), the
            # labels the service applied there are still the service's to remove.
            applied = session.scalar(
                select(_DETAILS.c.applied_labels).where(_DETAILS.c.id == latest.id)
            )
            item.applied_labels = list(applied or [])
        result = items.submit(
            session,
            item,
            registry=ctx.registry,
            pool=ctx.pool,
            now=ctx.now,
            actor=ctx.actor,
            trigger=trigger,
        )
        session.flush()
        return result
    # Changed, or failed: the item itself (locked by `_latest_row`) is updated.
    changed = session.get(MrItem, latest.id)
    assert changed is not None
    old = {"content_hash": changed.content_hash, "target_branch": changed.target_branch}
    fields = _changed_fields(changed, payload, digest)
    _refresh(changed, payload, digest)
    set_dimension(session, changed, "needs_mr", True)
    if changed.phase == FAILED:
        session.flush()  # retry re-reads the row: write the refreshed fields first
        items.retry(session, changed.id, registry=ctx.registry, now=ctx.now, actor=ctx.actor)
        return SubmitResult("retried", changed)
    audit(
        session,
        AuditRecord(
            "updated",
            ctx.actor,
            changed.id,
            old_state=old,
            new_state={
                "content_hash": digest,
                "target_branch": payload.target_branch,
                "fields": fields,
            },
            trigger=trigger,
        ),
    )
    items.settle(session, changed, ctx.registry, ctx.now, actor=ctx.actor, trigger=trigger)
    session.flush()
    return SubmitResult("updated", changed)


def retry_veto(session: Session, item: WorkItem) -> str | None:
    """An old generation may not come back while a newer item owns the branch."""
    assert isinstance(item, MrItem)
    latest = _latest(session, item.project, item.source_branch)
    if latest is not None and latest.id != item.id:
        return (
            f"a newer work item ({latest.id}) handles {item.project} {item.source_branch}; "
            "submit again instead"
        )
    return None
