"""A claim takes the items nobody holds and skips, never waits for, a row another
transaction has locked (another replica's claim, a batch holding its items); so does a
heartbeat, which extends the other leases.

PostgreSQL only: SQLite has one writer at a time, taken at BEGIN.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from tests.conftest import Store, make_config
from tests.engine.helpers import load, submit
from tests.engine.test_admission import config_for, enqueue
from tests.support.chain import Behaviour, chain_registry
from tests.support.waiting import wait_for
from wq.engine import leases
from wq.engine.admission import dispatch
from wq.engine.claims import claim_for_workers, item_loads
from wq.engine.models import utcnow
from wq.engine.processing import ProcessingManager

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


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_heartbeat_extends_every_lease_but_that_of_a_row_another_transaction_holds(
    store: Store, managers: list[Any]
) -> None:
    behaviour = Behaviour(sleep={"step1": 4.0})
    # Leases of a minute: the heartbeat's own loop (every 20 s) stays out of the way.
    config = make_config(store.url, processing={"lease_seconds": 60.0})
    registry = chain_registry(behaviour)
    held = submit(store.sessions, registry, config, "team/held").item.id  # type: ignore[union-attr]
    free = submit(store.sessions, registry, config, "team/free").item.id  # type: ignore[union-attr]
    manager = ProcessingManager(store.sessions, registry, config)
    manager.start()
    managers.append(manager)
    wait_for(lambda: behaviour.actions_of(held) and behaviour.actions_of(free), message="running")
    before = load(store.sessions, free).leased_until
    assert before is not None

    with store.engine.connect() as holder:
        holder.execute(text("SELECT id FROM work_items WHERE id = :id FOR UPDATE"), {"id": held})
        started = time.monotonic()
        extended = manager.heartbeat()
        # At once, not after the statement timeout (10 s, which would fail every lease).
        assert time.monotonic() - started < 5
        holder.rollback()

    assert extended == 1
    after = load(store.sessions, free).leased_until
    assert after is not None and after > before
