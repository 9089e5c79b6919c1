"""The MR decider: which action an MR item needs next, from its dimensions only.

Priority order (first actionable wins; absent counts as actionable, deferred does not):

1. `needs_mr`           → ensure_mr: the branch (one git commit) and the MR are as submitted
2. `needs_dashboard`    → ensure_dashboard_note: the dashboard link is on the MR
3. `needs_empty_check`  → check_empty_diff: cancel the MR if its diff became empty
4. `needs_reconcile`    → reconcile_mr: merge when mergeable, sync drifted fields
5. `needs_ci_retry`     → retry_ci_jobs: retry the failed CI jobs the matchers recognise

Adding a concern means a new dimension and executor; nothing else changes here but
this list.
"""

from __future__ import annotations

from datetime import datetime

from wq.engine.dimensions import first_actionable
from wq.engine.models import WorkItem

ACTIONS = {
    "needs_mr": "ensure_mr",
    "needs_dashboard": "ensure_dashboard_note",
    "needs_empty_check": "check_empty_diff",
    "needs_reconcile": "reconcile_mr",
    "needs_ci_retry": "retry_ci_jobs",
}


def decide(item: WorkItem, now: datetime) -> str | None:
    """The next action, or None when the item waits for events or deferrals."""
    dimension = first_actionable(item, ACTIONS, now)
    return ACTIONS[dimension] if dimension else None
