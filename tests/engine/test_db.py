"""SQLite engines: what `make_engine` creates on disk, and what it must not.

The database holds every work item and its payload: on a host shared with other users
the directory wq makes for it is 0700 and the file 0600, whatever the umask (SQLite
gives its -wal and -shm files the database file's mode). An engine that may not create
its database (`wq db current`, a configured daemon) creates no file nor directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import exc, text
from sqlalchemy.engine import make_url

from tests.conftest import Store
from tests.support.modes import mode, umask_022  # noqa: F401 - fixture
from wq.engine import db, schema
from wq.engine.db import make_engine, shown_url


@pytest.mark.usefixtures("umask_022")
def test_a_database_wq_creates_is_readable_by_its_user_only(tmp_path: Path) -> None:
    # As the embedded default's $XDG_DATA_HOME/wq/wq.db, XDG_DATA_HOME itself missing.
    data = tmp_path / "data"
    path = data / "wq" / "wq.db"
    engine = make_engine(f"sqlite:///{path}", pool_size=1)
    try:
        schema.upgrade(engine)
        with engine.connect() as connection:  # the WAL and its index exist while open
            connection.execute(text("SELECT 1"))
            files = {name: mode(path.parent / name) for name in os.listdir(path.parent)}
            assert files == {"wq.db": 0o600, "wq.db-wal": 0o600, "wq.db-shm": 0o600}
    finally:
        engine.dispose()
    assert (mode(data), mode(data / "wq")) == (0o700, 0o700)


@pytest.mark.usefixtures("umask_022")
def test_an_existing_database_and_directory_keep_their_modes(tmp_path: Path) -> None:
    # The operator's choice (a group-readable directory, a file made beforehand).
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o750)
    path = folder / "wq.db"
    path.touch(mode=0o640)
    engine = make_engine(f"sqlite:///{path}", pool_size=1)
    try:
        schema.upgrade(engine)
    finally:
        engine.dispose()
    assert (mode(folder), mode(path)) == (0o750, 0o640)


def test_an_engine_that_may_not_create_finds_no_database_and_creates_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "nx" / "a" / "b" / "x.db"
    engine = make_engine(f"sqlite:///{path}", pool_size=1, create=False)
    try:
        with pytest.raises(exc.OperationalError) as caught:
            schema.current_revision(engine)
    finally:
        engine.dispose()
    missing = db.missing_database(caught.value)
    assert isinstance(missing, db.DatabaseMissing)
    assert str(missing) == f"no database at {path}"
    assert not (tmp_path / "nx").exists()


def test_an_engine_that_may_not_create_uses_an_existing_database(tmp_path: Path) -> None:
    path = tmp_path / "wq.db"
    made = make_engine(f"sqlite:///{path}", pool_size=1)
    try:
        schema.upgrade(made)
    finally:
        made.dispose()
    engine = make_engine(f"sqlite:///{path}", pool_size=1, create=False)
    try:
        schema.check_current(engine)
        with engine.begin() as connection:  # and writes to it
            connection.execute(text("CREATE TABLE scratch (x INTEGER)"))
        path.unlink()
        for name in ("wq.db-wal", "wq.db-shm"):
            (tmp_path / name).unlink(missing_ok=True)
        engine.dispose()
        # Removed under a running engine: not made again, empty, by the next connection.
        with pytest.raises(exc.OperationalError) as caught:
            schema.current_revision(engine)
        assert db.missing_database(caught.value) is not None
    finally:
        engine.dispose()
    assert not path.exists()


def test_a_database_that_cannot_be_created_names_what_and_why(tmp_path: Path) -> None:
    # A regular file where a directory must go: creation fails even for root.
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    for path, failed in (
        (blocker / "data" / "wq" / "wq.db", blocker / "data"),  # below the file
        (blocker / "wq.db", blocker),  # the file is the database's directory
    ):
        with pytest.raises(db.DatabaseUncreatable) as caught:
            make_engine(f"sqlite:///{path}", pool_size=1)
        assert isinstance(caught.value, OSError)
        assert str(caught.value) == (
            f"cannot create {failed} (for the database {path}): Not a directory"
        )
    assert blocker.read_text() == ""


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+psycopg://wq:pw@db:5432/wq", "postgresql+psycopg://wq:***@db:5432/wq"),
        (
            "postgresql+psycopg://wq@db/wq?password=hunter3&sslmode=require",
            "postgresql+psycopg://wq@db/wq?password=***&sslmode=require",
        ),
        (
            "postgresql+psycopg://wq@db/wq?sslpassword=k",
            "postgresql+psycopg://wq@db/wq?sslpassword=***",
        ),
        ("sqlite:////var/lib/wq/wq.db", "sqlite:////var/lib/wq/wq.db"),
    ],
)
def test_a_shown_url_hides_every_password(url: str, shown: str) -> None:
    assert shown_url(make_url(url)) == shown


def test_a_database_error_does_not_quote_the_statements_values(store: Store) -> None:
    # The error's text is logged and kept as an item's error: it quoted the values (a
    # task's output, a payload) that the statement carried.
    with pytest.raises(exc.DBAPIError) as raised, store.engine.connect() as connection:
        connection.execute(
            text("INSERT INTO work_items (id, type) VALUES (:id, :type)"),
            {"id": "not-secret", "type": "the-secret-value"},
        )
    assert "the-secret-value" not in str(raised.value)
    assert "parameters hidden" in str(raised.value)
