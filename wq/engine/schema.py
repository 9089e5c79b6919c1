"""Schema migrations (Alembic, with wq's own version table) and the start-up check."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import time
from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

from wq.engine.db import MIGRATION_TIMEOUTS, make_engine

VERSION_TABLE = "wq_alembic_version"
FIX_COMMAND = "wq db migrate"


class SchemaOutdated(RuntimeError):
    """The database schema is not at the migrations' head."""


def migrations_dir() -> Path:
    """Where the Alembic scripts are (installed as the `wq.migrations` package)."""
    spec = importlib.util.find_spec("wq.migrations")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the wq.migrations package is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def make_engine_for_migrations(url: str) -> Engine:
    """An engine for running Alembic outside wq (the `alembic` command)."""
    return make_engine(url, pool_size=1, timeouts=MIGRATION_TIMEOUTS)


def alembic_config(engine: Engine) -> AlembicConfig:
    """An Alembic config bound to an engine's URL."""
    config = AlembicConfig()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option(
        "sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%")
    )
    return config


# The advisory lock `wq db migrate` holds on PostgreSQL while it migrates.
MIGRATION_LOCK = 0x77715F6D69677261  # "wq_migra"
MIGRATION_LOCK_POLL_SECONDS = 0.5


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate the database up to a revision (head by default).

    On PostgreSQL one migration runs at a time (an advisory lock held for the whole
    upgrade, on a connection of its own): two `wq db migrate` at once (two shells, two
    deploy jobs) would each apply the same migration, and one fail half-way.
    """
    with contextlib.ExitStack() as stack:
        if engine.dialect.name == "postgresql":
            lock = stack.enter_context(engine.connect())
            # Tried, not waited for in a statement: a waiting statement holds a snapshot,
            # and the other's CREATE INDEX CONCURRENTLY would wait for it in turn.
            take = text("SELECT pg_try_advisory_lock(:key)")
            while not lock.execute(take, {"key": MIGRATION_LOCK}).scalar_one():
                lock.commit()
                time.sleep(MIGRATION_LOCK_POLL_SECONDS)
            lock.commit()  # a session's lock: it outlives the transaction
            stack.callback(
                lambda: lock.execute(
                    text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK}
                )
            )
        config = alembic_config(engine)
        # Alembic runs each migration in a transaction of its own (see migrations/env.py):
        # one that builds an index CONCURRENTLY commits what came before it.
        with engine.connect() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
            connection.commit()


def head_revision(engine: Engine) -> str | None:
    """The newest revision the installed migrations know."""
    return ScriptDirectory.from_config(alembic_config(engine)).get_current_head()


@functools.cache
def _installed_scripts() -> ScriptDirectory:
    script = AlembicConfig()
    script.set_main_option("script_location", str(migrations_dir()))
    return ScriptDirectory.from_config(script)


def cached_head_revision() -> str | None:
    """The newest revision of the installed migrations (read once per process)."""
    return _installed_scripts().get_current_head()


@functools.cache
def _installed_revisions() -> frozenset[str]:
    return frozenset(script.revision for script in _installed_scripts().walk_revisions())


def is_behind(current: str | None) -> bool:
    """True when a database at `current` needs `wq db migrate` for this release: empty,
    or at an older revision the installed migrations know. A revision they do not know
    was written by a newer release's migrations (the first step of an upgrade): this
    release keeps serving until the rollout replaces it."""
    if current == cached_head_revision():
        return False
    return current is None or current in _installed_revisions()


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None for an empty database)."""
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()


def check_current(engine: Engine) -> None:
    """Refuse an outdated schema, naming the command that fixes it."""
    current, head = current_revision(engine), head_revision(engine)
    if current != head:
        raise SchemaOutdated(
            f"database schema is at {current or 'nothing (empty database)'}, "
            f"wq needs {head}: run `{FIX_COMMAND}`"
        )
