"""The generic tables: work items, dimensions, pending events, audit log, sequences.

Revision ID: 0001
Revises:
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_DOC = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
ADMISSION_SEQUENCE = "wq_admission_seq"


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("event_type", sa.String(length=64), nullable=False),
        sa.Column("work_item_id", sa.Uuid(), nullable=True),
        sa.Column("actor", sa.String(length=255), nullable=False),
        sa.Column("old_state", JSON_DOC, nullable=True),
        sa.Column("new_state", JSON_DOC, nullable=True),
        sa.Column("trigger", JSON_DOC, nullable=True),
        sa.Column("metadata", JSON_DOC, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index(op.f("ix_audit_log_at"), "audit_log", ["at"], unique=False)
    op.create_index(op.f("ix_audit_log_work_item_id"), "audit_log", ["work_item_id"], unique=False)
    op.create_table(
        "work_items",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("project", sa.String(length=512), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("leased_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_owner", sa.String(length=255), nullable=True),
        sa.Column("lease_token", sa.String(length=36), nullable=True),
        sa.Column("run_after", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_event_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("idempotency_key", sa.String(length=512), nullable=True),
        sa.Column("admission", sa.String(length=16), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=True),
        sa.Column("lane", sa.String(length=16), nullable=False),
        sa.Column("autonomous", sa.Boolean(), nullable=False),
        sa.Column("dedup_key", sa.String(length=512), nullable=True),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("admitted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_work_items")),
    )
    op.create_index(
        "ix_work_items_claimable",
        "work_items",
        ["seq"],
        unique=False,
        sqlite_where=sa.text("admission = 'admitted' AND phase = 'active'"),
        postgresql_where=sa.text("admission = 'admitted' AND phase = 'active'"),
    )
    op.create_index(
        "ix_work_items_dedup_key",
        "work_items",
        ["dedup_key"],
        unique=True,
        sqlite_where=sa.text("phase = 'active'"),
        postgresql_where=sa.text("phase = 'active'"),
    )
    op.create_index(
        "ix_work_items_idempotency_key",
        "work_items",
        ["idempotency_key"],
        unique=True,
        sqlite_where=sa.text("phase NOT IN ('completed', 'cancelled')"),
        postgresql_where=sa.text("phase NOT IN ('completed', 'cancelled')"),
    )
    op.create_index(
        "ix_work_items_in_flight",
        "work_items",
        ["project", "lane"],
        unique=False,
        sqlite_where=sa.text("admission = 'admitted'"),
        postgresql_where=sa.text("admission = 'admitted'"),
    )
    op.create_index("ix_work_items_leased_until", "work_items", ["leased_until"], unique=False)
    op.create_index("ix_work_items_project_phase", "work_items", ["project", "phase"], unique=False)
    op.create_index(
        "ix_work_items_queue",
        "work_items",
        ["project", "lane", "seq"],
        unique=False,
        sqlite_where=sa.text("admission = 'queued'"),
        postgresql_where=sa.text("admission = 'queued'"),
    )
    op.create_index("ix_work_items_type_phase", "work_items", ["type", "phase"], unique=False)
    op.create_table(
        "wq_sequences",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_wq_sequences")),
    )
    op.create_table(
        "pending_events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("work_item_id", sa.Uuid(), nullable=False),
        sa.Column("event_type", sa.String(length=128), nullable=False),
        sa.Column("payload", JSON_DOC, nullable=False),
        sa.Column("event_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["work_item_id"],
            ["work_items.id"],
            name=op.f("fk_pending_events_work_item_id_work_items"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pending_events")),
    )
    op.create_index(
        op.f("ix_pending_events_work_item_id"), "pending_events", ["work_item_id"], unique=False
    )
    op.create_table(
        "work_item_statuses",
        sa.Column("work_item_id", sa.Uuid(), nullable=False),
        sa.Column("dimension", sa.String(length=128), nullable=False),
        sa.Column("variant", sa.String(length=256), nullable=False),
        sa.Column("status", sa.String(length=8), nullable=False),
        sa.Column("detail", JSON_DOC, nullable=True),
        sa.Column("pending_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["work_item_id"],
            ["work_items.id"],
            name=op.f("fk_work_item_statuses_work_item_id_work_items"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "work_item_id", "dimension", "variant", name=op.f("pk_work_item_statuses")
        ),
    )
    op.create_index(
        "ix_work_item_statuses_pending_until",
        "work_item_statuses",
        ["pending_until"],
        unique=False,
        sqlite_where=sa.text("status = 'true' AND pending_until IS NOT NULL"),
        postgresql_where=sa.text("status = 'true' AND pending_until IS NOT NULL"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.schema.CreateSequence(sa.Sequence(ADMISSION_SEQUENCE)))
    else:
        # SQLite has no SEQUENCE: a counter row that is only ever incremented.
        op.execute(
            sa.text("INSERT INTO wq_sequences (name, value) VALUES (:name, 0)").bindparams(
                name=ADMISSION_SEQUENCE
            )
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.schema.DropSequence(sa.Sequence(ADMISSION_SEQUENCE)))
    op.drop_index(
        "ix_work_item_statuses_pending_until",
        table_name="work_item_statuses",
        sqlite_where=sa.text("status = 'true' AND pending_until IS NOT NULL"),
        postgresql_where=sa.text("status = 'true' AND pending_until IS NOT NULL"),
    )
    op.drop_table("work_item_statuses")
    op.drop_index(op.f("ix_pending_events_work_item_id"), table_name="pending_events")
    op.drop_table("pending_events")
    op.drop_table("wq_sequences")
    op.drop_index("ix_work_items_type_phase", table_name="work_items")
    op.drop_index(
        "ix_work_items_queue",
        table_name="work_items",
        sqlite_where=sa.text("admission = 'queued'"),
        postgresql_where=sa.text("admission = 'queued'"),
    )
    op.drop_index("ix_work_items_project_phase", table_name="work_items")
    op.drop_index("ix_work_items_leased_until", table_name="work_items")
    op.drop_index(
        "ix_work_items_in_flight",
        table_name="work_items",
        sqlite_where=sa.text("admission = 'admitted'"),
        postgresql_where=sa.text("admission = 'admitted'"),
    )
    op.drop_index(
        "ix_work_items_idempotency_key",
        table_name="work_items",
        sqlite_where=sa.text("phase NOT IN ('completed', 'cancelled')"),
        postgresql_where=sa.text("phase NOT IN ('completed', 'cancelled')"),
    )
    op.drop_index(
        "ix_work_items_dedup_key",
        table_name="work_items",
        sqlite_where=sa.text("phase = 'active'"),
        postgresql_where=sa.text("phase = 'active'"),
    )
    op.drop_index(
        "ix_work_items_claimable",
        table_name="work_items",
        sqlite_where=sa.text("admission = 'admitted' AND phase = 'active'"),
        postgresql_where=sa.text("admission = 'admitted' AND phase = 'active'"),
    )
    op.drop_table("work_items")
    op.drop_index(op.f("ix_audit_log_work_item_id"), table_name="audit_log")
    op.drop_index(op.f("ix_audit_log_at"), table_name="audit_log")
    op.drop_table("audit_log")
