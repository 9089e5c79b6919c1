"""Pooled PostgreSQL connections: no ping on a hot checkout, a dead idle one is replaced."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from wq.engine import db
from wq.engine.db import make_engine


def test_a_connection_killed_while_idle_is_replaced_unnoticed(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(pg_database, pool_size=1)
    other = make_engine(pg_database, pool_size=1)
    try:
        with engine.connect() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with other.begin() as conn:
            # Returns once the backend has ended, not as soon as it was told to.
            conn.execute(text("SELECT pg_terminate_backend(:pid, 5000)"), {"pid": pid})
        monkeypatch.setattr(db, "IDLE_PING_SECONDS", 0.0)  # it has been idle long enough
        with engine.connect() as conn:
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar_one() != pid
    finally:
        engine.dispose()
        other.dispose()


def test_a_connection_used_just_now_is_not_pinged(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(pg_database, pool_size=1)
    pings: list[object] = []
    real_ping = engine.dialect.do_ping

    def counted(dbapi_connection: object) -> bool:
        pings.append(dbapi_connection)
        return bool(real_ping(dbapi_connection))

    monkeypatch.setattr(engine.dialect, "do_ping", counted)
    try:
        for _ in range(5):
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        assert pings == []
        monkeypatch.setattr(db, "IDLE_PING_SECONDS", 0.0)
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        assert len(pings) == 1
    finally:
        engine.dispose()
