"""work_items: a dedup key is unique among the active items of one type and project.

Before, one key was unique across every project: a caller allowed to submit to one
project could pick the key another project's producer would use (a Grafana alert
group's hash is predictable) and turn that project's next submission into a dedup hit
against its own item. The new index is built before the old one is dropped, so that
the key stays unique all along; both CONCURRENTLY on PostgreSQL (work_items holds every
item a deployment keeps; the indexes cover only the active ones but the build reads
the table).

Going back down fails if two projects now hold one key in active items.

Revision ID: 0017
Revises: 0016
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ACTIVE = sa.text("phase = 'active'")


def _index(name: str, columns: list[str]) -> None:
    op.create_index(
        name,
        "work_items",
        columns,
        unique=True,
        sqlite_where=_ACTIVE,
        postgresql_where=_ACTIVE,
        postgresql_concurrently=True,
    )


def upgrade() -> None:
    with op.get_context().autocommit_block():
        _index("ix_work_items_dedup_scope", ["type", "project", "dedup_key"])
        op.drop_index(
            "ix_work_items_dedup_key", table_name="work_items", postgresql_concurrently=True
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        _index("ix_work_items_dedup_key", ["dedup_key"])
        op.drop_index(
            "ix_work_items_dedup_scope", table_name="work_items", postgresql_concurrently=True
        )
