"""The deployer commands behind `wq daemon`, `wq db ...` and `wq config check`.

The CLI imports this module only when one of these commands runs, so the operator
commands never load the engine.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING

from wq.daemon.logs import setup_logging
from wq.engine.config import ConfigError, load_config, require_webhook_secret
from wq.engine.db import shown_url

if TYPE_CHECKING:
    from datetime import datetime

    from sqlalchemy import Engine

    from wq.engine.config import Config

EXIT_OK = 0
EXIT_FAILURE = 1


def _fail(message: str) -> int:
    print(f"wq: error: {message}", file=sys.stderr)
    return EXIT_FAILURE


def daemon(
    config_path: str | None, host: str | None, port: int | None, log_format: str = "text"
) -> int:
    """Run the daemon until it is told to stop (logging text or JSON lines to stderr)."""
    setup_logging(log_format)
    try:
        # Before the server's imports, so that a bad config is refused at once.
        config = load_config(config_path)
    except ConfigError as err:
        return _fail(str(err))
    from wq.daemon.serve import StartupError, run_daemon

    try:
        run_daemon(config, host=host, port=port)
    except (ConfigError, StartupError) as err:
        return _fail(str(err))
    return EXIT_OK


def _database(
    config_path: str | None, config: Config | None = None, *, create: bool = False
) -> Engine:
    """The configured database alone: migrating needs no types, tokens or auth tiers.

    Only `wq db migrate` (`create`) makes a SQLite file that is not there: a command
    that reads must not leave an empty database behind.
    """
    from wq.engine.config import default_database_url
    from wq.engine.db import Timeouts, make_engine

    config = config or load_config(config_path)
    # Migrations may run long statements: only the connection attempt is bounded.
    timeouts = Timeouts(config.database.connect_timeout_seconds, statement_seconds=None)
    return make_engine(
        config.database_url or default_database_url(),
        pool_size=1,
        timeouts=timeouts,
        create=create,
    )


def _missing(err: BaseException) -> str | None:
    """What to say when `err` is a SQLite file that is not there (None otherwise)."""
    from wq.engine.db import missing_database
    from wq.engine.schema import FIX_COMMAND

    missing = missing_database(err)
    return None if missing is None else f"{missing}: run `{FIX_COMMAND}` to create it"


def audit_archive(config_path: str | None, since: datetime, until: datetime | None) -> int:
    """Upload the audit entries from `since` (to `until`) to the S3 archive again."""
    from wq.engine import schema
    from wq.engine.archive import S3Archive, rearchive
    from wq.engine.db import make_sessionmaker

    try:
        config = load_config(config_path)
    except ConfigError as err:
        return _fail(str(err))
    if not config.audit.archiving:
        return _fail(
            "audit archival is off: name a bucket in audit.s3_bucket or WQ_AUDIT_S3_BUCKET"
        )
    archive = S3Archive.from_config(config.audit)
    try:
        engine = _database(config_path, config)
        schema.check_current(engine)
        result = rearchive(
            make_sessionmaker(engine),
            archive,
            since,
            until,
            threads=config.audit.s3_upload_threads,
        )
    except schema.SchemaOutdated as err:
        return _fail(str(err))
    except Exception as err:
        from wq.engine.outage import describe

        return _fail(_missing(err) or f"cannot read the audit log: {describe(err)}")
    span = f"from {since.isoformat()} to {until.isoformat() if until else 'now'}"
    if result.failed:
        return _fail(
            f"{result.failed} of {result.claimed} audit entries {span} could not be archived "
            f"to {archive.location} ({result.error}); run the command again"
        )
    print(f"archived {result.uploaded} audit entries {span} to {archive.location}")
    return EXIT_OK


def _shown(engine: Engine) -> str:
    """The database's URL as a reader may see it (password hidden)."""
    return shown_url(engine.url)


def db_migrate(config_path: str | None) -> int:
    """Upgrade the database schema to the newest revision."""
    from wq.engine import schema
    from wq.engine.db import DatabaseUncreatable
    from wq.engine.outage import describe

    try:
        engine = _database(config_path, create=True)
    except (ConfigError, DatabaseUncreatable) as err:
        return _fail(str(err))
    try:
        before = schema.current_revision(engine)
        schema.upgrade(engine)
        after = schema.current_revision(engine)
    except Exception as err:
        return _fail(f"migration of {_shown(engine)} failed: {describe(err)}")
    if before == after:
        print(f"database {_shown(engine)} already at {after}")
    else:
        print(f"database {_shown(engine)} migrated from {before or 'empty'} to {after}")
    return EXIT_OK


def db_current(config_path: str | None) -> int:
    """Print which database was read, its schema revision and whether it is the newest."""
    from wq.engine import schema
    from wq.engine.outage import describe

    try:
        engine = _database(config_path)
    except ConfigError as err:
        return _fail(str(err))
    try:
        current = schema.current_revision(engine)
        head = schema.head_revision(engine)
    except Exception as err:
        return _fail(
            _missing(err) or f"cannot read the schema revision of {_shown(engine)}: {describe(err)}"
        )
    state = "up to date" if current == head else f"outdated, head is {head}: run `wq db migrate`"
    print(f"{_shown(engine)}: {current or 'empty'} ({state})")
    return EXIT_OK if current == head else EXIT_FAILURE


# How every config check names a variable it needs (config, types, auth), after the key.
_UNSET_VARIABLE = re.compile(r"(?:: ([^:]+))?: environment variable (\S+) is not set")


def _check_config(path: str, *, this_host: bool) -> list[str]:
    """Validate the config as a start on this host would; the warnings it would log."""
    from wq.daemon.preflight import check_startable, start_warnings
    from wq.daemon.runtime import build_registry

    config = load_config(path)
    require_webhook_secret(config)
    registry = build_registry(config)
    check_startable(config, registry, this_host=this_host)
    return start_warnings(config, registry, this_host=this_host)


def config_check(path: str, *, no_env: bool = False) -> int:
    """Validate a config file without starting anything.

    With `no_env` only the structure is checked, in an empty environment: each
    variable the config needs is noted, given a placeholder, and listed at the end.
    """
    needed: list[str] = []
    keys: list[str] = []  # the keys that name them, in the same order
    saved = dict(os.environ)
    try:
        if no_env:
            os.environ.clear()
        while True:
            try:
                warnings = _check_config(path, this_host=not no_env)
                break
            except ConfigError as err:
                found = _UNSET_VARIABLE.search(str(err))
                if found is None or found.group(2) in needed:
                    return _fail(str(err))
                # Noted, and given a placeholder so that the check goes on to the next.
                needed.append(found.group(2))
                keys.append(found.group(1) or "")
                os.environ[found.group(2)] = "placeholder"
    finally:
        os.environ.clear()
        os.environ.update(saved)
    if needed and not no_env:
        variables = "variables" if len(needed) > 1 else "variable"
        named = [f"{name} ({key})" if key else name for name, key in zip(needed, keys, strict=True)]
        return _fail(f"config {path}: environment {variables} not set: {', '.join(named)}")
    for warning in warnings:
        sys.stderr.write(f"wq: warning: {warning}\n")
    if not no_env:
        print(f"{path}: ok")
        return EXIT_OK
    print(f"{path}: structure ok (environment not checked)")
    print(f"a real start needs: {', '.join(needed) if needed else 'no environment variables'}")
    return EXIT_OK
