"""EXPLAIN (ANALYZE, BUFFERS) of every statement behind `scale.py`'s figures.

The statements are the daemon's and the engine's own: the item and the list as the
daemon builds them for its event-loop reads (`wq.daemon.reads`); the history, the
pools, the stats and the `/metrics` gauges recorded while the engine's functions run
on the database; the engine's passes recorded as `scale.py` runs them. Each is
explained with its own parameters in a transaction that is rolled back, since
EXPLAIN ANALYZE carries out the writes it explains.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.orm import Session

from wq.daemon.reads import dimensions_of_one, item_statement, list_statement
from wq.engine import stats
from wq.engine.config import Config
from wq.engine.db import make_sessionmaker
from wq.engine.driver_reads import bound
from wq.engine.history import item_history
from wq.engine.metrics_db import read_snapshot
from wq.engine.models import utcnow
from wq.engine.pools import pool_statuses

Statement = tuple[str, Mapping[str, Any]]
# What is worth a plan: reads and writes of rows, not transaction control or locks.
EXPLAINABLE = ("SELECT", "WITH", "INSERT", "UPDATE", "DELETE")
LOCKS_AND_SIGNALS = ("SELECT PG_ADVISORY", "SELECT PG_TRY_ADVISORY", "SELECT PG_NOTIFY")
LISTS = {
    "list, first page": {},
    "list, phase=active": {"phase": "active"},
    "list, one project": {"project": None},  # the sample's project
    "list, phase=failed": {"phase": "failed"},
}


def recorded(engine: Engine, call: Callable[[], object]) -> list[Statement]:
    """The statements `call` sends through `engine`, with their parameters."""
    statements: list[Statement] = []

    def record(_conn: Any, _cursor: Any, sql: str, params: Any, _ctx: Any, many: bool) -> None:
        words = sql.lstrip().upper()
        if not many and words.startswith(EXPLAINABLE) and not words.startswith(LOCKS_AND_SIGNALS):
            statements.append((sql, params or {}))

    event.listen(engine, "before_cursor_execute", record)
    try:
        call()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return statements


def figure_statements(
    engine: Engine,
    config: Config,
    sample: dict[str, str],
    engine_measures: Mapping[str, Callable[[], object]],
) -> dict[str, list[Statement]]:
    """Each figure's statements on this database, in the order they run."""
    sessions = make_sessionmaker(engine)
    item_id = uuid.UUID(sample["item"])

    def in_session(read: Callable[[Session], object]) -> Callable[[], object]:
        def call() -> object:
            with sessions() as session:
                return read(session)

        return call

    dimensions, dimension_params = dimensions_of_one(item_id)
    found: dict[str, list[Statement]] = {
        "GET item": [
            bound(item_statement(), engine.dialect, {"id": item_id}),
            bound(dimensions, engine.dialect, dimension_params),
        ]
    }
    for name, filters in LISTS.items():
        values = {key: value or sample["project"] for key, value in filters.items()}
        values["limit"] = 51  # a page of 50 and the one that tells whether more follow
        statement = list_statement(values, after=False, postgres=True)
        found[name] = [bound(statement, engine.dialect, values)]
    reads = {
        "item history": in_session(lambda s: item_history(s, item_id=item_id, limit=50)),
        "/api/pools": in_session(lambda s: pool_statuses(s, config)),
        "/api/stats 24h": in_session(
            lambda s: stats.compute(
                s, end=utcnow(), window=timedelta(hours=24), step=timedelta(minutes=15)
            )
        ),
        "/metrics scrape": in_session(lambda s: read_snapshot(s, ["mr"])),
    }
    for name, call in {**reads, **engine_measures}.items():
        found[name] = recorded(engine, call)
    return found


def explain(
    engine: Engine,
    config: Config,
    sample: dict[str, str],
    engine_measures: Mapping[str, Callable[[], object]],
) -> None:
    """Print the plan of every statement of every figure."""
    for name, statements in figure_statements(engine, config, sample, engine_measures).items():
        print(f"\n===== {name}: {len(statements)} statement(s)")
        for sql, params in statements:
            with engine.connect() as conn:
                cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
                cursor.execute("SET LOCAL jit = off")
                cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", params)
                plan = [str(row[0]) for row in cursor.fetchall()]
                conn.rollback()
            print(f"\n-- {' '.join(sql.split())[:160]}\n" + "\n".join(plan))
