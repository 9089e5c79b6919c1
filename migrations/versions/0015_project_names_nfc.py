"""work_items: project names stored in Unicode NFC, as the engine now stores every new one.

Before, a name typed with a combining accent (`e` + U+0301) and the same name typed
precomposed (`é`) were two projects that looked alike: two queues, two pools, two
capacities. New items are stored composed (`wq.engine.project_names`); this brings the
items stored before in line, so that they join their project's queue and pool, in their
place in line (their `seq` is kept).

The distinct names are read and normalized here, in Python, not by the database:
SQLite has no `normalize()`, and a deployment has few distinct projects, so only the
rows of the few names that change are written (no scan rewrites the table).

Revision ID: 0015
Revises: 0014
"""

import unicodedata
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    bind = op.get_bind()
    names = bind.execute(sa.text("SELECT DISTINCT project FROM work_items")).scalars()
    renames = [
        {"old": name, "new": unicodedata.normalize("NFC", name)}
        for name in names
        if unicodedata.normalize("NFC", name) != name
    ]
    if renames:
        bind.execute(sa.text("UPDATE work_items SET project = :new WHERE project = :old"), renames)


def downgrade() -> None:
    """Nothing to undo: the composed names are the ones users typed, spelled one way."""
