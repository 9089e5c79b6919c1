"""MR submission: an upsert keyed on (project, source_branch).

Callers always send the desired state. No active item: a new one is created
(generation n+1 after a completed or cancelled one). An active item with the same
content hash and target branch is left unchanged; with another hash or target it is
updated and pushed again (a new target changes the branch as much as new content). A
failed item is refreshed and retried. The idempotency key
`mr:{project}:{source_branch}:{generation}` is unique among non-terminal items, so
two racing submissions make one item: the loser's insert fails and it upserts again.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from wq.engine import items
from wq.engine.audit import AuditRecord, audit
from wq.engine.dimensions import set_dimension
from wq.engine.items import ItemConflict
from wq.engine.models import ACTIVE, FAILED, WorkItem
from wq.engine.registry import SubmissionRejected, SubmitContext, SubmitResult
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
    """Upsert the MR item for a submission (the caller commits)."""
    if settings.entry_for(payload.project) is None:
        raise SubmissionRejected(
            f"project {payload.project} matches no entry of handled_types.mr.projects, "
            "so wq has no GitLab token for it"
        )
    for attempt in range(RACE_RETRIES):
        try:
            with session.begin_nested():
                return _upsert(session, payload, ctx)
        except IntegrityError:
            # A concurrent submission of the same branch won; the next pass sees it.
            if attempt == RACE_RETRIES - 1:
                raise ItemConflict(
                    f"concurrent submissions for {payload.project} {payload.source_branch}; "
                    "submit again"
                ) from None
    raise AssertionError("unreachable")


def _latest(session: Session, project: str, source_branch: str) -> MrItem | None:
    return session.execute(
        select(MrItem)
        .where(MrItem.project == project, MrItem.source_branch == source_branch)
        .order_by(MrItem.generation.desc())
        .limit(1)
        # Serializes with a worker that is finishing ensure_mr on this item.
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


def _upsert(session: Session, payload: MrCreate, ctx: SubmitContext) -> SubmitResult:
    digest = content_hash([action.gitlab() for action in payload.file_actions])
    latest = _latest(session, payload.project, payload.source_branch)
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
            item.applied_labels = list(latest.applied_labels)
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
    if (
        latest.phase == ACTIVE
        and latest.content_hash == digest
        and latest.target_branch == payload.target_branch
    ):
        return SubmitResult("unchanged", latest)
    old = {"content_hash": latest.content_hash, "target_branch": latest.target_branch}
    _refresh(latest, payload, digest)
    set_dimension(session, latest, "needs_mr", True)
    if latest.phase == FAILED:
        session.flush()  # retry re-reads the row: write the refreshed fields first
        items.retry(session, latest.id, registry=ctx.registry, now=ctx.now, actor=ctx.actor)
        return SubmitResult("retried", latest)
    audit(
        session,
        AuditRecord(
            "updated",
            ctx.actor,
            latest.id,
            old_state=old,
            new_state={"content_hash": digest, "target_branch": payload.target_branch},
            trigger=trigger,
        ),
    )
    items.settle(session, latest, ctx.registry, ctx.now, actor=ctx.actor, trigger=trigger)
    session.flush()
    return SubmitResult("updated", latest)


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
