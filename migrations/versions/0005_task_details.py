"""The task type: the task_details table and the schedule ticks.

Revision ID: 0005
Revises: 0004
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_DOC = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "task_details",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(length=128), nullable=False),
        sa.Column("repository", sa.String(length=512), nullable=True),
        sa.Column("payload", JSON_DOC, nullable=False),
        sa.Column("runner", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=255), nullable=True),
        sa.Column("run_generation", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deadline_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_check_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("exit_status", sa.Integer(), nullable=True),
        sa.Column("log_tail", sa.Text(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["id"],
            ["work_items.id"],
            name=op.f("fk_task_details_id_work_items"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_details")),
    )
    op.create_table(
        "task_schedule_ticks",
        sa.Column("schedule", sa.String(length=1024), nullable=False),
        sa.Column("tick", sa.DateTime(timezone=True), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("schedule", "tick", name=op.f("pk_task_schedule_ticks")),
    )
    op.create_index(
        op.f("ix_task_schedule_ticks_created_at"),
        "task_schedule_ticks",
        ["created_at"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_task_schedule_ticks_created_at"), table_name="task_schedule_ticks")
    op.drop_table("task_schedule_ticks")
    op.drop_table("task_details")
