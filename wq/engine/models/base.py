"""The vocabulary of the tables: phases, admission states, lanes, the column types and
the declarative base every table derives from."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, MetaData, Text, TypeDecorator
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase

ACTIVE = "active"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
TERMINAL_PHASES = frozenset({COMPLETED, FAILED, CANCELLED})
PHASES = (ACTIVE, COMPLETED, FAILED, CANCELLED)

QUEUED = "queued"
ADMITTED = "admitted"
IDLE = "idle"
DONE = "done"
ADMISSION_STATES = (QUEUED, ADMITTED, IDLE, DONE)

NORMAL_LANE = "normal"
ALERT_LANE = "alert"
LANES = (ALERT_LANE, NORMAL_LANE)

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def new_stamp() -> int:
    """A fresh value for `WorkItem.stamp`: random, so it never depends on a stale read."""
    return random.getrandbits(62)  # reseeded in forked children (os.register_at_fork)


class UtcDateTime(TypeDecorator[datetime]):
    """A timestamp stored with time zone and always read back as aware UTC.

    SQLite keeps no zone; this makes both databases hand back the same values.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        if value is not None and dialect.name == "sqlite":
            return value.astimezone(UTC).replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


JsonDoc = JSON().with_variant(JSONB(), "postgresql")

# PostgreSQL's text and jsonb cannot hold NUL: a row with one (a refused request's path,
# a run's output) would be lost. This stands in for it, on both databases alike.
NUL_STAND_IN = "\N{SYMBOL FOR NULL}"


class OutsideText(TypeDecorator[str]):
    """Text that comes from outside wq (a run's output, an error a service answered):
    stored with `NUL_STAND_IN` for NUL. On PostgreSQL a NUL made every write of the row
    fail; a task whose output held one could never finish."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else storable_text(value)


def storable_text(value: str) -> str:
    """`value` with `NUL_STAND_IN` for NUL (as `OutsideText` stores it)."""
    return value.replace("\x00", NUL_STAND_IN) if "\x00" in value else value


def without_nul(value: Any, stand_in: str = NUL_STAND_IN) -> Any:
    """A copy of a JSON-like value with `stand_in` for NUL in its strings, keys too."""
    if isinstance(value, str):
        return value.replace("\x00", stand_in)
    if isinstance(value, dict):
        return {
            key.replace("\x00", stand_in): without_nul(each, stand_in)
            for key, each in value.items()
        }
    if isinstance(value, list | tuple):
        return [without_nul(each, stand_in) for each in value]
    return value


class Base(DeclarativeBase):
    """Declarative base with a naming convention so migrations name constraints alike."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
