"""The claim for worker threads, and the audit of expired leases a claim takes over.

Items of types without cheap actions are leased to the free workers of a pass in one
statement (`wq.engine.store.claim`); those of types with cheap actions are taken by
batches (`wq.engine.batch`). A claim that takes over an expired lease is audited
(`lease_taken_over`, naming the previous owner) in the same transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from wq.engine import store
from wq.engine.audit import AuditRecord, audit

log = logging.getLogger("wq.engine.processing")


@dataclass(frozen=True)
class WorkerClaims:
    """What one claim for workers took; `full` when it got all it asked for."""

    claims: list[store.Claim]
    full: bool


def claim_for_workers(
    session: Session,
    *,
    owner: str,
    types: Sequence[str],
    free: int,
    now: datetime,
    lease_until: datetime,
) -> WorkerClaims:
    """Lease up to `free` items of `types`, one token each (caller commits)."""
    claims = store.claim(
        session, owner=owner, limit=free, types=types, now=now, lease_until=lease_until
    )
    audit_takeovers(session, owner, claims, lease_until)
    return WorkerClaims(claims, len(claims) == free)


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
