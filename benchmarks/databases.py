"""Throwaway PostgreSQL databases for the benchmarks."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator

import psycopg
from sqlalchemy.engine import make_url

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def add_admin_url(parser: argparse.ArgumentParser) -> None:
    """`--admin-url`: the server the throwaway databases are made on (`WQ_BENCH_ADMIN_URL`)."""
    parser.add_argument(
        "--admin-url",
        default=os.environ.get("WQ_BENCH_ADMIN_URL", DEFAULT_ADMIN_URL),
        help="server used to create and drop the throwaway databases",
    )


def pg_url(url: str, database: str) -> str:
    """The same server URL pointing at another database."""
    return make_url(url).set(database=database).render_as_string(hide_password=False)


def libpq_url(url: str) -> str:
    """A URL psycopg/asyncpg accept (no SQLAlchemy driver suffix)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@contextlib.contextmanager
def bench_database(
    url: str | None, admin_url: str, keep: bool, prefix: str = "wq_bench"
) -> Iterator[str]:
    """The database to measure in: the given URL, or a throwaway one dropped afterwards."""
    if url:
        yield url
        return
    name = f"{prefix}_{os.getpid()}"
    with psycopg.connect(libpq_url(admin_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg_url(admin_url, name)
    finally:
        if keep:
            print(f"kept database {name}", file=sys.stderr)
        else:
            with psycopg.connect(libpq_url(admin_url), autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
