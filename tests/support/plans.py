"""PostgreSQL plans of statements the engine sent: EXPLAIN them, name their scans.

Shared by the admission tests and `benchmarks/admission.py`, so that the test guarding a
plan and the benchmark reporting it read plans the same way. A statement is taken as the
engine sent it (psycopg's `%(name)s` placeholders and its parameters, as a SQLAlchemy
`before_cursor_execute` listener sees them) and planned twice: as a custom plan (the
parameters known, what the first executions get) and as a generic plan (what a
statement psycopg prepared after 5 runs on a connection may switch to under
plan_cache_mode=auto).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy import Engine, event
from sqlalchemy.engine import make_url

_PARAM = re.compile(r"%\((\w+)\)s")


@dataclass
class Plan:
    """EXPLAIN output of one statement, as custom and as generic plan."""

    name: str
    sql: str
    custom: list[str]
    generic: list[str]
    custom_indexes: list[str]
    generic_indexes: list[str]
    custom_seq_scans: list[str]
    generic_seq_scans: list[str]


@dataclass(frozen=True)
class Sent:
    """One statement as the engine sent it to the driver."""

    statement: str
    parameters: Any  # a dict, or a list of them for executemany


@contextlib.contextmanager
def capture(engine: Engine) -> Iterator[list[Sent]]:
    """Every statement run on `engine` inside the block, in order."""
    sent: list[Sent] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        sent.append(Sent(statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", record)


def libpq_url(url: str) -> str:
    """A URL psycopg accepts (no SQLAlchemy driver suffix)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _positional(statement: str, parameters: dict[str, Any]) -> tuple[str, list[Any]]:
    """psycopg's %(name)s placeholders as $n, for PREPARE."""
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in order:
            order.append(match.group(1))
        return f"${order.index(match.group(1)) + 1}"

    sql = _PARAM.sub(number, statement).replace("%%", "%")
    return sql, [parameters[name] for name in order]


def _literal(statement: str, parameters: dict[str, Any]) -> str:
    """The statement with its parameters inlined (for reports only)."""

    def value(match: re.Match[str]) -> str:
        param = parameters[match.group(1)]
        return str(param) if isinstance(param, int) else "'" + str(param).replace("'", "''") + "'"

    return _PARAM.sub(value, statement).replace("%%", "%")


def explain(
    url: str, name: str, statement: str, parameters: dict[str, Any], *, analyze: bool = True
) -> Plan:
    """EXPLAIN one captured statement, custom and generic plan, on a connection of its own.

    With `analyze` (EXPLAIN (ANALYZE, BUFFERS)) the statement runs, inside a transaction
    that is rolled back; without it, it is only planned.
    """
    options = "(ANALYZE, BUFFERS) " if analyze else ""
    sql, values = _positional(statement, parameters)
    prepared = "plan_" + re.sub(r"\W", "_", name)
    # Client-side binding: the server cannot infer parameter types inside EXPLAIN.
    with psycopg.connect(libpq_url(url), cursor_factory=psycopg.ClientCursor) as conn:
        custom = [
            row[0]
            for row in conn.execute(f"EXPLAIN {options}" + statement, parameters, prepare=False)
        ]
        conn.rollback()
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE {prepared} AS {sql}")
        placeholders = ", ".join(["%s"] * len(values))
        generic = [
            row[0]
            for row in conn.execute(
                f"EXPLAIN {options}EXECUTE {prepared}" + (f"({placeholders})" if values else ""),
                values,
                prepare=False,
            )
        ]
        conn.rollback()
    return Plan(
        name=name,
        sql=_literal(statement, parameters),
        custom=custom,
        generic=generic,
        custom_indexes=indexes(custom),
        generic_indexes=indexes(generic),
        custom_seq_scans=seq_scans(custom),
        generic_seq_scans=seq_scans(generic),
    )


def indexes(plan: list[str]) -> list[str]:
    """The indexes a text plan reads."""
    pattern = (
        r"(?:Index Scan|Index Only Scan|Index Scan Backward) using (\w+)|Bitmap Index Scan on (\w+)"
    )
    found = re.findall(pattern, "\n".join(plan))
    return sorted({a or b for a, b in found})


def seq_scans(plan: list[str], table: str = "work_items") -> list[str]:
    """The lines of a text plan that scan `table` sequentially."""
    return sorted({line.strip() for line in plan if f"Seq Scan on {table} " in line + " "})


@dataclass(frozen=True)
class Scan:
    """One node of an EXPLAIN ANALYZE text plan that reads a table."""

    node: str  # "Seq Scan", "Index Scan", "Bitmap Heap Scan", ...
    index: str | None
    alias: str | None
    rows: int  # per loop, as EXPLAIN shows it
    removed: int  # rows removed by filters, per loop
    loops: int

    @property
    def read(self) -> int:
        """Rows this node read from the table over all its loops."""
        return (self.rows + self.removed) * self.loops


_NODE = re.compile(
    r"^\s*(?:->\s+)?(?P<node>[A-Z][A-Za-z ]*Scan)(?: Backward)? (?:using (?P<index>\w+) )?"
    r"on (?P<table>\w+)(?: (?P<alias>\w+))?\s+\(cost=[^)]*\)"
    r" \(actual time=\S+ rows=(?P<rows>\d+) loops=(?P<loops>\d+)\)"
)
_REMOVED = re.compile(r"^\s*Rows Removed by (?:Filter|Index Recheck|Join Filter): (\d+)")


def scans(plan: list[str], table: str = "work_items") -> list[Scan]:
    """The nodes of an EXPLAIN ANALYZE text plan that read `table`, in plan order.

    A scan the plan never ran ("never executed") is left out.
    """
    found: list[Scan] = []
    current: dict[str, Any] | None = None
    for line in plan:
        match = _NODE.match(line)
        if match or "->" in line:
            if current is not None:
                found.append(Scan(**current))
            current = None
            if match and match["table"] == table:
                current = {
                    "node": match["node"],
                    "index": match["index"],
                    "alias": match["alias"],
                    "rows": int(match["rows"]),
                    "removed": 0,
                    "loops": int(match["loops"]),
                }
            continue
        removed = _REMOVED.match(line)
        if removed and current is not None:
            current["removed"] += int(removed.group(1))
    if current is not None:
        found.append(Scan(**current))
    return found
