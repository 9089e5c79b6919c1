"""Rows of a table updated from one JSON document, on PostgreSQL.

An executemany of an `UPDATE` costs a round of the driver's Python per row and an
execution of the statement per row on the server; here every row of one shape (table,
columns set) travels in one JSON document and one statement updates them all
(`jsonb_to_recordset`). Only values JSON carries as the ORM would write them are taken:
anything else raises `UnfitValue`, and the caller leaves that row to the ORM.
"""

from __future__ import annotations

import functools
import math
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Connection,
    Float,
    Integer,
    String,
    Table,
    TextClause,
    Uuid,
    text,
)

from wq.engine import jsontext
from wq.engine.models import UtcDateTime
from wq.engine.models.base import OutsideText, storable_text


class UnfitValue(Exception):
    """A value JSON does not carry as the ORM would write it."""


# The types a column's value may travel in as JSON, with the record's type for it; any
# other column's change is left to the ORM.
_RECORD_TYPES: tuple[tuple[type[Any], str], ...] = (
    (UtcDateTime, "timestamptz"),
    (OutsideText, "text"),  # with its stand-in for NUL, as the ORM writes it
    (Boolean, "boolean"),
    (BigInteger, "bigint"),
    (Integer, "bigint"),
    (Float, "double precision"),
    (Uuid, "uuid"),
    (String, "text"),  # Text too
    (JSON, "text"),  # JSON text, cast to the column's type
)
# What JSON hands each record type from: a value of another Python type is not plain.
_JSON_TYPES: dict[str, tuple[type[Any], ...]] = {
    "boolean": (bool,),
    "bigint": (int,),
    "double precision": (int, float),
    "text": (str,),
}


def _quote(name: str) -> str:
    """A table's or column's name as a quoted identifier (the models' names are lower
    case: quoting keeps them as they are, reserved words or not)."""
    return '"' + name.replace('"', '""') + '"'


def _record_type(column: Column[Any]) -> str:
    for kind, record in _RECORD_TYPES:
        if isinstance(column.type, kind):
            return record
    raise UnfitValue


def as_json(table: Table, values: dict[str, Any]) -> dict[str, Any]:
    """`values` by column as the JSON document of `_update_sql` carries them (else
    UnfitValue: the ORM writes them, and refuses what it refuses)."""
    return {name: _json_value(table.c[name], value) for name, value in values.items()}


def _json_value(column: Column[Any], value: Any) -> Any:
    record = _record_type(column)
    if value is None:
        if record == "text" and isinstance(column.type, JSON):
            raise UnfitValue  # JSON null or SQL NULL: the type decides
        return None
    if record == "timestamptz":
        if not (isinstance(value, datetime) and value.tzinfo):
            raise UnfitValue
        return value.isoformat()
    if record == "uuid":
        if not isinstance(value, uuid.UUID):
            raise UnfitValue
        return str(value)
    if isinstance(column.type, JSON):
        return jsontext.dumps(value)  # as the engine's serializer writes it
    if not isinstance(value, _JSON_TYPES[record]):
        raise UnfitValue
    if record != "boolean" and isinstance(value, bool):
        raise UnfitValue  # True is an int to Python, not to PostgreSQL
    if record == "double precision" and not math.isfinite(value):
        raise UnfitValue
    if isinstance(column.type, OutsideText):
        return storable_text(value)
    return value


@functools.lru_cache(maxsize=256)
def _update_sql(table: Table, columns: tuple[str, ...]) -> TextClause:
    """One `UPDATE` of `table`'s `columns` for every row of a JSON document (`:rows`,
    each row its key and values by column)."""
    keys = [column.key for column in table.primary_key.columns]
    fields = ", ".join(
        f"{_quote(name)} {_record_type(table.c[name])}" for name in (*keys, *columns)
    )
    sets = ", ".join(
        f"{_quote(name)} = CAST(given.{_quote(name)} AS jsonb)"
        if isinstance(table.c[name].type, JSON)
        else f"{_quote(name)} = given.{_quote(name)}"
        for name in columns
    )
    matches = " AND ".join(f"row.{_quote(key)} = given.{_quote(key)}" for key in keys)
    return text(
        f"UPDATE {_quote(table.name)} AS row SET {sets}"
        f" FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS given({fields})"
        f" WHERE {matches}"
    )


def update_rows(
    connection: Connection, table: Table, columns: tuple[str, ...], rows: list[dict[str, Any]]
) -> None:
    """Set `columns` of `table`'s rows, each row of `rows` its key and those columns'
    values by column (as `as_json` gives them); every row must be found."""
    updated = connection.execute(_update_sql(table, columns), {"rows": jsontext.dumps(rows)})
    if updated.rowcount != len(rows):
        raise RuntimeError(f"a changed row of {table.name} was not found to update")
