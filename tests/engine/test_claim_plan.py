"""A claim reads about what it takes, however many items are admitted (issue 17).

The claim takes admitted items in ready-since order (`coalesce(run_after, admitted_at)`,
then seq). Without an index in that order PostgreSQL sorted every admitted item on every
claim, and updated the chosen rows through a hash join over the whole table. A fresh
database from the migration with a large admitted backlog, analyzed and not, and the
plan of the statement exactly as the engine sent it (custom and generic).

PostgreSQL only (the plan is PostgreSQL's).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from tests.conftest import filled_pg_database
from tests.support.chain import Behaviour, chain_registry
from tests.support.plans import capture, explain, scans, seq_scans
from wq.engine import leases
from wq.engine.claims import claim_for_workers, item_loads
from wq.engine.db import make_sessionmaker
from wq.engine.models import utcnow

pytestmark = pytest.mark.postgres

ITEMS = 20000
LIMIT = 10

# Admitted a second apart in reverse seq order, so ready-since order and seq order
# differ; every hundredth item waits out a backoff until later (not claimable yet).
FILL = f"""
INSERT INTO work_items (
    id, type, project, phase, attempts, admission, seq, lane, autonomous,
    queued_at, admitted_at, run_after, created_at, updated_at
)
SELECT gen_random_uuid(), 'chain', 'team/p' || (i % 50), 'active', 0, 'admitted', i,
    'normal', false, now(), now() - make_interval(secs => {ITEMS} - i),
    CASE WHEN i % 100 = 0 THEN now() + interval '1 hour' END, now(), now()
FROM generate_series(1, {ITEMS}) AS s(i)
"""


@pytest.fixture(scope="module")
def admitted() -> Iterator[tuple[str, Engine]]:
    """ITEMS admitted items in a database migrated just now."""
    with filled_pg_database("wq_claimplan", FILL) as database:
        yield database


def expected_first(engine: Engine) -> list[int]:
    with engine.begin() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT seq FROM work_items WHERE run_after IS NULL OR run_after <= now()"
                    " ORDER BY coalesce(run_after, admitted_at), seq LIMIT :limit"
                ),
                {"limit": LIMIT},
            ).scalars()
        )


def _sessions(engine: Engine, analyzed: bool) -> sessionmaker[Session]:
    """Sessions on the filled database, its statistics gathered first if `analyzed`."""
    if analyzed:
        with engine.begin() as conn:
            conn.execute(text("ANALYZE work_items"))
    return make_sessionmaker(engine)


def claim_ten(session: Session, now: datetime) -> list[leases.Claim]:
    """The claim as the scheduler makes it, for LIMIT items."""
    return leases.claim(
        session,
        owner="me",
        limit=LIMIT,
        types=["chain"],
        now=now,
        lease_until=now + timedelta(seconds=30),
    )


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-statistics", "analyzed"])
def test_a_claim_reads_the_items_it_takes_not_the_admitted_backlog(
    admitted: tuple[str, Engine], analyzed: bool
) -> None:
    url, engine = admitted
    sessions, now = _sessions(engine, analyzed), utcnow()
    with capture(engine) as sent, sessions.begin() as session:
        claims = claim_ten(session, now)
        seqs = [
            int(seq)
            for seq in session.execute(
                text("SELECT seq FROM work_items WHERE id = ANY(:ids)"),
                {"ids": [claim.id for claim in claims]},
            ).scalars()
        ]
        session.rollback()
    # The ten longest-ready items (admitted first), not the lowest seqs nor a backoff.
    assert sorted(seqs) == sorted(expected_first(engine))
    (update,) = [s for s in sent if "FOR UPDATE SKIP LOCKED" in s.statement]
    plan = explain(url, "claim", update.statement, dict(update.parameters))
    for kind, lines in (("custom", plan.custom), ("generic", plan.generic)):
        report = f"{kind} plan:\n" + "\n".join(lines)
        assert not seq_scans(lines), report
        assert not any("Sort Key" in line for line in lines), report
        # The candidates in index order, about as many as taken (a backoff or two
        # skipped), and the updated rows by primary key.
        assert sum(scan.read for scan in scans(lines)) <= 4 * LIMIT, report


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-statistics", "analyzed"])
def test_the_workers_claim_loads_what_it_takes_by_primary_key(
    admitted: tuple[str, Engine], analyzed: bool
) -> None:
    # The claim for workers is the claim above as a CTE, the items and their
    # dimensions read beside it: by primary key, never a scan of the table.
    url, engine = admitted
    sessions, now = _sessions(engine, analyzed), utcnow()
    with capture(engine) as sent, sessions.begin() as session:
        taken = claim_for_workers(
            session,
            owner="me",
            types=["chain"],
            free=LIMIT,
            now=now,
            lease_until=now + timedelta(seconds=30),
            load=item_loads(chain_registry(Behaviour())),
        )
        assert all(claim.item is not None for claim in taken.claims)
        seqs = [claim.item.seq for claim in taken.claims if claim.item is not None]
        session.rollback()
    assert sorted(seqs) == sorted(expected_first(engine))
    (claim,) = [s for s in sent if "FOR UPDATE SKIP LOCKED" in s.statement]
    plan = explain(url, "worker claim", claim.statement, dict(claim.parameters))
    for kind, lines in (("custom", plan.custom), ("generic", plan.generic)):
        report = f"{kind} plan:\n" + "\n".join(lines)
        assert not seq_scans(lines), report
        assert not any("Sort Key: (COALESCE" in line and "c." in line for line in lines), report
        assert sum(scan.read for scan in scans(lines)) <= 6 * LIMIT, report


def test_a_claim_rewrites_its_rows_in_place(admitted: tuple[str, Engine]) -> None:
    # No index holds a lease column and new pages keep room (fillfactor), so a claimed
    # row's new version stays in its page with no new index entries (a HOT update):
    # the claim writes its rows, not an entry in each of the table's indexes per row.
    _, engine = admitted
    sessions, now = _sessions(engine, analyzed=True), utcnow()
    hot = text("SELECT pg_stat_get_xact_tuples_hot_updated('work_items'::regclass)")
    with sessions.begin() as session:
        before = session.execute(hot).scalar_one()
        claims = claim_ten(session, now)
        in_place = session.execute(hot).scalar_one() - before
        session.rollback()
    assert len(claims) == LIMIT
    assert in_place == LIMIT
