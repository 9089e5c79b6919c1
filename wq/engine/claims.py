"""One scheduler pass's claim: items for the free workers, then a batch of cheap ones.

Items of types with cheap actions finish in a batch without a worker
(`wq.engine.batch`), so a pass takes up to `batch_size` of them even when few workers
(or none) are free. Every item claimed in one pass shares one lease token. A claim
that takes over an expired lease is audited (`lease_taken_over`, naming the previous
owner) in the same transaction.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from wq.engine import store
from wq.engine.audit import AuditRecord, audit

log = logging.getLogger("wq.engine.processing")


@dataclass(frozen=True)
class ClaimPass:
    """What one pass claimed; `full` when it got all it asked for (more may wait)."""

    claims: list[store.Claim]
    full: bool


def claim_pass(
    session: Session,
    *,
    owner: str,
    types: Sequence[str],
    cheap_types: Sequence[str],
    free: int,
    batch_size: int,
    now: datetime,
    lease_until: datetime,
) -> ClaimPass:
    """Claim for `free` workers, and up to a batch of items of `cheap_types` (caller commits)."""
    token = str(uuid.uuid4())
    every_type_cheap = len(cheap_types) == len(types)
    first = max(free, batch_size) if every_type_cheap and cheap_types else free
    claims = store.claim(
        session,
        owner=owner,
        limit=first,
        types=types,
        now=now,
        lease_until=lease_until,
        token=token,
    )
    # With other types registered, the extra items must be of cheap types: an item
    # that needs a worker beyond the free ones would only be given back.
    extra = batch_size - len(claims) if cheap_types and not every_type_cheap else 0
    more = store.claim(
        session,
        owner=owner,
        limit=extra,
        types=cheap_types,
        now=now,
        lease_until=lease_until,
        token=token,
    )
    claims += more
    audit_takeovers(session, owner, claims, lease_until)
    return ClaimPass(claims, len(more) == extra if extra > 0 else len(claims) == first)


def audit_takeovers(
    session: Session, owner: str, claims: list[store.Claim], lease_until: datetime
) -> None:
    """One audit row per expired lease a claim took over, naming the old owner."""
    records = [
        AuditRecord(
            "lease_taken_over",
            owner,
            claim.id,
            old_state={
                "lease_owner": claim.previous_owner,
                "leased_until": claim.previous_until.isoformat() if claim.previous_until else None,
            },
            new_state={"lease_owner": owner, "leased_until": lease_until.isoformat()},
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
