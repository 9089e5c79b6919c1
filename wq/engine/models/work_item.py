"""The work item and its readiness dimensions.

Type-specific data lives in one detail table per type, mapped by joined-table
inheritance on `WorkItem` (the `type` column is the discriminator) and loaded with
`selectin` polymorphic loading.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Uuid,
    func,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship, validates

from wq.engine.models.base import (
    ACTIVE,
    NORMAL_LANE,
    QUEUED,
    Base,
    JsonDoc,
    OutsideText,
    UtcDateTime,
    new_stamp,
    utcnow,
)
from wq.engine.project_names import canonical_project


class WorkItem(Base):
    """One unit of work of some type, with its phase, lease and admission state."""

    __tablename__ = "work_items"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    type: Mapped[str] = mapped_column(String(64))
    project: Mapped[str] = mapped_column(String(512))
    phase: Mapped[str] = mapped_column(String(16), default=ACTIVE)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(OutsideText)
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
        # In-flight counts per project and lane, and the leases that run out.
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
        # One active item per key within a type and project: a key never reaches
        # into another project's work.
        Index(
            "ix_work_items_dedup_scope",
            "type",
            "project",
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
        # Admission too: the gauges count active items by it from the index alone, not
        # from heap pages scattered through a long history.
        Index("ix_work_items_type_phase_admission", "type", "phase", "admission"),
        Index("ix_work_items_project_phase", "project", "phase"),
        # No index holds a lease column: a claim then rewrites its row in place (a HOT
        # update on PostgreSQL, migration 0016). Lease expiry is read among the admitted
        # items (ix_work_items_in_flight): only an admitted item is ever leased.
    )

    @validates("project")
    def _one_spelling(self, _key: str, project: str) -> str:
        # Every intake (the API, GitLab's events, schedules) sets the name this way.
        return canonical_project(project)

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
