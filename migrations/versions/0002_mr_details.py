"""The mr type: the mr_details table.

Revision ID: 0002
Revises: 0001
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_DOC = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "mr_details",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("package", sa.String(length=255), nullable=True),
        sa.Column("source", sa.String(length=255), nullable=True),
        sa.Column("change_kind", sa.String(length=64), nullable=True),
        sa.Column("source_branch", sa.String(length=255), nullable=False),
        sa.Column("target_branch", sa.String(length=255), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("labels", JSON_DOC, nullable=False),
        sa.Column("commit_message", sa.Text(), nullable=False),
        sa.Column("file_actions", JSON_DOC, nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("draft", sa.Boolean(), nullable=False),
        sa.Column("auto_merge", sa.Boolean(), nullable=False),
        sa.Column("mr_iid", sa.Integer(), nullable=True),
        sa.Column("mr_url", sa.Text(), nullable=True),
        sa.Column("head_pipeline_id", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["id"], ["work_items.id"], name=op.f("fk_mr_details_id_work_items"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mr_details")),
    )
    op.create_index("ix_mr_details_branch", "mr_details", ["source_branch"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_mr_details_branch", table_name="mr_details")
    op.drop_table("mr_details")
