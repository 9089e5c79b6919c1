"""Shared fixtures: every storage test runs on SQLite and on PostgreSQL.

PostgreSQL tests use a database of their own (created once per run, migrated, and
emptied between tests). When PostgreSQL cannot be reached they are skipped on a
laptop but fail in CI (`CI` or `WQ_REQUIRE_POSTGRES` set), so CI can never pass
without really running them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from wq.engine import schema
from wq.engine.config import Config, parse_config
from wq.engine.db import make_engine, make_sessionmaker
from wq.engine.models import Base


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker more than the cores. Much of the suite waits on daemons,
    subprocesses and fake servers, so a worker per core leaves the cores part idle
    (the suite took a fifth longer so on two cores)."""
    return (os.cpu_count() or 1) + 1


PG_ADMIN_URL = os.environ.get(
    "WQ_TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REQUIRE_PG = bool(os.environ.get("CI") or os.environ.get("WQ_REQUIRE_POSTGRES"))


@contextlib.contextmanager
def throwaway_pg_database(prefix: str) -> Iterator[str]:
    """A new, empty PostgreSQL database, dropped afterwards.

    Unreachable PostgreSQL skips the test on a laptop and fails it in CI.
    """
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = make_engine(PG_ADMIN_URL, pool_size=1)
    try:
        with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as err:
        admin.dispose()
        message = f"PostgreSQL at {PG_ADMIN_URL} is not reachable: {err}"
        if REQUIRE_PG:
            pytest.fail(message)
        pytest.skip(message)
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextlib.contextmanager
def filled_pg_database(prefix: str, *statements: str) -> Iterator[tuple[str, Engine]]:
    """A throwaway PostgreSQL database migrated just now, `work_items` without
    autovacuum (no autoanalyze may hand the planner statistics meanwhile), each of
    `statements` run in order in one transaction; its URL and an engine on it."""
    with throwaway_pg_database(prefix) as url:
        engine = make_engine(url, pool_size=2)
        try:
            schema.upgrade(engine)
            with engine.begin() as conn:
                conn.execute(text("ALTER TABLE work_items SET (autovacuum_enabled = false)"))
                for statement in statements:
                    conn.execute(text(statement))
            yield url, engine
        finally:
            engine.dispose()


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """The URL of a moto server (server mode, HTTP on 127.0.0.1) shared by the session."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake AWS credentials and region, so boto3 never looks for real ones."""
    for var, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        monkeypatch.setenv(var, value)


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for this test run; dropped at the end."""
    with throwaway_pg_database("wq_test") as url:
        engine = make_engine(url, pool_size=2)
        schema.upgrade(engine)
        engine.dispose()
        yield url


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file that each test copies (faster than migrating each time)."""
    path = tmp_path_factory.mktemp("template") / "template.db"
    engine = make_engine(f"sqlite:///{path}", pool_size=1)
    schema.upgrade(engine)
    engine.dispose()  # closing the last connection checkpoints the WAL into the file
    return path


def empty_postgres(engine: Engine) -> None:
    """Remove every row (the sequence keeps counting)."""
    tables = ", ".join(
        table.name for table in Base.metadata.sorted_tables if table.name != "wq_sequences"
    )
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {tables} CASCADE"))


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty database URL; the test runs once per database."""
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        path = tmp_path / "wq.db"
        path.write_bytes(template.read_bytes())
        return f"sqlite:///{path}"
    url: str = request.getfixturevalue("pg_database")
    engine = make_engine(url, pool_size=1)
    empty_postgres(engine)
    engine.dispose()
    return url


@dataclass
class Store:
    """A test's database: engine, sessions and a config pointing at it."""

    url: str
    engine: Engine
    sessions: sessionmaker[Session]
    config: Config

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name


def make_config(url: str, **overrides: object) -> Config:
    """A config for tests: fast polling, short leases, the given overrides."""
    data: dict[str, object] = {
        "database_url": url,
        "processing": {
            "workers": 4,
            "lease_seconds": 5.0,
            "poll_interval_seconds": 0.2,
            "sweep_interval_seconds": 3600.0,
            "backoff_base_seconds": 0.05,
            "backoff_max_seconds": 0.2,
            "shutdown_grace_seconds": 5.0,
        },
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}  # type: ignore[dict-item]
        else:
            data[key] = value
    return parse_config(data, "test config")


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    """The test's database with engine and sessions."""
    engine = make_engine(db_url, pool_size=20)
    yield Store(db_url, engine, make_sessionmaker(engine), make_config(db_url))
    engine.dispose()


@pytest.fixture
def postgres_store(pg_database: str) -> Iterator[Store]:
    """The run's PostgreSQL database, emptied, for what exists only there (several
    processes on one database, the API's statements on the event loop)."""
    engine = make_engine(pg_database, pool_size=5)
    empty_postgres(engine)
    yield Store(pg_database, engine, make_sessionmaker(engine), make_config(pg_database))
    engine.dispose()


@pytest.fixture
def managers(store: Store) -> Iterator[list[object]]:
    """Processing managers started by a test; stopped at its end."""
    started: list[object] = []
    yield started
    for manager in started:
        manager.stop(grace=2)  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def promtool() -> str:
    """Prometheus's `promtool` (Debian's `prometheus` package, which `.ci/run` installs):
    skipped without it on a laptop, a failure in CI."""
    found = shutil.which("promtool")
    if found is None:
        message = "promtool is not installed (Debian package `prometheus`)"
        if REQUIRE_PG:  # CI: the check must run, not vanish
            pytest.fail(message)
        pytest.skip(message)
    return found
