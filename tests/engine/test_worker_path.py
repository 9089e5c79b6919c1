"""The worker path's round trips: the claim loads the items, one statement lets go.

The claim hands each worker its item as it loaded it (the worker reads nothing
itself), worker threads are a bounded pool that serves item after item, and an item
let go unchanged is released, audited and announced by one fenced statement.
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, select, text, update

from tests.conftest import Store, make_config
from tests.engine.helpers import audit_types, claimed, load, submit
from tests.support.chain import STEPS, Behaviour, chain_registry
from tests.support.waiting import wait_for
from wq.engine import store as store_ops
from wq.engine.admission import dispatch
from wq.engine.audit import AuditRecord, audit
from wq.engine.claims import claim_for_workers, item_loads
from wq.engine.dimensions import set_dimension
from wq.engine.item_reads import ItemReads
from wq.engine.models import AuditEntry, WorkItem, utcnow
from wq.engine.processing import ProcessingManager
from wq.engine.registry import ActionContext
from wq.engine.releases import release_if_unchanged
from wq.engine.wakeup import PROJECT_QUEUED, WAKEUP_KEY, Wakeup, signal
from wq.engine.workers import WorkerPool


def test_a_claim_loads_the_items_it_leases_with_their_dimensions(store: Store) -> None:
    registry = chain_registry(Behaviour())
    config = make_config(store.url)
    item_id = submit(store.sessions, registry, config).item.id  # type: ignore[union-attr]
    with store.sessions.begin() as session:
        found = session.get(WorkItem, item_id)
        set_dimension(session, found, "needs_step1", False)
    dispatch(store.sessions, config, clock=utcnow)
    now = utcnow()
    with store.sessions.begin() as session:
        taken = claim_for_workers(
            session,
            owner="me",
            types=["chain"],
            free=3,
            now=now,
            lease_until=now + timedelta(seconds=30),
            load=item_loads(registry),
        )
    (claim,) = taken.claims
    item = claim.item
    assert item is not None and not taken.full
    # As leased, detached, and complete without the database: the decider reads it.
    assert (item.id, item.lease_token, item.lease_owner) == (item_id, claim.token, "me")
    assert [(row.dimension, row.status) for row in item.statuses] == [("needs_step1", "false")]
    assert item.stamp == load(store.sessions, item_id).stamp


def test_a_claim_detaches_only_what_it_loaded(store: Store) -> None:
    registry = chain_registry(Behaviour())
    config = make_config(store.url)
    first, second = (
        submit(store.sessions, registry, config, "p/a").item.id,  # type: ignore[union-attr]
        submit(store.sessions, registry, config, "p/b").item.id,  # type: ignore[union-attr]
    )
    dispatch(store.sessions, config, ["p/a"], clock=utcnow)  # the other stays queued
    now = utcnow()
    with store.sessions.begin() as session:
        other = session.get(WorkItem, second)  # the caller's own, in the claim's session
        assert other is not None
        other.error = "noted"
        taken = claim_for_workers(
            session,
            owner="me",
            types=["chain"],
            free=1,
            now=now,
            lease_until=now + timedelta(seconds=30),
            load=item_loads(registry),
        )
        (claim,) = taken.claims
        assert claim.item is not None and claim.item not in session
        assert other in session and other.statuses == []
    assert claim.id == first
    assert load(store.sessions, second).error == "noted"  # still written by the commit


def test_the_worker_runs_on_what_the_claim_loaded_and_reads_nothing_itself(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    if store.dialect == "sqlite":
        pytest.skip("SQLite: each worker reads its item, outside the claim's write lock")
    behaviour = Behaviour()
    registry = chain_registry(behaviour)
    config = make_config(store.url)
    item_id = submit(store.sessions, registry, config).item.id  # type: ignore[union-attr]

    def no_read(*_: Any) -> None:
        raise AssertionError("the worker read the item although the claim loaded it")

    monkeypatch.setattr(ItemReads, "read", no_read)
    manager = ProcessingManager(store.sessions, registry, config)
    assert manager.run_once() == 1
    wait_for(lambda: manager.busy == 0, message="the worker returned")
    assert behaviour.actions_of(item_id) == list(STEPS)
    item = load(store.sessions, item_id)
    assert (item.admission, item.lease_token) == ("idle", None)


def test_a_pass_that_admits_and_claims_commits_once(store: Store) -> None:
    """The admission pass and the claim that follows it share one transaction: the
    scheduler waits for one commit, not two, for each item it admits and hands on. On
    PostgreSQL the admission's lock is a statement of its own, never in a pipeline
    (see `test_the_admission_lock_is_never_taken_in_a_pipeline`)."""
    behaviour = Behaviour()
    registry = chain_registry(behaviour)
    config = make_config(store.url)
    item_id = submit(store.sessions, registry, config).item.id  # type: ignore[union-attr]
    assert load(store.sessions, item_id).admission == "queued"
    scheduler = threading.current_thread()
    commits: list[str] = []
    locks: list[str] = []

    def committed(_connection: Any) -> None:
        if threading.current_thread() is scheduler:
            commits.append("commit")

    def sent(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "pg_advisory_xact_lock" in statement:
            locks.append(statement)

    manager = ProcessingManager(store.sessions, registry, config)
    event.listen(store.engine, "commit", committed)
    event.listen(store.engine, "before_cursor_execute", sent)
    try:
        # Woken for the project: admitted and claimed by this pass.
        assert manager.run_once(projects={"group/project"}) == 1
    finally:
        event.remove(store.engine, "commit", committed)
        event.remove(store.engine, "before_cursor_execute", sent)
    assert commits == ["commit"]
    assert len(locks) == (1 if store.dialect == "postgresql" else 0)
    wait_for(lambda: manager.busy == 0, message="the worker returned")
    assert behaviour.actions_of(item_id) == list(STEPS)
    assert audit_types(store.sessions, item_id)[:3] == ["created", "queued", "admitted"]


def test_worker_threads_are_reused_and_never_more_than_the_workers(store: Store) -> None:
    behaviour = Behaviour()
    registry = chain_registry(behaviour)
    config = make_config(store.url, processing={"workers": 2})
    threads: set[int] = set()
    running = [0, 0]  # now, most at once
    lock = threading.Lock()
    plain = registry.get("chain").executors["step1"]

    def step1(ctx: ActionContext) -> None:
        with lock:
            threads.add(threading.get_ident())
            running[0] += 1
            running[1] = max(running)
        try:
            time.sleep(0.01)
            plain(ctx)
        finally:
            with lock:
                running[0] -= 1

    registry.get("chain").executors["step1"] = step1  # type: ignore[index]
    ids = [
        submit(store.sessions, registry, config, f"p/{n}").item.id  # type: ignore[union-attr]
        for n in range(8)
    ]
    manager = ProcessingManager(store.sessions, registry, config)
    manager.start()
    try:
        wait_for(
            lambda: all(behaviour.actions_of(i) == list(STEPS) for i in ids),
            timeout=30,
            message="every item done",
        )
    finally:
        manager.stop(grace=5)
    assert running[1] <= 2 and 1 <= len(threads) <= 2  # 8 items, two threads at most
    wait_for(lambda: manager._handoff.pool.threads == 0, message="the pool's threads ended")


def test_the_pool_serves_jobs_queued_beyond_its_threads_in_order() -> None:
    done: list[tuple[int, int]] = []
    release = threading.Event()

    def work(job: int, slot: int) -> None:
        release.wait(5)
        done.append((job, slot))

    pool: WorkerPool[int] = WorkerPool(work, 2, idle_seconds=0.2)
    for job in range(5):
        pool.submit(job)
    assert pool.threads == 2
    release.set()
    wait_for(lambda: len(done) == 5, message="all jobs done")
    assert sorted(job for job, _ in done) == list(range(5))
    assert {slot for _, slot in done} <= {0, 1}
    wait_for(lambda: pool.threads == 0, message="idle threads ended")
    pool.submit(5)  # a new thread serves it
    wait_for(lambda: len(done) == 6, message="the job after the idle end")
    pool.close()
    with pytest.raises(RuntimeError):
        pool.submit(6)


def test_the_pool_takes_many_jobs_at_once_and_starts_only_the_threads_it_may() -> None:
    started: list[int] = []
    release = threading.Event()

    def work(job: int, slot: int) -> None:
        started.append(job)
        release.wait(5)

    pool: WorkerPool[int] = WorkerPool(work, 3, idle_seconds=0.2)
    pool.submit(*range(7))
    assert pool.threads == 3
    wait_for(lambda: len(started) == 3, message="three jobs started")
    assert sorted(started) == [0, 1, 2]  # the first in line
    release.set()
    wait_for(lambda: len(started) == 7, message="the rest, by the same threads")
    assert sorted(started[3:]) == [3, 4, 5, 6]
    wait_for(lambda: pool.threads == 0, message="idle threads ended")
    pool.submit(7, 8)  # two jobs, an empty pool: two threads
    assert pool.threads == 2
    wait_for(lambda: len(started) == 9, message="the jobs after the idle end")
    pool.close()


def leased(store: Store) -> tuple[WorkItem, str]:
    """Submit, admit and claim one chain item with its data; the item as claimed."""
    registry = chain_registry(Behaviour())
    config = make_config(store.url)
    submit(store.sessions, registry, config)
    dispatch(store.sessions, config, clock=utcnow)
    (claim,) = claimed(store.sessions, registry, 1)
    assert claim.item is not None
    return claim.item, claim.token


def completed(item: WorkItem) -> AuditRecord:
    return AuditRecord(
        "action_completed", "me/worker-0", item.id, trigger={"source": "worker", "action": "x"}
    )


def release(store: Store, item: WorkItem, token: str, hub: Wakeup) -> bool:
    with store.sessions() as session:
        session.info[WAKEUP_KEY] = hub
        session.add(item)
        released = release_if_unchanged(
            session,
            item,
            token=token,
            actor="me/worker-0",
            trigger={"source": "decider", "reason": "nothing to do"},
            now=utcnow(),
            records=[completed(item)],
        )
        session.commit()
        return released


def test_an_unchanged_item_is_released_audited_and_announced_in_one_statement(
    store: Store,
) -> None:
    item, token = leased(store)
    hub = Wakeup()
    listener = None
    if store.dialect == "postgresql":
        listener = store.engine.connect()
        listener.execute(text(f"LISTEN {store_ops.NOTIFY_CHANNEL}"))
        listener.commit()
    sent: list[str] = []

    def record(*args: Any) -> None:
        sent.append(args[2])

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        assert release(store, item, token, hub)
    finally:
        event.remove(store.engine, "before_cursor_execute", record)

    assert audit_types(store.sessions, item.id)[-2:] == ["action_completed", "released"]
    stored = load(store.sessions, item.id)
    assert (stored.admission, stored.lease_token, stored.leased_until) == ("idle", None, None)
    assert hub.wait(0).projects == {item.project}  # delivered here after the commit
    if listener is not None:
        # One statement: no COPY or NOTIFY of their own; every replica is told.
        assert len(sent) == 1 and "pg_notify" in sent[0] and "audit_log" in sent[0]
        notifies = list(listener.connection.driver_connection.notifies(timeout=2, stop_after=1))
        assert [n.payload for n in notifies] == [f"{hub.origin}|queued:{item.project}"]
        listener.close()


@pytest.mark.parametrize("change", ["lease", "stamp"])
def test_a_release_whose_lease_or_stamp_changed_writes_nothing(store: Store, change: str) -> None:
    item, token = leased(store)
    values = {"lease_token": "other"} if change == "lease" else {"stamp": item.stamp + 1}
    with store.sessions.begin() as session:
        session.execute(update(WorkItem).where(WorkItem.id == item.id).values(**values))
    before = audit_types(store.sessions, item.id)
    hub = Wakeup()

    assert not release(store, item, token, hub)

    assert audit_types(store.sessions, item.id) == before  # neither row
    assert load(store.sessions, item.id).admission == "admitted"
    assert not hub.wait(0)


def test_an_item_changed_after_the_claim_loaded_it_is_read_again_before_letting_go(
    store: Store,
) -> None:
    # Everything done, but after the claim loaded the item an event wants step2 again:
    # the release does not match (the stamp), the worker fences, reads and runs step2.
    behaviour = Behaviour()
    registry = chain_registry(behaviour)
    config = make_config(store.url)
    item_id = submit(store.sessions, registry, config).item.id  # type: ignore[union-attr]
    with store.sessions.begin() as session:
        found = session.get(WorkItem, item_id)
        for step in STEPS:
            set_dimension(session, found, f"needs_{step}", False)
    manager = ProcessingManager(store.sessions, registry, config)
    original = manager._runner.run

    def changed_meanwhile(item_id: uuid.UUID, token: str, actor: str, **kw: Any) -> bool:
        with store.sessions.begin() as session:
            found = session.get(WorkItem, item_id)
            set_dimension(session, found, "needs_step2", True)
        # Whether the worker kept the item to store it with others: without it, the
        # item would count as returned before its group was stored.
        return original(item_id, token, actor, **kw)

    manager._runner.run = changed_meanwhile  # type: ignore[method-assign]
    assert manager.run_once() == 1
    wait_for(lambda: manager.busy == 0, message="the worker returned")
    assert behaviour.actions_of(item_id) == ["step2"]
    assert load(store.sessions, item_id).admission == "idle"
    with store.sessions() as session:
        rows = session.execute(
            select(AuditEntry.event_type).where(AuditEntry.work_item_id == item_id)
        ).scalars()
        assert list(rows).count("released") == 1


def test_what_the_last_action_audited_and_signalled_goes_out_with_the_release_in_order(
    store: Store,
) -> None:
    behaviour = Behaviour()
    registry = chain_registry(behaviour)
    config = make_config(store.url)
    plain = registry.get("chain").executors["step3"]

    def step3(ctx: ActionContext) -> None:
        plain(ctx)
        audit(ctx.session, AuditRecord("noted", "x", ctx.item.id, trigger={"source": "test"}))
        signal(ctx.session, PROJECT_QUEUED, "other/project")

    registry.get("chain").executors["step3"] = step3  # type: ignore[index]
    item_id = submit(store.sessions, registry, config).item.id  # type: ignore[union-attr]
    manager = ProcessingManager(store.sessions, registry, config)
    assert manager.run_once() == 1
    wait_for(lambda: manager.busy == 0, message="the worker returned")
    trail = audit_types(store.sessions, item_id)
    assert trail[-3:] == ["noted", "action_completed", "released"]
    assert load(store.sessions, item_id).admission == "idle"
    assert {"other/project", "group/project"} <= manager.wakeup.wait(0).projects
