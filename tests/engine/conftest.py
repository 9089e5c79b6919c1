"""Fixtures of the engine tests that run several processes on one database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import Store, empty_postgres, make_config
from wq.engine.db import make_engine, make_sessionmaker


@pytest.fixture
def postgres_store(pg_database: str) -> Iterator[Store]:
    """Several processes share a database only on PostgreSQL: no SQLite variant."""
    engine = make_engine(pg_database, pool_size=5)
    empty_postgres(engine)
    yield Store(pg_database, engine, make_sessionmaker(engine), make_config(pg_database))
    engine.dispose()
