"""The claim for worker threads, and the audit of expired leases a claim takes over.

Items of types without cheap actions are leased to the free workers of a pass in one
statement (`wq.engine.store.claim`), and the items it took are loaded in the same
transaction by one more query (their rows, details and dimensions, whatever their
number): a worker starts from what the claim read and reads nothing itself. Those of
types with cheap actions are taken by batches (`wq.engine.batch`). A claim that takes
over an expired lease is audited (`lease_taken_over`, naming the previous owner) in
the same transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, bindparam, select
from sqlalchemy.orm import Session, joinedload, with_polymorphic

from wq.engine import store
from wq.engine.audit import AuditRecord, audit
from wq.engine.models import WorkItem
from wq.engine.registry import TypeRegistry

log = logging.getLogger("wq.engine.processing")


@dataclass(frozen=True)
class WorkerClaims:
    """What one claim for workers took; `full` when it got all it asked for."""

    claims: list[store.Claim]
    full: bool


def item_query(registry: TypeRegistry) -> Select[Any]:
    """One query for items of any registered type, with their details and dimensions.

    Its `item_ids` parameter (expanding) names the items.
    """
    models = [
        model
        for model in (registry.get(name).model for name in registry.names)
        if model is not WorkItem
    ]
    entity: Any = with_polymorphic(WorkItem, models) if models else WorkItem
    return (
        select(entity)
        .where(entity.id.in_(bindparam("item_ids", expanding=True)))
        .options(joinedload(entity.statuses))
    )


def claim_for_workers(
    session: Session,
    *,
    owner: str,
    types: Sequence[str],
    free: int,
    now: datetime,
    lease_until: datetime,
    load: Select[Any] | None = None,
) -> WorkerClaims:
    """Lease up to `free` items of `types`, one token each (caller commits).

    With `load` (an `item_query`) the claimed items are loaded in this transaction,
    as leased, and detached from the session (each claim's `item`): the rows are
    locked by the claim until commit, so nobody changes them between the two
    statements, and the commit does not expire them.
    """
    claims = store.claim(
        session, owner=owner, limit=free, types=types, now=now, lease_until=lease_until
    )
    audit_takeovers(session, owner, claims, lease_until)
    if load is not None and claims:
        claims = _with_items(session, claims, load)
    return WorkerClaims(claims, len(claims) == free)


def _with_items(
    session: Session, claims: list[store.Claim], load: Select[Any]
) -> list[store.Claim]:
    """The claims with their items loaded (one query) and detached from the session."""
    loaded = session.execute(
        load.execution_options(populate_existing=True),
        {"item_ids": [claim.id for claim in claims]},
    )
    items: dict[Any, WorkItem] = {item.id: item for item in loaded.unique().scalars()}
    for item in items.values():
        session.expunge(item)  # its dimensions too (the cascade)
    return [claim._replace(item=items.get(claim.id)) for claim in claims]


def audit_takeovers(
    session: Session, owner: str, claims: list[store.Claim], lease_until: datetime | None
) -> None:
    """One audit row per expired lease a claim took over, naming the old owner.

    `lease_until` is the new lease (None: a batch holds the row locked instead).
    """
    records = [
        AuditRecord(
            "lease_taken_over",
            owner,
            claim.id,
            old_state={
                "lease_owner": claim.previous_owner,
                "leased_until": claim.previous_until.isoformat() if claim.previous_until else None,
            },
            new_state={
                "lease_owner": owner,
                "leased_until": lease_until.isoformat() if lease_until else None,
            },
            trigger={"source": "claim", "reason": "lease expired"},
        )
        for claim in claims
        if claim.previous_until is not None
    ]
    if records:
        log.warning(
            "took over %d work item(s) whose lease had expired: %s",
            len(records),
            ", ".join(f"{c.id} (from {c.previous_owner})" for c in claims if c.previous_until),
        )
        audit(session, *records)
