"""Admission never waits for a queued row another transaction holds.

A head of a lane locked elsewhere (an operator's open transaction, a long bulk change)
holds up its own lane, in FIFO order: nothing behind it is admitted before it. Every
other lane is admitted at once, and the held lane is looked at again soon after, with
no other wake-up.

PostgreSQL only: SQLite has one writer at a time, taken at BEGIN, and no row locks.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.pq import PipelineStatus
from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from tests.conftest import Store, make_config
from tests.engine.helpers import Listening, load
from tests.engine.test_admission import REGISTRY, enqueue
from tests.support.waiting import wait_for
from wq.engine import admission, admission_statements
from wq.engine.admission import dispatch
from wq.engine.config import Config
from wq.engine.models import utcnow
from wq.engine.pipelined import pipelined_sessions
from wq.engine.processing import ProcessingManager

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def pools_of_two(store: Store, **processing: Any) -> Config:
    overrides: dict[str, Any] = {"pools": {"default": {"capacity": 2, "alert_capacity": 1}}}
    if processing:
        overrides["processing"] = processing
    return make_config(store.url, **overrides)


@pytest.fixture
def holder(store: Store) -> Iterator[Connection]:
    """A connection of another client, whose transaction ends with the test."""
    with store.engine.connect() as connection:
        yield connection
        connection.rollback()


def lock(connection: Connection, item_id: uuid.UUID) -> None:
    connection.execute(text("SELECT id FROM work_items WHERE id = :id FOR UPDATE"), {"id": item_id})


def test_a_locked_head_holds_up_its_lane_and_no_other(store: Store, holder: Connection) -> None:
    config = pools_of_two(store)
    head, behind = enqueue(store, config, "team/locked"), enqueue(store, config, "team/locked")
    other = enqueue(store, config, "team/free")
    lock(holder, head)

    started = time.monotonic()
    admitted = dispatch(store.sessions, config, clock=utcnow)

    # At once (a wait would last the statement timeout, 10 s, then fail the pass),
    # the free project's item only: the item behind the locked head does not overtake it.
    assert time.monotonic() - started < 5
    assert [entry.id for entry in admitted] == [other]
    assert load(store.sessions, head).admission == "queued"
    assert load(store.sessions, behind).admission == "queued"

    holder.rollback()  # the lock ends: the next pass admits both, in their order
    admitted = dispatch(store.sessions, config, clock=utcnow)
    assert [entry.id for entry in admitted] == [head, behind]


def test_a_pass_names_the_projects_it_held_up(store: Store, holder: Connection) -> None:
    config = pools_of_two(store)
    first, second = enqueue(store, config, "team/p"), enqueue(store, config, "team/p")
    enqueue(store, config, "team/free")
    lock(holder, second)

    held: set[str] = set()
    admitted = dispatch(store.sessions, config, clock=utcnow, held=held)

    # The heads before the locked one are admitted; the lane waits from there on.
    assert [entry.id for entry in admitted if entry.project == "team/p"] == [first]
    assert held == {"team/p"}


def test_the_scheduler_admits_other_projects_meanwhile_and_the_held_lane_after(
    store: Store,
    holder: Connection,
    managers: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(admission, "HELD_WARNING_SECONDS", 1.0)
    caplog.set_level(logging.WARNING, logger="wq.engine.admission")
    # Polling once a minute: only wake-ups and the retry of the held lane admit in time.
    config = pools_of_two(store, poll_interval_seconds=60.0)
    held = enqueue(store, config, "team/locked")
    lock(holder, held)
    manager = ProcessingManager(store.sessions, REGISTRY, config)
    managers.append(Listening(store.engine, manager.wakeup))
    manager.start()
    managers.append(manager)
    time.sleep(0.5)  # its first pass looked at every queue

    other = enqueue(store, config, "team/free")  # its NOTIFY wakes the scheduler
    wait_for(
        lambda: load(store.sessions, other).admission != "queued",
        timeout=3,
        message="another project's item admitted while a queue head is locked",
    )
    assert load(store.sessions, held).admission == "queued"

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "wq.engine.admission"]

    # Held for long, it is worth a warning (once): a transaction left open, most likely.
    wait_for(warnings, timeout=5, message="a warning of the held queue")
    time.sleep(1.0)
    holder.rollback()
    wait_for(
        lambda: load(store.sessions, held).admission != "queued",
        timeout=5,
        message="the held item admitted once its lock ended",
    )
    (warning,) = warnings()
    assert "team/locked" in warning and "holds locked" in warning


def test_admitted_items_run_while_an_admission_pass_waits_for_its_lock(
    store: Store, holder: Connection, managers: list[Any]
) -> None:
    config = pools_of_two(store)
    ready = enqueue(store, config, "team/ready")
    dispatch(store.sessions, config, clock=utcnow)
    waiting = enqueue(store, config, "team/waiting")
    # Another replica's admission pass, slow to commit, holds the admission lock.
    holder.execute(
        text("SELECT pg_advisory_xact_lock(:space, 0)"),
        {"space": admission_statements._ADMISSION_LOCK_SPACE},
    )
    manager = ProcessingManager(store.sessions, REGISTRY, config)
    manager.start()
    managers.append(manager)
    # The scheduler's claim does not wait for its own admission pass, which waits for
    # the lock: the admitted item runs to the end meanwhile.
    wait_for(
        lambda: load(store.sessions, ready).admission == "idle",
        timeout=5,
        message="the admitted item ran while the admission lock was held elsewhere",
    )
    assert load(store.sessions, waiting).admission == "queued"
    holder.rollback()
    wait_for(
        lambda: load(store.sessions, waiting).admission == "idle",
        timeout=5,
        message="the queued item admitted and run once the lock ended",
    )


def test_a_failed_admission_pass_leaves_its_projects_for_the_next_pass(
    store: Store, managers: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = pools_of_two(store, poll_interval_seconds=60.0)  # no poll in the test's time
    manager = ProcessingManager(store.sessions, REGISTRY, config)
    managers.append(Listening(store.engine, manager.wakeup))
    manager.start()
    managers.append(manager)
    time.sleep(0.5)  # its first pass looked at every queue
    real_run = admission.AdmissionPass.run
    failures: list[set[str] | None] = []

    def fail_once(self: admission.AdmissionPass, session: Any) -> Any:
        if not failures:
            failures.append(None if self.projects is None else set(self.projects))
            raise RuntimeError("the database refused the pass")
        return real_run(self, session)

    monkeypatch.setattr(admission.AdmissionPass, "run", fail_once)
    first = enqueue(store, config, "team/first")  # its pass fails
    wait_for(lambda: failures, timeout=3, message="the first pass failed")
    assert load(store.sessions, first).admission == "queued"
    second = enqueue(store, config, "team/second")  # the next pass takes both
    for item_id in (first, second):
        wait_for(
            lambda item_id=item_id: load(store.sessions, item_id).admission != "queued",
            timeout=5,
            message="admitted by the pass after the failed one",
        )


def test_a_replica_stopped_while_holding_the_admission_lock_loses_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica stopped inside its admission pass (SIGSTOP, a frozen VM) does not hold
    up every other replica's admission: PostgreSQL ends its idle transaction."""
    monkeypatch.setattr(admission_statements, "ADMISSION_IDLE_LIMIT_SECONDS", 0.5)
    config = pools_of_two(store)
    item = enqueue(store, config, "team/p")
    stopped = store.sessions()
    stopped.begin()
    assert admission_statements.lock_admission(stopped, ["team/p"])

    started = time.monotonic()
    admitted = dispatch(store.sessions, config, clock=utcnow)

    # Not after the statement timeout (10 s), when the pass would fail instead.
    assert time.monotonic() - started < 5
    assert [entry.id for entry in admitted] == [item]
    # The stopped replica, when it runs again, finds its transaction gone.
    with pytest.raises(DBAPIError, match="idle-in-transaction timeout"):
        stopped.commit()
    stopped.close()


