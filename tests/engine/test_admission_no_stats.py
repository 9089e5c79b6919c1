"""Admission on a PostgreSQL table that has no statistics yet (issue 17).

Right after `wq db migrate` and a burst of submissions, before any ANALYZE, the planner
believes the queue is empty. The admission UPDATE was once planned then as a loop over
the whole queue per head (a 10 s pass with 3,000 queued), which is why
`admission_statements._ADMIT_HEADS_PG` gathers the heads into an array first, and then
found its rows by reading the whole queue through the partial index it believed empty,
which is why the UPDATE's own test of `admission` cannot use that index. These tests
keep it that way: a fresh database from the migration, a backlog bulk-inserted with
autovacuum off (large enough that a sequential scan is not the cheapest plan either),
and the plan of the statement exactly as the engine sent it (custom and generic).

PostgreSQL only (the statement is PostgreSQL's); a database of its own, because the
shared test database may have been analyzed by other tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy import Engine, text

from tests.conftest import filled_pg_database, make_config
from tests.support.plans import Plan, Sent, capture, explain, scans, seq_scans
from wq.engine.admission import dispatch
from wq.engine.config import Config
from wq.engine.db import make_sessionmaker
from wq.engine.models import ALERT_LANE, NORMAL_LANE, utcnow

pytestmark = pytest.mark.postgres

PROJECTS = 12
ITEMS = 20000
CAPACITY, ALERT_CAPACITY = 3, 1

# Item i goes to project i % PROJECTS, the first two rounds in the alert lane: every
# project has more queued work in each lane than its pool admits.
FILL = f"""
INSERT INTO work_items (
    id, type, project, phase, attempts, admission, seq, lane, autonomous,
    queued_at, created_at, updated_at
)
SELECT gen_random_uuid(), 'chain', 'team/p' || lpad((i % {PROJECTS})::text, 2, '0'), 'active',
    0, 'queued', nextval('wq_admission_seq'),
    CASE WHEN i < 2 * {PROJECTS} THEN '{ALERT_LANE}' ELSE '{NORMAL_LANE}' END,
    false, now(), now(), now()
FROM generate_series(0, {ITEMS} - 1) AS s(i) ORDER BY i
"""


@dataclass
class Backlog:
    """A fresh database holding a queued backlog the planner has no statistics of."""

    url: str
    engine: Engine
    config: Config


def assert_no_statistics(engine: Engine) -> None:
    """work_items was never analyzed: the planner only knows it from its creation."""
    with engine.begin() as conn:
        reltuples = conn.execute(
            text("SELECT reltuples FROM pg_class WHERE relname = 'work_items'")
        ).scalar_one()
        analyzed = conn.execute(
            text(
                "SELECT last_analyze, last_autoanalyze, last_vacuum, last_autovacuum"
                " FROM pg_stat_user_tables WHERE relname = 'work_items'"
            )
        ).one()
        columns = conn.execute(
            text("SELECT count(*) FROM pg_stats WHERE tablename = 'work_items'")
        ).scalar_one()
    assert reltuples == -1, f"work_items has statistics: reltuples={reltuples}"
    assert tuple(analyzed) == (None, None, None, None), analyzed
    assert columns == 0, f"{columns} column statistics for work_items"


@pytest.fixture(scope="module")
def backlog() -> Iterator[Backlog]:
    """ITEMS queued items over PROJECTS projects, in a database migrated just now."""
    with filled_pg_database("wq_nostats", FILL) as (url, engine):
        assert_no_statistics(engine)
        config = make_config(
            url, pools={"default": {"capacity": CAPACITY, "alert_capacity": ALERT_CAPACITY}}
        )
        yield Backlog(url, engine, config)


def requeue(engine: Engine) -> None:
    """Put what a pass admitted back in line (same seq), so the next looks at the same queue."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE work_items SET admission = 'queued', admitted_at = NULL"
                " WHERE admission = 'admitted'"
            )
        )
        conn.execute(text("TRUNCATE audit_log"))


def admission_pass(backlog: Backlog) -> tuple[list[tuple[str, str, int]], Sent]:
    """One real admission pass: what it admitted, and its admit UPDATE as sent."""
    with capture(backlog.engine) as sent:
        admitted = dispatch(make_sessionmaker(backlog.engine), backlog.config, clock=utcnow)
    updates = [s for s in sent if "UPDATE work_items AS w" in s.statement]
    assert len(updates) == 1, [s.statement for s in sent]
    return [(entry.project, entry.lane, entry.seq) for entry in admitted], updates[0]


