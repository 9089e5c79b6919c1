"""work_items: the `(type, phase)` index also holds `admission`.

The `/metrics` gauges count the active items of each type by admission. On a long
history the active items lie scattered among a million terminal ones, and PostgreSQL
read a heap page for each (1.28x the time of a database without the history,
`benchmarks/scale.py`); with admission in the index the count reads the index alone.
Admission changes are never updates in place (partial indexes name it), so the wider
index costs the writes nothing more. Built CONCURRENTLY on PostgreSQL before the old
one is dropped: work_items holds every item a deployment keeps.

Revision ID: 0018
Revises: 0017
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _swap(new: str, columns: list[str], old: str) -> None:
    with op.get_context().autocommit_block():
        op.create_index(new, "work_items", columns, postgresql_concurrently=True)
        op.drop_index(old, table_name="work_items", postgresql_concurrently=True)


def upgrade() -> None:
    _swap(
        "ix_work_items_type_phase_admission",
        ["type", "phase", "admission"],
        "ix_work_items_type_phase",
    )


def downgrade() -> None:
    _swap("ix_work_items_type_phase", ["type", "phase"], "ix_work_items_type_phase_admission")
