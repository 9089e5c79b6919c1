"""work_items: the lease-expiry index holds leased items only.

The sweep and the scheduler look for leases that end (`leased_until < now`,
`leased_until > now`); an item without a lease never matches. Most items have none
(batches hold row locks, released items let go of theirs), and every admission and
release of one wrote its NULL into the index.

Revision ID: 0011
Revises: 0010
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LEASED = sa.text("leased_until IS NOT NULL")


def upgrade() -> None:
    op.drop_index("ix_work_items_leased_until", table_name="work_items")
    op.create_index(
        "ix_work_items_leased_until",
        "work_items",
        ["leased_until"],
        sqlite_where=_LEASED,
        postgresql_where=_LEASED,
    )


def downgrade() -> None:
    op.drop_index("ix_work_items_leased_until", table_name="work_items")
    op.create_index("ix_work_items_leased_until", "work_items", ["leased_until"])
