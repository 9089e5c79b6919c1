"""The generic tables: work items, readiness dimensions, pending events, audit log.

Type-specific data lives in one detail table per type, mapped by joined-table
inheritance on `WorkItem` (the `type` column is the discriminator) and loaded with
`selectin` polymorphic loading.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, ClassVar, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    Uuid,
    event,
    func,
    inspect,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import (
    DeclarativeBase,
    InstanceState,
    Mapped,
    Session,
    mapped_column,
    relationship,
)
from sqlalchemy.orm.attributes import History
from sqlalchemy.orm.base import PassiveFlag
from sqlalchemy.orm.util import identity_key

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


class Base(DeclarativeBase):
    """Declarative base with a naming convention so migrations name constraints alike."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class WorkItem(Base):
    """One unit of work of some type, with its phase, lease and admission state."""

    __tablename__ = "work_items"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    type: Mapped[str] = mapped_column(String(64))
    project: Mapped[str] = mapped_column(String(512))
    phase: Mapped[str] = mapped_column(String(16), default=ACTIVE)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    # Processing lease: the token fences every state change of the holder.
    leased_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    lease_token: Mapped[str | None] = mapped_column(String(36))
    run_after: Mapped[datetime | None] = mapped_column(UtcDateTime)
    last_event_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    idempotency_key: Mapped[str | None] = mapped_column(String(512))
    # Admission (per-project pools, strict FIFO by seq within project and lane).
    admission: Mapped[str] = mapped_column(String(16), default=QUEUED)
    seq: Mapped[int | None] = mapped_column(BigInteger)
    lane: Mapped[str] = mapped_column(String(16), default=NORMAL_LANE)
    autonomous: Mapped[bool] = mapped_column(Boolean, default=False)
    dedup_key: Mapped[str | None] = mapped_column(String(512))
    queued_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    admitted_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # When the item last changed state: what the audit trail records, not a lease taken,
    # renewed or let go, nor a check scheduled (`_touch_changes` below; the statements
    # that change admission set it themselves). So its age is the time in its state.
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # Replaced by a fresh random value whenever the item, its details or its dimensions
    # change through the ORM (`_stamp_changes` below); compared for equality only. A
    # worker compares the stamp it read with the one its lease fence finds, and reads
    # the item again only when they differ (wq.engine.runner).
    stamp: Mapped[int] = mapped_column(BigInteger, default=new_stamp, server_default=text("0"))

    # Columns of a type that its `details_dict` never reads (bulky payloads): the API's
    # reads leave them unloaded, and reading one there raises instead of loading it.
    api_unshown: ClassVar[tuple[str, ...]] = ()
    # The columns of the type's own table that its `details_of` reads. A type that names
    # them has a page of its items' details read as plain rows of these columns (the
    # API's list, `wq.daemon.reads`); one that names none has its items loaded as
    # objects for their `details_dict`.
    api_details_columns: ClassVar[tuple[str, ...]] = ()
    # Columns of a type's own table that only schedule the next look at the item (a
    # run's next check): changing them is no change of state (`updated_at` stays).
    scheduling_columns: ClassVar[tuple[str, ...]] = ()

    statuses: Mapped[list[WorkItemStatus]] = relationship(
        back_populates="work_item",
        lazy="selectin",
        cascade="all, delete-orphan",
        order_by="(WorkItemStatus.dimension, WorkItemStatus.variant)",
    )

    __mapper_args__ = {  # noqa: RUF012 (SQLAlchemy's declared attribute)
        "polymorphic_on": "type",
        "polymorphic_identity": "work_item",
    }
    __table_args__: tuple[Any, ...] = (
        # The dispatcher's queue: head of each (project, lane) in seq order.
        Index(
            "ix_work_items_queue",
            "project",
            "lane",
            "seq",
            sqlite_where=text("admission = 'queued'"),
            postgresql_where=text("admission = 'queued'"),
        ),
        # In-flight counts per project and lane, and the claim scan.
        Index(
            "ix_work_items_in_flight",
            "project",
            "lane",
            sqlite_where=text("admission = 'admitted'"),
            postgresql_where=text("admission = 'admitted'"),
        ),
        Index(
            "ix_work_items_idempotency_key",
            "idempotency_key",
            unique=True,
            sqlite_where=text("phase NOT IN ('completed', 'cancelled')"),
            postgresql_where=text("phase NOT IN ('completed', 'cancelled')"),
        ),
        Index(
            "ix_work_items_dedup_key",
            "dedup_key",
            unique=True,
            sqlite_where=text("phase = 'active'"),
            postgresql_where=text("phase = 'active'"),
        ),
        # The API's list, newest first, and its cursor: a page reads its own rows.
        Index("ix_work_items_newest", "created_at", "id"),
        # The failed ones alone in that order: few among a long history.
        Index(
            "ix_work_items_failed_newest",
            "created_at",
            "id",
            sqlite_where=text("phase = 'failed'"),
            postgresql_where=text("phase = 'failed'"),
        ),
        Index("ix_work_items_type_phase", "type", "phase"),
        Index("ix_work_items_project_phase", "project", "phase"),
        # Lease expiry (sweep, next due): leased items only.
        Index(
            "ix_work_items_leased_until",
            "leased_until",
            sqlite_where=text("leased_until IS NOT NULL"),
            postgresql_where=text("leased_until IS NOT NULL"),
        ),
    )

    def status(self, dimension: str, variant: str = "") -> WorkItemStatus | None:
        """The row of one readiness dimension, or None when it is absent."""
        for row in self.statuses:
            if row.dimension == dimension and row.variant == variant:
                return row
        return None

    @classmethod
    def details_of(cls, source: Any) -> dict[str, Any]:
        """The API's nested `details` of an item of this type; types override this.

        `source` has the type's columns as attributes: a loaded item, or a row of the
        type's `api_details_columns` (so reading anything else fails).
        """
        return {}

    def details_dict(self) -> dict[str, Any]:
        """Type-specific fields for the API's nested `details` (`details_of` this item)."""
        return self.details_of(self)


