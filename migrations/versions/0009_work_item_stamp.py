"""work_items.stamp: a random value replaced on every change of an item, its details or
its dimensions, so that a worker can tell whether the item changed since it read it.

Revision ID: 0009
Revises: 0008
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE, not batch mode: SQLite adds and (3.35 and later) drops a column in
# place, while a batch would rebuild the table from its reflection, which leaves out the
# expression index ix_work_items_claimable (0008).


def upgrade() -> None:
    op.add_column(
        "work_items",
        sa.Column("stamp", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("work_items", "stamp")
