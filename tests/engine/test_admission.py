"""Admission: per-project pools, strict FIFO by seq, the reserved alert lane, dedup, cap."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import event, select, text

from tests.conftest import Store, make_config
from tests.engine.helpers import Listening, load, submit, wait_idle
from tests.support.chain import Behaviour, chain_registry
from tests.support.waiting import wait_for
from wq.engine import admission as admission_module
from wq.engine import admission_statements, items, pools, releases
from wq.engine.admission import (
    AdmissionPass,
    dispatch,
    in_flight,
    projects_with_queued,
    queued_projects_query,
)
from wq.engine.config import Config
from wq.engine.models import AuditEntry, Base, WorkItem, utcnow
from wq.engine.processing import ProcessingManager
from wq.engine.wakeup import WAKEUP_KEY, Wakeup

REGISTRY = chain_registry(Behaviour())


def config_for(store: Store, capacity: int = 2, alert: int = 1, cap: int = 6) -> Config:
    return make_config(
        store.url,
        pools={
            "default": {"capacity": capacity, "alert_capacity": alert, "queued_autonomous_cap": cap}
        },
    )


def enqueue(store: Store, config: Config, project: str = "g/p", **fields: Any) -> uuid.UUID:
    intake = submit(store.sessions, REGISTRY, config, project, **fields)
    assert intake.outcome == "created" and intake.item is not None
    return intake.item.id


def admitted_ids(
    store: Store, project: str | None = None, lane: str | None = None
) -> list[uuid.UUID]:
    query = select(WorkItem.id).where(WorkItem.admission == "admitted").order_by(WorkItem.seq)
    if project:
        query = query.where(WorkItem.project == project)
    if lane:
        query = query.where(WorkItem.lane == lane)
    with store.sessions() as session:
        return list(session.execute(query).scalars())


def finish(store: Store, item_id: uuid.UUID, phase: str | None = None) -> None:
    """Let an admitted item go idle (or terminal): its slot is released."""
    with store.sessions.begin() as session:
        item = session.get(WorkItem, item_id)
        assert item is not None
        if phase:
            items.set_phase(session, item, phase, actor="test", trigger={"source": "test"})
        else:
            releases.release_slot(session, item, actor="test", trigger={"source": "test"})


def test_alert_lane_first_and_capacities_never_exceeded(store: Store) -> None:
    config = config_for(store, capacity=2, alert=1)
    normal = [enqueue(store, config) for _ in range(3)]
    alerts = [enqueue(store, config, lane="alert") for _ in range(2)]
    admitted = dispatch(store.sessions, config, clock=utcnow)
    assert [entry.id for entry in admitted] == [alerts[0], normal[0], normal[1]]
    assert [entry.lane for entry in admitted] == ["alert", "normal", "normal"]
    assert dispatch(store.sessions, config, clock=utcnow) == []  # full: nothing more
    with store.sessions() as session:
        assert in_flight(session, "g/p") == {"alert": 1, "normal": 2}

    finish(store, normal[0])  # a normal slot frees: the normal head, never an alert
    assert [entry.id for entry in dispatch(store.sessions, config, clock=utcnow)] == [normal[2]]
    finish(store, alerts[0])
    assert [entry.id for entry in dispatch(store.sessions, config, clock=utcnow)] == [alerts[1]]


def test_normal_work_never_takes_the_alert_slot(store: Store) -> None:
    config = config_for(store, capacity=1, alert=1)
    normal = [enqueue(store, config) for _ in range(3)]
    assert [entry.id for entry in dispatch(store.sessions, config, clock=utcnow)] == [normal[0]]
    assert admitted_ids(store, lane="alert") == []


def test_strict_fifo_and_head_of_line_blocking(store: Store) -> None:
    config = config_for(store, capacity=1)
    # Different "repositories" in one project share one FIFO: the slow head blocks all.
    head = enqueue(store, config, dedup_key="repo-a#1")
    behind = [enqueue(store, config, dedup_key=f"repo-{name}#1") for name in "bcd"]
    for _ in range(3):
        assert [entry.id for entry in dispatch(store.sessions, config, clock=utcnow)] in (
            [head],
            [],
        )
    assert admitted_ids(store) == [head]
    for expected in behind:
        finish(store, admitted_ids(store)[0])
        assert [entry.id for entry in dispatch(store.sessions, config, clock=utcnow)] == [expected]


def test_terminal_item_frees_its_slot(store: Store) -> None:
    config = config_for(store, capacity=1)
    first, second = enqueue(store, config), enqueue(store, config)
    dispatch(store.sessions, config, clock=utcnow)
    finish(store, first, phase="completed")
    assert load(store.sessions, first).admission == "done"
    assert [entry.id for entry in dispatch(store.sessions, config, clock=utcnow)] == [second]
    with store.sessions() as session:
        released = session.execute(
            select(AuditEntry).where(
                AuditEntry.work_item_id == first, AuditEntry.event_type == "released"
            )
        ).scalar_one()
    assert released.old_state["admission"] == "admitted"
    assert released.new_state["admission"] == "done"


def test_idle_to_queued_takes_a_fresh_larger_seq(store: Store) -> None:
    config = config_for(store, capacity=5)
    first = enqueue(store, config)
    later = enqueue(store, config)
    dispatch(store.sessions, config, clock=utcnow)
    finish(store, first)
    old_seq = load(store.sessions, first).seq
    with store.sessions.begin() as session:
        item = session.get(WorkItem, first)
        assert item is not None
        items.settle(session, item, REGISTRY, utcnow(), actor="test", trigger={"source": "test"})
    requeued = load(store.sessions, first)
    assert requeued.admission == "queued"
    assert requeued.seq is not None and old_seq is not None
    assert requeued.seq > old_seq and requeued.seq > (load(store.sessions, later).seq or 0)


def test_admission_is_audited_with_lane_seq_and_project(store: Store) -> None:
    config = config_for(store)
    item_id = enqueue(store, config, "team/app", lane="alert")
    dispatch(store.sessions, config, clock=utcnow)
    with store.sessions() as session:
        row = session.execute(
            select(AuditEntry).where(
                AuditEntry.work_item_id == item_id, AuditEntry.event_type == "admitted"
            )
        ).scalar_one()
    assert row.actor == "dispatcher"
    assert row.old_state["admission"] == "queued" and row.new_state["admission"] == "admitted"
    assert row.new_state["lane"] == "alert" and row.new_state["project"] == "team/app"
    assert row.new_state["seq"] == load(store.sessions, item_id).seq


def test_dedup_hit_returns_the_existing_item(store: Store) -> None:
    config = config_for(store)
    first = submit(store.sessions, REGISTRY, config, dedup_key="alert:group-1")
    again = submit(store.sessions, REGISTRY, config, dedup_key="alert:group-1")
    assert (first.outcome, again.outcome) == ("created", "dedup")
    assert first.item is not None and again.item is not None
    assert again.item.id == first.item.id
    finish(store, first.item.id, phase="completed")  # terminal: the key is free again
    assert submit(store.sessions, REGISTRY, config, dedup_key="alert:group-1").outcome == "created"


def test_concurrent_intake_with_one_dedup_key_creates_one_item(store: Store) -> None:
    config = config_for(store)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []
    lock = threading.Lock()

    def intake() -> None:
        barrier.wait()
        result = submit(store.sessions, REGISTRY, config, dedup_key="race")
        with lock:
            outcomes.append(result.outcome)

    threads = [threading.Thread(target=intake) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["created"] + ["dedup"] * 7
    with store.sessions() as session:
        assert (
            session.execute(select(WorkItem.id).where(WorkItem.dedup_key == "race")).all().__len__()
            == 1
        )


def test_autonomous_cap_applies_only_to_autonomous_intake(store: Store) -> None:
    config = config_for(store, capacity=1, cap=2)
    assert [
        submit(store.sessions, REGISTRY, config, autonomous=True).outcome for _ in range(3)
    ] == ["created", "created", "capped"]
    # Submissions, webhooks and alerts are never capped.
    assert submit(store.sessions, REGISTRY, config).outcome == "created"
    assert submit(store.sessions, REGISTRY, config, lane="alert").outcome == "created"
    dispatch(store.sessions, config, clock=utcnow)  # one autonomous item leaves the queue
    assert submit(store.sessions, REGISTRY, config, autonomous=True).outcome == "created"
    assert submit(store.sessions, REGISTRY, config, autonomous=True).outcome == "capped"
    assert (
        submit(store.sessions, REGISTRY, config, "other/project", autonomous=True).outcome
        == "created"
    )


def test_a_big_backlog_does_not_delay_another_projects_first_item(
    store: Store, managers: list[Any]
) -> None:
    config = config_for(store, capacity=2)
    with store.sessions.begin() as session:
        for _ in range(1000):
            items.submit(
                session,
                WorkItem.__mapper__.polymorphic_map["chain"].class_(
                    project="big/backlog", lane="normal", autonomous=False
                ),
                registry=REGISTRY,
                pool=config.pool_for("big/backlog"),
                now=utcnow(),
                actor="test",
                trigger={"source": "test"},
            )
    lonely = enqueue(store, config, "small/project")
    admitted = dispatch(store.sessions, config, clock=utcnow)
    assert lonely in [entry.id for entry in admitted]
    assert sum(entry.project == "big/backlog" for entry in admitted) == 2

    behaviour = Behaviour(sleep={"step1": 0.2})
    manager = ProcessingManager(store.sessions, chain_registry(behaviour), config)
    manager.start()
    managers.append(manager)
    wait_for(lambda: load(store.sessions, lonely).admission == "idle", message="small idle")
    with store.sessions() as session:
        backlog = pools.pool_statuses(session, config, "big/backlog")[0]
    assert backlog.lanes["normal"].queued >= 990


def _rows_read_from_work_items(plan: dict[str, Any]) -> tuple[int, list[str]]:
    """Rows a PostgreSQL plan read from work_items, and the scan types it used there."""
    rows, scans = 0, []
    if plan.get("Relation Name") == "work_items":
        loops = int(plan.get("Actual Loops", 1))
        rows += (int(plan["Actual Rows"]) + int(plan.get("Rows Removed by Filter", 0))) * loops
        scans.append(plan["Node Type"])
    for child in plan.get("Plans", []):
        child_rows, child_scans = _rows_read_from_work_items(child)
        rows += child_rows
        scans += child_scans
    return rows, scans


def test_projects_with_queued_work_are_found_without_scanning(store: Store) -> None:
    config = config_for(store, capacity=0)
    backlog = [f"team/{n % 3}" for n in range(600)]
    with store.sessions.begin() as session:
        for project in backlog:
            items.submit(
                session,
                WorkItem.__mapper__.polymorphic_map["chain"].class_(
                    project=project, lane="normal", autonomous=False
                ),
                registry=REGISTRY,
                pool=config.pool_for(project),
                now=utcnow(),
                actor="test",
                trigger={"source": "test"},
            )
    with store.sessions() as session:
        assert projects_with_queued(session) == ["team/0", "team/1", "team/2"]
    sql = str(
        queued_projects_query().compile(
            dialect=store.engine.dialect, compile_kwargs={"literal_binds": True}
        )
    )
    with store.engine.begin() as conn:
        if store.dialect == "sqlite":
            steps = [row[3] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")]
            on_items = [step for step in steps if "work_items" in step]
            # Index probes only: a scan (even of an index) would grow with the backlog.
            assert on_items, steps
            assert all(step.startswith("SEARCH work_items USING") for step in on_items), steps
        else:
            conn.exec_driver_sql("ANALYZE work_items")
            plan = conn.exec_driver_sql(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}").scalar_one()
            rows, scans = _rows_read_from_work_items(plan[0]["Plan"])
            assert "Seq Scan" not in scans, scans
            # About one probe per project (plus the end of the walk), not 600 rows.
            assert rows <= 3 * len(set(backlog)), (rows, scans)


def test_two_dispatchers_racing_never_exceed_capacity(store: Store) -> None:
    config = config_for(store, capacity=3, alert=1)
    projects = [f"team/{n}" for n in range(12)]
    with store.sessions.begin() as session:
        for round_ in range(12):
            for project in projects:
                lane = "alert" if round_ % 4 == 0 else "normal"
                items.submit(
                    session,
                    WorkItem.__mapper__.polymorphic_map["chain"].class_(
                        project=project, lane=lane, autonomous=False
                    ),
                    registry=REGISTRY,
                    pool=config.pool_for(project),
                    now=utcnow(),
                    actor="test",
                    trigger={"source": "test"},
                )
    violations: list[str] = []

    def check_bounds() -> None:
        with store.sessions() as session:
            rows = session.execute(
                select(WorkItem.project, WorkItem.lane, text("count(*)"))
                .where(WorkItem.admission == "admitted")
                .group_by(WorkItem.project, WorkItem.lane)
            ).all()
        for project, lane, count in rows:
            limit = 1 if lane == "alert" else 3
            if count > limit:
                violations.append(f"{project} {lane}: {count} > {limit}")

    for _ in range(10):
        barrier = threading.Barrier(2)

        def race(barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            dispatch(store.sessions, config, clock=utcnow)

        threads = [threading.Thread(target=race) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        check_bounds()
        for item_id in admitted_ids(store)[::2]:
            finish(store, item_id)
    assert violations == []
    check_bounds()


OPS = st.lists(
    st.tuples(
        st.sampled_from(["enqueue", "alert", "admit", "race", "release", "finish", "retry"]),
        st.integers(0, 2),
    ),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_random_interleavings_keep_the_invariants(store: Store, ops: list[tuple[str, int]]) -> None:
    with store.engine.begin() as conn:
        for table in reversed(Base.metadata.sorted_tables):
            if table.name != "wq_sequences":
                conn.execute(table.delete())
    config = config_for(store, capacity=2, alert=1)
    created: list[uuid.UUID] = []
    projects = ["x/a", "x/b", "x/c"]
    for op, n in ops:
        project = projects[n]
        if op in ("enqueue", "alert"):
            created.append(
                enqueue(store, config, project, lane="alert" if op == "alert" else "normal")
            )
        elif op in ("admit", "race"):
            with store.sessions() as session:
                before = {item.id: item for item in session.execute(select(WorkItem)).scalars()}
            # "race": two replicas' passes over every project at once, like two daemons.
            admitted = (
                _race(store, config)
                if op == "race"
                else dispatch(store.sessions, config, clock=utcnow)
            )
            for entry in admitted:  # FIFO: nothing older was left waiting in that lane
                waiting = [
                    item
                    for item in before.values()
                    if item.admission == "queued"
                    and item.project == entry.project
                    and item.lane == entry.lane
                    and item.id not in {a.id for a in admitted}
                ]
                assert all((item.seq or 0) > entry.seq for item in waiting)
            _assert_work_conserving(store, config)
        elif op in ("release", "finish"):
            running = admitted_ids(store, project)
            if running:
                finish(store, running[0], phase="completed" if op == "finish" else None)
        elif op == "retry":
            with store.sessions() as session:
                done = session.execute(
                    select(WorkItem.id).where(WorkItem.phase == "completed").limit(1)
                ).scalar_one_or_none()
            if done is not None:
                with store.sessions.begin() as session:
                    session.get(WorkItem, done).phase = "cancelled"  # type: ignore[union-attr]
                    items.retry(session, done, registry=REGISTRY, now=utcnow(), actor="t")
        _assert_bounds(store)
    with store.sessions() as session:
        states = session.execute(select(WorkItem.id, WorkItem.admission)).all()
    assert sorted(item_id for item_id, _ in states) == sorted(created)  # none lost or doubled
    assert {admission for _, admission in states} <= {"queued", "admitted", "idle", "done"}


def _race(store: Store, config: Config) -> list[Any]:
    """Two dispatch passes started together from two threads; what both admitted."""
    barrier = threading.Barrier(2)
    results: list[list[Any]] = [[], []]

    def pass_(index: int) -> None:
        barrier.wait()
        results[index] = dispatch(store.sessions, config, clock=utcnow)

    threads = [threading.Thread(target=pass_, args=(index,)) for index in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len({entry.id for entry in results[0]} & {entry.id for entry in results[1]}) == 0
    return results[0] + results[1]


def _assert_bounds(store: Store) -> None:
    with store.sessions() as session:
        for project in ("x/a", "x/b", "x/c"):
            counts = in_flight(session, project)
            assert counts.get("alert", 0) <= 1 and counts.get("normal", 0) <= 2


def _assert_work_conserving(store: Store, config: Config) -> None:
    """After a pass, a lane with queued work is full."""
    with store.sessions() as session:
        for status in pools.pool_statuses(session, config):
            for lane in status.lanes.values():
                if lane.queued:
                    assert lane.in_flight == lane.capacity


@pytest.mark.parametrize("lane", ["normal", "alert"])
def test_queue_view_lists_admission_order(store: Store, lane: str) -> None:
    config = config_for(store, capacity=1, alert=1)
    ids = [enqueue(store, config, lane=lane) for _ in range(4)]
    dispatch(store.sessions, config, clock=utcnow)
    with store.sessions() as session:
        entries = pools.queue(session, "g/p", lane)
        status = pools.pool_statuses(session, config, "g/p")[0]
    assert [entry.id for entry in entries] == ids[1:]
    assert [entry.position for entry in entries] == [1, 2, 3]
    assert status.lanes[lane].in_flight == 1 and status.lanes[lane].queued == 3
    assert status.oldest_queued_at is not None


def test_a_pass_that_claims_what_it_admits_wakes_only_other_replicas(store: Store) -> None:
    """The scheduler's own pass claims right after admitting: waking itself for those
    items would only run a pass that finds nothing. Other replicas are told."""
    config = config_for(store, capacity=5)
    first, second = enqueue(store, config), enqueue(store, config)
    own, other = Wakeup(), Wakeup()
    store.sessions.configure(info={WAKEUP_KEY: own})
    listening = Listening(store.engine, other) if store.engine.dialect.name != "sqlite" else None
    try:
        admitted = dispatch(store.sessions, config, ["g/p"], clock=utcnow, wake_self=False)
        assert [entry.id for entry in admitted] == [first, second]
        assert not own.wait(0)
        if listening is not None:  # by NOTIFY (after the listener's resync on start)
            wait_for(lambda: other.wait(0.5).claim, message="the other replica woken")
        finish(store, first)
        own.wait(0)  # the release's own signal
        enqueue(store, config)
        assert len(dispatch(store.sessions, config, ["g/p"], clock=utcnow)) == 1
        assert own.wait(0).claim  # by default a pass wakes its own scheduler too
    finally:
        if listening is not None:
            listening.stop()


def test_a_pass_for_projects_with_nothing_queued_admits_nothing_and_locks_nothing(
    store: Store,
) -> None:
    """Most passes follow releases, and a release signals its project whether or not
    work waits there: on PostgreSQL such a pass ends with its first statement (no
    admission lock taken, no admitting statement); work queued anywhere else is left
    to the passes its own signals wake."""
    config = config_for(store, capacity=1)
    busy = enqueue(store, config, project="g/busy")
    waiting = enqueue(store, config, project="g/other")
    assert dispatch(store.sessions, config, ["g/busy"], clock=utcnow)[0].id == busy
    sent: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        assert dispatch(store.sessions, config, ["g/busy", "g/empty"], clock=utcnow) == []
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    if store.dialect == "postgresql":
        assert len(sent) == 1 and "pg_advisory_xact_lock" in sent[0], sent
    assert admitted_ids(store) == [busy]
    # The other project's item is admitted by a pass that looks at it.
    assert [entry.id for entry in dispatch(store.sessions, config, ["g/other"], clock=utcnow)] == [
        waiting
    ]


def test_the_admission_lock_is_taken_only_where_work_is_queued(store: Store) -> None:
    if store.dialect != "postgresql":
        pytest.skip("SQLite serialises passes by BEGIN IMMEDIATE")
    config = config_for(store)
    enqueue(store, config, project="g/queued")
    held = text(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND pid = pg_backend_pid()"
    )
    for projects, locked in ((["g/empty"], False), (["g/empty", "g/queued"], True)):
        with store.sessions.begin() as session:
            assert admission_statements.lock_admission(session, projects) is locked
            assert session.execute(held).scalar_one() == int(locked)


def test_a_pass_admits_each_projects_share_and_names_where_more_is_queued(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL a pass admits about ADMISSIONS_PER_PASS items, shared evenly among
    its projects, heads first; the projects where a lane took its whole share are named
    for the next pass, which admits the rest in order."""
    if store.dialect == "sqlite":
        pytest.skip("SQLite admits every free slot in one pass (see the test after)")
    monkeypatch.setattr(admission_module, "ADMISSIONS_PER_PASS", 6)
    config = config_for(store, capacity=100, alert=5)
    big = [enqueue(store, config, project="g/big") for _ in range(5)]
    alert = enqueue(store, config, project="g/big", lane="alert")
    small = [enqueue(store, config, project="g/small") for _ in range(2)]

    first = AdmissionPass(config, ["g/big", "g/small"], clock=utcnow, held=set())
    with store.sessions.begin() as session:
        first.run(session)
    # Three each: the normal lane's three heads, the alert lane's one, the small two.
    assert admitted_ids(store, "g/big", "normal") == big[:3]
    assert admitted_ids(store, "g/big", "alert") == [alert]
    assert admitted_ids(store, "g/small") == small
    assert first.more == {"g/big"}

    second = AdmissionPass(config, sorted(first.more), clock=utcnow, held=set())
    with store.sessions.begin() as session:
        second.run(session)
    assert [entry.id for entry in second.admitted] == big[3:]
    assert second.more == set()


