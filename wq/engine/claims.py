"""The claim for worker threads, and the audit of expired leases a claim takes over.

Items of types without cheap actions are leased to the free workers of a pass, and
loaded with their details and dimensions, by one statement on PostgreSQL (the claim
of `wq.engine.leases.claim` as a CTE, the items read beside it); on SQLite the claim
and one query for the items it took, in the same transaction. A worker starts from
what the claim read and reads nothing itself. Those of
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

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session, joinedload
from sqlalchemy.orm.attributes import set_committed_value

from wq.engine import leases, store
from wq.engine.audit import AuditRecord, audit
from wq.engine.item_loading import item_entity, item_query
from wq.engine.models import WorkItem
from wq.engine.registry import TypeRegistry

log = logging.getLogger("wq.engine.processing")


@dataclass(frozen=True)
class WorkerClaims:
    """What one claim for workers took; `full` when it got all it asked for."""

    claims: list[leases.Claim]
    full: bool


@dataclass(frozen=True)
class ItemLoads:
    """The statements that load claimed items of a registry's types (built once)."""

    items: Select[Any]  # items by id (`item_query`)
    claimed: Select[Any]  # PostgreSQL: the claim and its items in one statement


def item_loads(registry: TypeRegistry) -> ItemLoads:
    """The loads of claimed items for `claim_for_workers`.

    The one-statement claim reads the items beside the claim's UPDATE, so it sees
    them as of its snapshot: their lease as it was (set as claimed afterwards), and
    the stamp that goes with the details and dimensions it read. Should a row have
    changed after that snapshot and before the claim locked it, the worker's fence
    finds another stamp and reads the item again.
    """
    entity = item_entity(registry)
    claimed = leases.CLAIM_PG.cte("claimed")
    return ItemLoads(
        items=item_query(registry),
        claimed=select(entity, claimed.c.previous_owner, claimed.c.previous_until)
        .join(claimed, entity.id == claimed.c.id)
        .options(joinedload(entity.statuses))
        .order_by(func.coalesce(entity.run_after, entity.admitted_at), entity.seq),
    )


def claim_for_workers(
    session: Session,
    *,
    owner: str,
    types: Sequence[str],
    free: int,
    now: datetime,
    lease_until: datetime,
    load: ItemLoads | None = None,
) -> WorkerClaims:
    """Lease up to `free` items of `types`, one token each (caller commits).

    With `load` (`item_loads`) the claimed items are loaded in this transaction, as
    leased, and detached from the session (each claim's `item`), so that the commit
    does not expire them. The claim locks their rows until it commits.
    """
    if load is not None and free > 0 and types and store.is_postgres(session):
        claims = _claim_and_load(
            session,
            load,
            owner=owner,
            types=types,
            free=free,
            now=now,
            lease_until=lease_until,
        )
    else:
        claims = leases.claim(
            session, owner=owner, limit=free, types=types, now=now, lease_until=lease_until
        )
        if load is not None and claims:
            claims = _with_items(session, claims, load.items)
    audit_takeovers(session, owner, claims, lease_until)
    return WorkerClaims(claims, len(claims) == free)


def _claim_and_load(
    session: Session,
    load: ItemLoads,
    *,
    owner: str,
    types: Sequence[str],
    free: int,
    now: datetime,
    lease_until: datetime,
) -> list[leases.Claim]:
    """PostgreSQL: claim and load in one statement; the items detached, as leased."""
    token = leases.new_token()
    # Only what this statement loads is in a session that held nothing: then all of it
    # is detached at once (expunging item by item walks each one's dimensions).
    detach_all = not session.identity_map and not session.new
    rows = session.execute(
        load.claimed,
        {
            "types": list(types),
            "now": now,
            "limit": free,
            "owner": owner,
            "token": token,
            "lease_until": lease_until,
        },
    ).unique()
    claims: list[leases.Claim] = []
    for item, previous_owner, previous_until in rows:
        for key, value in (
            ("lease_owner", owner),
            ("lease_token", token),
            ("leased_until", lease_until),
        ):
            set_committed_value(item, key, value)
        if not detach_all:
            session.expunge(item)  # its dimensions too (the cascade)
        claims.append(leases.Claim(item.id, token, previous_owner, previous_until, item.type, item))
    if detach_all:
        session.expunge_all()
    return claims


def _with_items(
    session: Session, claims: list[leases.Claim], load: Select[Any]
) -> list[leases.Claim]:
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
    session: Session, owner: str, claims: list[leases.Claim], lease_until: datetime | None
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