# The claim's scan: admitted, active items in ready-since order (`wq.engine.leases.claim`),
# read in index order up to the claim's limit however many items are admitted.
Index(
    "ix_work_items_claimable",
    func.coalesce(WorkItem.run_after, WorkItem.admitted_at),
    WorkItem.seq,
    sqlite_where=text("admission = 'admitted' AND phase = 'active'"),
    postgresql_where=text("admission = 'admitted' AND phase = 'active'"),
)


class _KnownOrBase(dict[Any, Any]):
    """The polymorphic map of `WorkItem`: an item of a type whose model this process
    does not have (a newer replica's, during an upgrade) loads as a plain `WorkItem`
    rather than failing every query that meets it (the list, for every caller)."""

    def __init__(self, known: dict[Any, Any], base: Any) -> None:
        super().__init__(known)
        self.base = base

    def __missing__(self, identity: Any) -> Any:
        return self.base


# Before any type's model inherits the map: they all share this one.
WorkItem.__mapper__.polymorphic_map = _KnownOrBase(
    WorkItem.__mapper__.polymorphic_map, WorkItem.__mapper__
)


class WorkItemStatus(Base):
    """One readiness dimension of an item: "true" means action needed."""

    __tablename__ = "work_item_statuses"

    work_item_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("work_items.id", ondelete="CASCADE"), primary_key=True
    )
    dimension: Mapped[str] = mapped_column(String(128), primary_key=True)
    variant: Mapped[str] = mapped_column(String(256), primary_key=True, default="")
    status: Mapped[str] = mapped_column(String(8))
    detail: Mapped[Any | None] = mapped_column(JsonDoc)
    pending_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)

    work_item: Mapped[WorkItem] = relationship(back_populates="statuses")

    __table_args__ = (
        Index(
            "ix_work_item_statuses_pending_until",
            "pending_until",
            sqlite_where=text("status = 'true' AND pending_until IS NOT NULL"),
            postgresql_where=text("status = 'true' AND pending_until IS NOT NULL"),
        ),
    )

    def is_deferred(self, now: datetime) -> bool:
        """True while the dimension waits for its pending_until time."""
        return self.pending_until is not None and self.pending_until > now


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


