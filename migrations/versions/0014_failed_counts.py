"""failed_counts: the failed items per type, kept by triggers on work_items.

The `/metrics` gauge of failed items counted every failed item at each reading; a
deployment keeps them all, so the reading grew with history. Triggers add a row of
+1 or -1 each time an item enters or leaves `failed` (inserts, phase changes,
deletes); the gauge sums a type's rows, and the sweep folds them into one. Rows are
only ever inserted on the hot path: concurrent failures never wait for one another.

The triggers are created before the existing failed items are counted, in the same
transaction: on PostgreSQL CREATE TRIGGER holds off writes to work_items until it
commits, so no failure falls between the count and the first trigger.

Revision ID: 0014
Revises: 0013
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PG_FUNCTION = """
CREATE FUNCTION wq_count_failed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.phase = 'failed' THEN
        INSERT INTO failed_counts (type, delta) VALUES (OLD.type, -1);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.phase = 'failed' THEN
        INSERT INTO failed_counts (type, delta) VALUES (NEW.type, 1);
    END IF;
    RETURN NULL;
END $$
"""
_PG_TRIGGERS = (
    "CREATE TRIGGER wq_failed_inserted AFTER INSERT ON work_items FOR EACH ROW"
    " WHEN (NEW.phase = 'failed') EXECUTE FUNCTION wq_count_failed()",
    "CREATE TRIGGER wq_failed_changed AFTER UPDATE OF phase ON work_items FOR EACH ROW"
    " WHEN (OLD.phase IS DISTINCT FROM NEW.phase"
    " AND (OLD.phase = 'failed' OR NEW.phase = 'failed')) EXECUTE FUNCTION wq_count_failed()",
    "CREATE TRIGGER wq_failed_deleted AFTER DELETE ON work_items FOR EACH ROW"
    " WHEN (OLD.phase = 'failed') EXECUTE FUNCTION wq_count_failed()",
)
_SQLITE_TRIGGERS = (
    "CREATE TRIGGER wq_failed_inserted AFTER INSERT ON work_items"
    " WHEN NEW.phase = 'failed'"
    " BEGIN INSERT INTO failed_counts (type, delta) VALUES (NEW.type, 1); END",
    "CREATE TRIGGER wq_failed_changed AFTER UPDATE OF phase ON work_items"
    " WHEN OLD.phase IS NOT NEW.phase AND (OLD.phase = 'failed' OR NEW.phase = 'failed')"
    " BEGIN INSERT INTO failed_counts (type, delta)"
    " VALUES (NEW.type, CASE WHEN NEW.phase = 'failed' THEN 1 ELSE -1 END); END",
    "CREATE TRIGGER wq_failed_deleted AFTER DELETE ON work_items"
    " WHEN OLD.phase = 'failed'"
    " BEGIN INSERT INTO failed_counts (type, delta) VALUES (OLD.type, -1); END",
)
_TRIGGER_NAMES = ("wq_failed_inserted", "wq_failed_changed", "wq_failed_deleted")


def upgrade() -> None:
    op.create_table(
        "failed_counts",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("delta", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_failed_counts")),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
        triggers = _PG_TRIGGERS
    else:
        triggers = _SQLITE_TRIGGERS
    for trigger in triggers:
        op.execute(trigger)
    op.execute(
        "INSERT INTO failed_counts (type, delta)"
        " SELECT type, count(*) FROM work_items WHERE phase = 'failed' GROUP BY type"
    )


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for name in _TRIGGER_NAMES:
        op.execute(f"DROP TRIGGER {name}" + (" ON work_items" if postgres else ""))
    if postgres:
        op.execute("DROP FUNCTION wq_count_failed()")
    op.drop_table("failed_counts")
