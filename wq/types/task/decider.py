"""The task decider: start the run, follow it while holding the slot, or stop it.

1. cancel requested      → cancel (stop the run, end `cancelled`)
2. no run going          → start (a new run; also after a retry of a finished one)
3. the check is due      → follow (poll the runner; the run's end decides the phase)
4. otherwise             → Wait(next check): the slot stays taken until the run ends
"""

from __future__ import annotations

from datetime import datetime

from wq.engine.models import WorkItem
from wq.engine.registry import Decision, Wait
from wq.types.task.models import TaskItem


def decide(item: WorkItem, now: datetime) -> Decision:
    """The next action of a task, from its row only."""
    assert isinstance(item, TaskItem)
    if item.cancel_requested:
        return "cancel"
    if not item.running:
        return "start"
    if item.next_check_at is None or item.next_check_at <= now:
        return "follow"
    return Wait(item.next_check_at)
