"""The replicas table (each daemon's heartbeat) and who started a task's run.

Revision ID: 0012
Revises: 0011
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "replicas",
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_seconds", sa.Float(), nullable=False),
        sa.Column("workers_busy", sa.Integer(), nullable=False),
        sa.Column("workers_total", sa.Integer(), nullable=False),
        sa.Column("leases_held", sa.Integer(), nullable=False),
        sa.Column("consumes_events", sa.Boolean(), nullable=False),
        sa.Column("last_event_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("db_round_trip_ms", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_replicas")),
    )
    op.add_column("task_details", sa.Column("started_by", sa.String(length=255), nullable=True))


def downgrade() -> None:
    op.drop_column("task_details", "started_by")
    op.drop_table("replicas")