def test_the_admission_lock_bounds_only_its_own_transaction(store: Store) -> None:
    """The idle bound ends with the transaction that took the lock: other work on the
    same pooled connection may hold a transaction open longer (an executor's call)."""
    setting = text("SELECT current_setting('idle_in_transaction_session_timeout')")
    enqueue(store, pools_of_two(store), "team/p")
    with store.engine.connect() as connection:
        default = connection.execute(setting).scalar_one()
        connection.commit()
        with Session(bind=connection) as session, session.begin():
            assert admission_statements.lock_admission(session, ["team/p"])
            assert session.execute(setting).scalar_one() == "5s"
        assert connection.execute(setting).scalar_one() == default


def test_the_admission_lock_is_never_taken_in_a_pipeline(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL starts a transaction's idle bound only once a sync has come: a replica
    stopped after the lock's statement and before the rest of a pipeline held the lock
    with no bound (seen from outside: admission stopped on every replica)."""
    statuses: list[PipelineStatus] = []
    real_execute = psycopg.Cursor.execute

    def execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        if "pg_advisory_xact_lock" in str(query):
            statuses.append(self.connection.pgconn.pipeline_status)
        return real_execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    config = pools_of_two(store)
    first, second = enqueue(store, config, "team/p"), enqueue(store, config, "team/p")
    sessions = pipelined_sessions(store.sessions)
    # The admitter's pass (the lock its transaction's first statement), then the
    # scheduler's claim with a pass in its transaction (`run_once`).
    with sessions.begin() as session:
        admission.AdmissionPass(config, ["team/p"], clock=utcnow, held=set()).run(session)
    manager = ProcessingManager(store.sessions, REGISTRY, config)
    manager.run_once(projects={"team/p"})
    assert statuses and set(statuses) == {PipelineStatus.OFF}
    assert {load(store.sessions, item).admission for item in (first, second)} != {"queued"}
