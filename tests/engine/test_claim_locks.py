"""A claim takes the items nobody holds and skips, never waits for, a row another
transaction has locked (another replica's claim, a batch holding its items).

PostgreSQL only: SQLite has one writer at a time, taken at BEGIN.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from tests.conftest import Store
from tests.engine.test_admission import config_for, enqueue
from tests.support.chain import Behaviour, chain_registry
from wq.engine import leases
from wq.engine.admission import dispatch
from wq.engine.claims import claim_for_workers, item_loads
from wq.engine.models import utcnow

# Long enough for a waiting claim to show (it fails then), short enough to fail fast.
LOCK_TIMEOUT = "2s"


def claim_one_statement(session: Session) -> list[uuid.UUID]:
    now = utcnow()
    claims = leases.claim(
        session,
        owner="me",
        limit=2,
        types=["chain"],
        now=now,
        lease_until=now + timedelta(seconds=30),
    )
    return [claim.id for claim in claims]


def claim_and_load(session: Session) -> list[uuid.UUID]:
    now = utcnow()
    taken = claim_for_workers(
        session,
        owner="me",
        types=["chain"],
        free=2,
        now=now,
        lease_until=now + timedelta(seconds=30),
        load=item_loads(chain_registry(Behaviour())),
    )
    return [claim.id for claim in taken.claims]


def lock_for_a_batch(session: Session) -> list[uuid.UUID]:
    items = leases.lock_claimable(session, types=["chain"], limit=2, now=utcnow())
    return [item.id for item in items]


@pytest.fixture
def held_and_free(store: Store) -> Iterator[tuple[uuid.UUID, uuid.UUID]]:
    """Two admitted items; the first (the claim's first choice) locked by another
    transaction until the test ends."""
    config = config_for(store, capacity=2)
    held, free = enqueue(store, config), enqueue(store, config)
    dispatch(store.sessions, config, clock=utcnow)
    with store.engine.connect() as holder:
        holder.execute(text("SELECT id FROM work_items WHERE id = :id FOR UPDATE"), {"id": held})
        yield held, free
        holder.rollback()


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
@pytest.mark.parametrize(
    "take",
    [claim_one_statement, claim_and_load, lock_for_a_batch],
    ids=["claim", "worker-claim", "batch-lock"],
)
def test_a_claim_skips_a_row_another_transaction_holds(
    store: Store,
    held_and_free: tuple[uuid.UUID, uuid.UUID],
    take: Callable[[Session], list[uuid.UUID]],
) -> None:
    _, free = held_and_free
    with store.sessions.begin() as session:
        # A claim that waits for the row fails here instead of hanging the test.
        session.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
        assert take(session) == [free]
