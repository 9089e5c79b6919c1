"""`/api/stats` reads its window, however many items the database keeps (issue 32).

The runs of the window's ends (admitted -> done) need each ended item's `admitted_at`.
Read as a join, PostgreSQL could start from the items instead of the window: with a
history whose statistics say that no item carries an `admitted_at` it scanned every item
ever kept, then looked each admitted one up in the audit trail. A database of its own
with a history of terminal items, analyzed, then a day of ends; the statements exactly
as `compute` sent them, custom and generic plans. PostgreSQL only (the plan is PostgreSQL's).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from tests.conftest import filled_pg_database
from tests.support.plans import capture, explain, scans
from wq.engine import stats
from wq.engine.models import utcnow

pytestmark = pytest.mark.postgres

HISTORY = 30000
ENDED = 200
RUN_SECONDS = 120

# Releases of each ended item in the window: a busy window, whose ends are a few of
# its rows.
BUSY = 50

# Terminal items of days ago (no admitted_at: cancelled while queued, or seeded);
# then ENDED items that ran RUN_SECONDS each and ended in the last hours, every item's
# end in the audit trail, and the ended items' admissions and releases.
FILL = f"""
INSERT INTO work_items (
    id, type, project, phase, attempts, admission, lane, autonomous, created_at, updated_at
)
SELECT gen_random_uuid(), 'chain', 'hist/p' || (i % 50), 'completed', 0, 'done', 'normal',
    false, now() - interval '3 days' - make_interval(secs => i), now() - interval '3 days'
FROM generate_series(1, {HISTORY}) AS s(i);
"""
ENDS = f"""
INSERT INTO work_items (
    id, type, project, phase, attempts, admission, lane, autonomous, admitted_at,
    created_at, updated_at
)
SELECT gen_random_uuid(), 'chain', 'team/p' || (i % 5), 'completed', 0, 'done', 'normal',
    false, now() - make_interval(secs => 60 * i + {RUN_SECONDS}),
    now() - make_interval(secs => 60 * i + {RUN_SECONDS} + 5), now() - make_interval(secs => 60 * i)
FROM generate_series(1, {ENDED}) AS s(i);

INSERT INTO audit_log (at, event_type, work_item_id, actor, new_state, trigger)
SELECT w.updated_at, 'phase_changed', w.id, 'test',
    jsonb_build_object('phase', 'completed', 'project', w.project), '{{"source": "test"}}'
FROM work_items w;

INSERT INTO audit_log (at, event_type, work_item_id, actor, new_state, trigger)
SELECT w.updated_at - make_interval(secs => k), 'released', w.id, 'test',
    jsonb_build_object('phase', 'active', 'project', w.project), '{{"source": "test"}}'
FROM work_items w CROSS JOIN generate_series(1, {BUSY}) AS k
WHERE w.admitted_at IS NOT NULL;

INSERT INTO audit_log (at, event_type, work_item_id, actor, new_state, trigger, metadata)
SELECT w.admitted_at, 'admitted', w.id, 'test',
    jsonb_build_object('phase', 'active', 'project', w.project), '{{"source": "test"}}',
    jsonb_build_object('queued_seconds', 5)
FROM work_items w WHERE w.admitted_at IS NOT NULL;
"""


@pytest.fixture(scope="module")
def history() -> Iterator[tuple[str, Engine]]:
    # The items' statistics from before the day's ends: as far as the planner knows,
    # no item has an `admitted_at`.
    fills = (FILL, "ANALYZE work_items", ENDS, "ANALYZE audit_log")
    with filled_pg_database("wq_statsplan", *fills) as database:
        yield database


@pytest.mark.parametrize("item_types", [None, ["chain"]], ids=["all types", "one type"])
def test_the_runs_of_a_day_read_its_ends_not_the_history(
    history: tuple[str, Engine], item_types: list[str] | None
) -> None:
    url, engine = history
    with Session(engine) as session, capture(engine) as sent:
        found = stats.compute(
            session,
            end=utcnow(),
            window=timedelta(hours=24),
            step=timedelta(hours=1),
            item_types=item_types,
        )
    runs = [run for bucket in found.buckets for run in bucket.runs]
    assert len(runs) == ENDED and all(
        run == pytest.approx(RUN_SECONDS, abs=0.01) for run in runs
    ), runs
    assert sum(sum(bucket.counts.values()) for bucket in found.buckets) == 2 * ENDED
    read_by_audit = [s for s in sent if "FROM audit_log" in s.statement]
    assert len(read_by_audit) == 3, [s.statement for s in sent]
    for number, statement in enumerate(read_by_audit):
        plan = explain(url, f"stats{number}", statement.statement, dict(statement.parameters))
        for kind, lines in (("custom", plan.custom), ("generic", plan.generic)):
            report = f"statement {number + 1}, {kind} plan:\n" + "\n".join(lines)
            # Each ended item looked up once at most, never the items of the history.
            assert sum(scan.read for scan in scans(lines)) <= 2 * ENDED, report