def explain_admit(backlog: Backlog, sent: Sent) -> Plan:
    """EXPLAIN ANALYZE of the admit UPDATE on the queue the pass saw (rolled back)."""
    requeue(backlog.engine)
    plan = explain(backlog.url, "admit", sent.statement, dict(sent.parameters))
    assert_no_statistics(backlog.engine)
    return plan


def expected_heads(engine: Engine) -> list[tuple[str, str, int]]:
    """Per project and lane, the first `capacity` queued items by seq."""
    with engine.begin() as conn:
        rows = conn.execute(
            text(
                "SELECT project, lane, seq FROM work_items WHERE admission = 'queued'"
                " ORDER BY project, lane = :normal, seq"
            ),
            {"normal": NORMAL_LANE},
        ).all()
    heads: list[tuple[str, str, int]] = []
    taken: dict[tuple[str, str], int] = {}
    for project, lane, seq in rows:
        limit = ALERT_CAPACITY if lane == ALERT_LANE else CAPACITY
        if taken.get((project, lane), 0) < limit:
            taken[(project, lane)] = taken.get((project, lane), 0) + 1
            heads.append((project, lane, int(seq)))
    return heads


def test_a_pass_without_statistics_admits_the_heads_and_loops_once_per_lane(
    backlog: Backlog,
) -> None:
    requeue(backlog.engine)
    expected = expected_heads(backlog.engine)
    assert len(expected) == PROJECTS * (CAPACITY + ALERT_CAPACITY)

    admitted, sent = admission_pass(backlog)

    # Exactly each lane's capacity, its oldest items, listed in FIFO order per lane.
    assert admitted == expected
    with backlog.engine.begin() as conn:
        stored = conn.execute(
            text("SELECT count(*) FROM work_items WHERE admission = 'admitted'")
        ).scalar_one()
    assert stored == len(expected)

    plan = explain_admit(backlog, sent)
    lanes = 2 * PROJECTS
    for kind, lines in (("custom", plan.custom), ("generic", plan.generic)):
        report = f"{kind} plan:\n" + "\n".join(lines)
        assert not seq_scans(lines), report
        read = scans(lines)
        # The probe for waiting work, the in-flight count and the head probe of every
        # lane, the lock of the heads, and the UPDATE itself.
        assert {scan.alias for scan in read} == {"a", "e", "q", "t", "w"}, report
        # Each lane is probed once: never again for every queued row of a join.
        assert all(scan.loops <= lanes for scan in read), report
        # The head probes read the heads, not the lanes behind them; the probe for
        # waiting work reads one row a lane.
        probes = sum(scan.read for scan in read if scan.alias == "q")
        assert probes <= len(expected) + lanes, report
        assert sum(scan.read for scan in read if scan.alias == "e") <= lanes, report


def test_a_pass_without_statistics_locks_and_updates_the_heads_by_primary_key(
    backlog: Backlog,
) -> None:
    requeue(backlog.engine)
    admitted, sent = admission_pass(backlog)
    plan = explain_admit(backlog, sent)
    for kind, lines in (("custom", plan.custom), ("generic", plan.generic)):
        for alias in ("t", "w"):  # the heads locked, then updated
            touched = [scan for scan in scans(lines) if scan.alias == alias]
            assert touched and sum(scan.read for scan in touched) <= 2 * len(admitted), (
                f"{kind} plan:\n" + "\n".join(lines)
            )


def test_the_admission_lock_looks_for_queued_work_by_the_queue_index(backlog: Backlog) -> None:
    """A pass takes its lock only if one of its projects has queued work: one probe of
    the queue index per project at most, even before any statistics."""
    requeue(backlog.engine)
    projects = [f"team/p{n:02d}" for n in range(PROJECTS)]
    with capture(backlog.engine) as sent:
        dispatch(make_sessionmaker(backlog.engine), backlog.config, projects, clock=utcnow)
    locks = [s for s in sent if "pg_advisory_xact_lock" in s.statement]
    assert len(locks) == 1, [s.statement for s in sent]
    requeue(backlog.engine)
    plan = explain(backlog.url, "lock", locks[0].statement, dict(locks[0].parameters))
    for kind, lines in (("custom", plan.custom), ("generic", plan.generic)):
        report = f"{kind} plan:\n" + "\n".join(lines)
        assert not seq_scans(lines), report
        read = scans(lines)
        assert {scan.alias for scan in read} == {"e"}, report
        assert sum(scan.read for scan in read) <= PROJECTS, report
