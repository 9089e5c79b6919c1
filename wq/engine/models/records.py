"""The engine's bookkeeping beside the items: pending events, the audit log, the
replicas' heartbeats, the failed counts and SQLite's sequence."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Index, Integer, String, Uuid, text
from sqlalchemy.orm import Mapped, mapped_column

from wq.engine.models.base import Base, JsonDoc, UtcDateTime, utcnow


class PendingEvent(Base):
    """An event stored for an item and not yet applied to it."""

    __tablename__ = "pending_events"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    work_item_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("work_items.id", ondelete="CASCADE"), index=True
    )
    event_type: Mapped[str] = mapped_column(String(128))
    payload: Mapped[Any] = mapped_column(JsonDoc)
    event_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class AuditEntry(Base):
    """One audited state change, kept for a bounded time for the CLI and the TUI."""

    __tablename__ = "audit_log"
    __table_args__ = (
        # An item's history pages newest first by id (wq.engine.history): one index range.
        Index("ix_audit_log_work_item_id_id", "work_item_id", "id"),
        # The archiver's backlog in id order (wq.engine.archive): rows leave it once archived.
        Index(
            "ix_audit_log_unarchived",
            "id",
            sqlite_where=text("archived_at IS NULL"),
            postgresql_where=text("archived_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, index=True)
    event_type: Mapped[str] = mapped_column(String(64))
    work_item_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    actor: Mapped[str] = mapped_column(String(255))
    old_state: Mapped[Any | None] = mapped_column(JsonDoc)
    new_state: Mapped[Any | None] = mapped_column(JsonDoc)
    trigger: Mapped[Any | None] = mapped_column(JsonDoc)
    extra: Mapped[Any | None] = mapped_column("metadata", JsonDoc)
    # S3 archival: when the entry's object was written (None: not yet), and until when
    # an archiver that claimed it may upload it before another one may.
    archived_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    archive_claimed_until: Mapped[datetime | None] = mapped_column(UtcDateTime)


class Replica(Base):
    """One running daemon, as its heartbeat last wrote it (removed on a clean shutdown).

    A row whose heartbeat is older than three of its intervals belongs to a replica
    that is lost: killed, frozen or cut off from the database.
    """

    __tablename__ = "replicas"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    version: Mapped[str] = mapped_column(String(64))
    started_at: Mapped[datetime] = mapped_column(UtcDateTime)
    heartbeat_at: Mapped[datetime] = mapped_column(UtcDateTime)
    heartbeat_seconds: Mapped[float] = mapped_column(Float)
    workers_busy: Mapped[int] = mapped_column(Integer)
    workers_total: Mapped[int] = mapped_column(Integer)
    leases_held: Mapped[int] = mapped_column(Integer)
    consumes_events: Mapped[bool] = mapped_column(Boolean)
    last_event_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    db_round_trip_ms: Mapped[float | None] = mapped_column(Float)


class FailedCount(Base):
    """A change to the number of failed items of a type (+1 or -1, or a sum of them).

    Written by database triggers on `work_items` (migration 0014) whenever an item
    enters or leaves `failed`, so the failed items are counted without reading them:
    the sum of a type's rows is its count. The sweep folds the rows into one per type
    (`wq.engine.failed_counts`).
    """

    __tablename__ = "failed_counts"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    type: Mapped[str] = mapped_column(String(64))
    delta: Mapped[int] = mapped_column(BigInteger)


class SequenceCounter(Base):
    """SQLite's stand-in for a database SEQUENCE: one row, only ever incremented."""

    __tablename__ = "wq_sequences"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"))