# In `Session.info` of a session that runs executors (a worker's or a batch's): it
# holds the lease of the items it changes.
EXECUTOR_SESSION = "wq_in_executor"


# Who holds an item and when it is looked at next: no state of its own.
_SCHEDULING = frozenset(
    {"lease_owner", "lease_token", "leased_until", "run_after", "stamp", "updated_at"}
)


def history_of(state: InstanceState[Any], key: str) -> History:
    """What changed in attribute `key` since the load, as `state.attrs[key].history`
    tells it, without building `state.attrs` (a view of every attribute, dozens on a
    type's detail rows, made on each object's first look)."""
    return state.get_history(key, PassiveFlag.PASSIVE_NO_INITIALIZE)


def _changed_since_load(obj: object) -> Iterator[str]:
    """The attributes of `obj` whose value this flush changes. Only an attribute set
    since the load keeps its old value in `committed_state`, so only those are looked
    at (`Session.is_modified` looks at every one; a type's detail rows have dozens)."""
    state = inspect(obj)
    return (key for key in state.committed_state if history_of(state, key).has_changes())


def changes_state(item: WorkItem) -> bool:
    """True when a column beyond the lease and the schedule changed in this flush."""
    ignored = _SCHEDULING.union(item.scheduling_columns)
    columns = inspect(item).mapper.column_attrs
    return any(key in columns and key not in ignored for key in _changed_since_load(item))


@event.listens_for(Session, "before_flush")
def _touch_changes(session: Session, _context: Any, _instances: Any) -> None:
    """Stamp `updated_at` on every item whose state this flush changes (and no other)."""
    now: datetime | None = None
    for obj in session.dirty:
        if isinstance(obj, WorkItem) and changes_state(obj):
            now = now or utcnow()
            obj.updated_at = now


@event.listens_for(Session, "before_flush")
def _stamp_changes(session: Session, _context: Any, _instances: Any) -> None:
    """Give every work item a fresh stamp when this flush changes it or its dimensions.

    Every ORM write of an item's row, of its type's detail row (the same object) or of
    one of its `work_item_statuses` rows counts; a dimension written without its item
    loaded stamps the item with a statement of its own. Bulk statements that only
    move leases or admission (claims, heartbeats, admission passes) leave it alone:
    no decider reads those. So do the item's lease holder's own changes: only the
    holder compares stamps, it knows what it changed, and a batch that releases its
    items with one statement has no item row left to write.
    """
    if EXECUTOR_SESSION in session.info:
        return
    items: dict[int, WorkItem] = {}
    orphans: set[uuid.UUID] = set()

    def owner_of(row: WorkItemStatus) -> None:
        parent = row.__dict__.get("work_item")  # never a lazy load here
        if parent is None and row.work_item_id is not None:
            parent = session.identity_map.get(identity_key(WorkItem, row.work_item_id))
        if isinstance(parent, WorkItem):
            items[id(parent)] = parent
        elif row.work_item_id is not None:
            orphans.add(row.work_item_id)

    for obj in session.dirty:
        if isinstance(obj, WorkItem):
            if any(_changed_since_load(obj)):
                items[id(obj)] = obj
        elif isinstance(obj, WorkItemStatus) and any(_changed_since_load(obj)):
            owner_of(obj)
    for obj in (*session.new, *session.deleted):
        if isinstance(obj, WorkItemStatus):
            owner_of(obj)
    for item in items.values():
        if item not in session.deleted:
            item.stamp = new_stamp()
    if orphans:
        table = cast(Table, WorkItem.__table__)
        session.execute(update(table).where(table.c.id.in_(orphans)).values(stamp=new_stamp()))
