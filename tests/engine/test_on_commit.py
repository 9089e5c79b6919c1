"""Wake-ups and audit log lines wait for the outermost commit; savepoints are respected."""

from __future__ import annotations

import logging

import pytest

from tests.conftest import Store
from wq.engine import on_commit
from wq.engine.audit import AuditRecord, audit
from wq.engine.wakeup import PROJECT_QUEUED, WAKEUP_KEY, Wakeup, signal


def test_signals_and_audit_lines_wait_for_the_root_commit(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    hub = Wakeup()
    store.sessions.configure(info={WAKEUP_KEY: hub})
    caplog.set_level(logging.INFO, logger="wq.audit")
    with store.sessions() as session:
        signal(session, PROJECT_QUEUED, "kept")
        with session.begin_nested():  # released: its signal stays pending
            signal(session, PROJECT_QUEUED, "released")
            audit(session, AuditRecord("test_released", "t", trigger={"source": "test"}))
        try:
            with session.begin_nested():
                signal(session, PROJECT_QUEUED, "dropped")
                audit(session, AuditRecord("test_dropped", "t", trigger={"source": "test"}))
                raise RuntimeError("roll the savepoint back")
        except RuntimeError:
            pass
        assert not hub.wait(0).projects  # nothing before the commit
        assert "test_released" not in caplog.text
        session.commit()
    assert hub.wait(0).projects == {"kept", "released"}
    assert "test_released" in caplog.text and "test_dropped" not in caplog.text


def test_a_root_rollback_delivers_nothing(store: Store) -> None:
    hub = Wakeup()
    store.sessions.configure(info={WAKEUP_KEY: hub})
    with store.sessions() as session:
        signal(session, PROJECT_QUEUED, "never")
        session.rollback()
        session.commit()  # a later, empty commit must not deliver the dropped signal
    assert not hub.wait(0)


def test_what_is_pending_follows_savepoints_takes_and_commits(store: Store) -> None:
    with store.sessions() as session:
        on_commit.defer(session, "signal", ("k", "a"))
        assert on_commit.is_pending(session, "signal", ("k", "a"))
        assert not on_commit.is_pending(session, "signal", ("k", "b"))
        try:
            with session.begin_nested():
                on_commit.defer(session, "signal", ("k", "b"))
                assert on_commit.is_pending(session, "signal", ("k", "b"))
                raise RuntimeError("roll the savepoint back")
        except RuntimeError:
            pass
        assert not on_commit.is_pending(session, "signal", ("k", "b"))  # dropped with it
        on_commit.defer(session, "signal", ("k", "c"))  # as many entries as before
        assert on_commit.is_pending(session, "signal", ("k", "c"))
        assert not on_commit.is_pending(session, "signal", ("k", "b"))
        assert on_commit.take(session, "signal") == [("k", "a"), ("k", "c")]
        assert not on_commit.is_pending(session, "signal", ("k", "a"))
        on_commit.defer(session, "signal", ("k", "a"))
        session.commit()
        assert not on_commit.is_pending(session, "signal", ("k", "a"))  # gone with it


def test_a_signal_repeated_in_a_transaction_waits_once(store: Store) -> None:
    with store.sessions() as session:
        for project in ("a", "b", "a", "a", "b"):
            signal(session, PROJECT_QUEUED, project)
        assert on_commit.take(session, "signal") == [(PROJECT_QUEUED, "a"), (PROJECT_QUEUED, "b")]
