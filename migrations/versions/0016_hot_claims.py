"""work_items: a claim rewrites its row in place (a HOT update on PostgreSQL).

A claim and a lease extension write only the lease columns. While an index held one of
them (`ix_work_items_leased_until`), every claim wrote a new entry into each of the
table's indexes for the row's new version, and the scheduler's claim was the slowest
step of a busy drain. The lease-expiry reads (the sweep, the next lease to end, a
replica's lease count) now go through the admitted items' index: a lease is only ever
on an admitted item (the claim takes admitted items only, and every write that ends an
admission clears the lease with it), and admitted items are bounded by the projects'
capacities, not by the history.

PostgreSQL also leaves a third of each new page of `work_items` free
(`fillfactor = 70`), so that the new version of a claimed row finds room in its own
page, which an update in place needs. Existing pages fill up as before; the setting
applies to pages written from now on.

The index is dropped CONCURRENTLY: work_items holds every item a deployment keeps.

Revision ID: 0016
Revises: 0015
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LEASED = sa.text("leased_until IS NOT NULL")
FILLFACTOR = 70


def upgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index(
            "ix_work_items_leased_until", table_name="work_items", postgresql_concurrently=True
        )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE work_items SET (fillfactor = {FILLFACTOR})")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE work_items RESET (fillfactor)")
    with op.get_context().autocommit_block():
        op.create_index(
            "ix_work_items_leased_until",
            "work_items",
            ["leased_until"],
            sqlite_where=_LEASED,
            postgresql_where=_LEASED,
            postgresql_concurrently=True,
        )