def test_on_sqlite_a_pass_admits_every_free_slot(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's one writer lets nothing overlap a pass: passes in a row would only add
    their cost, so a pass there admits past ADMISSIONS_PER_PASS."""
    if store.dialect != "sqlite":
        pytest.skip("PostgreSQL admits a share a pass (the test before)")
    monkeypatch.setattr(admission_module, "ADMISSIONS_PER_PASS", 2)
    config = config_for(store, capacity=100)
    ids = [enqueue(store, config, project="g/big") for _ in range(5)]
    admission = AdmissionPass(config, None, clock=utcnow, held=set())
    with store.sessions.begin() as session:
        admission.run(session)
    assert [entry.id for entry in admission.admitted] == ids
    assert admission.more == set()


def backlog_config(store: Store, capacity: int) -> Config:
    """Two workers, a large pool, and no poll: only the scheduler's own wake-ups."""
    return make_config(
        store.url,
        pools={"default": {"capacity": capacity, "alert_capacity": 1}},
        processing={"workers": 2, "poll_interval_seconds": 3600.0},
    )


def admissions_per_pass(store: Store, first: int | None = None) -> list[int]:
    """How many items each pass admitted (its rows share their time), in order; of the
    first `first` audit rows of admissions and releases only, if given."""
    with store.sessions() as session:
        rows = session.execute(
            select(AuditEntry.event_type, AuditEntry.at)
            .where(AuditEntry.event_type.in_(["admitted", "released"]))
            .order_by(AuditEntry.id)
        ).all()
    passes: dict[Any, int] = {}
    for event_type, at in rows[:first]:
        if event_type == "admitted":
            passes[at] = passes.get(at, 0) + 1
    return list(passes.values())


def test_a_backlog_larger_than_a_pass_is_admitted_by_passes_in_a_row(
    store: Store, managers: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL the scheduler admits a backlog pass after pass, each within its
    share, without waiting for a release or its poll: the first items run while the rest
    are admitted."""
    if store.dialect == "sqlite":
        pytest.skip("SQLite admits every free slot in one pass")
    monkeypatch.setattr(admission_module, "ADMISSIONS_PER_PASS", 4)
    config = backlog_config(store, capacity=100)
    ids = [enqueue(store, config, project="g/p") for _ in range(14)]
    behaviour = Behaviour(sleep={"step1": 1.0})  # no release for a second
    manager = ProcessingManager(store.sessions, chain_registry(behaviour), config)
    manager.start()
    managers.append(manager)
    wait_for(lambda: len(admitted_ids(store, "g/p")) == 14, message="all admitted")
    # All admitted before the first release, in FIFO order, four at most a pass.
    assert admitted_ids(store, "g/p") == ids
    assert admissions_per_pass(store, first=14) == [4, 4, 4, 2]


def test_with_quick_actions_the_rest_of_a_backlog_is_admitted_with_the_claims(
    store: Store, managers: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """While quick actions keep items in line on the workers, the next pass of a backlog
    joins the claim they ask for: nothing is left queued for want of a wake-up."""
    if store.dialect == "sqlite":
        pytest.skip("SQLite admits every free slot in one pass")
    monkeypatch.setattr(admission_module, "ADMISSIONS_PER_PASS", 4)
    config = backlog_config(store, capacity=1000)
    ids = [enqueue(store, config, project="g/p") for _ in range(120)]
    manager = ProcessingManager(store.sessions, REGISTRY, config)
    manager.start()
    managers.append(manager)
    wait_idle(
        store.sessions,
        ids,
        timeout=30,
        message="every item done",
    )
    passes = admissions_per_pass(store)
    assert sum(passes) == 120 and max(passes) <= 4
