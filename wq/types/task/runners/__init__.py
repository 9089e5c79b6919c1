"""Runners: where a task's run happens. One small interface: start, poll, cancel, remove.

A run is known by its `run_id` alone, so any process can find it again (re-attach)
after the worker or the daemon that started it is gone: `poll(run_id)` looks it up
at the runner, never in memory.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

RUNNING: Final = "running"
SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"
MISSING: Final = "missing"
RunState = Literal["running", "succeeded", "failed", "missing"]


class RunnerUnavailable(Exception):
    """The run could not be started (the runner is unreachable or refused it)."""


class RunNotHere(Exception):
    """The run's output cannot be read from this process (another machine holds it)."""


@dataclass(frozen=True)
class RunSpec:
    """What a runner needs to start one run."""

    run_id: str
    item_id: uuid.UUID
    project: str
    kind: str
    repository: str | None
    payload: dict[str, Any]
    timeout_seconds: float
    command: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    job: dict[str, Any] | None = None


@dataclass(frozen=True)
class RunStatus:
    """What a runner knows of a run now."""

    state: RunState
    exit_code: int | None = None
    log_tail: str = ""
    reason: str = ""


class Runner(Protocol):
    """A run backend."""

    name: str

    def start(self, spec: RunSpec) -> None:
        """Start the run; when a run of that id exists already, leave it (idempotent)."""

    def poll(self, run_id: str) -> RunStatus:
        """The run's state, found by its id (this is also how a new owner re-attaches)."""

    def cancel(self, run_id: str) -> None:
        """Stop the run if it is still going (idempotent; a missing run is fine)."""

    def remove(self, run_id: str) -> None:
        """Delete what the run left (its directory, its Job); idempotent."""

    def output(self, run_id: str, *, tail_lines: int | None, follow: bool) -> Iterator[str]:
        """The run's output as it was written: its last `tail_lines` lines (all when
        None), then, when following, what it writes next until the run ends.

        The iterator blocks only briefly: while nothing new comes it yields `""` about
        once a second, so that its reader can stop. Raises `RunNotHere` when this
        process cannot read the run, `RunnerUnavailable` when the runner is unreachable.
        """
        ...


def run_id_for(item_id: uuid.UUID, generation: int) -> str:
    """The name of one run of one task: valid as a file name and as a Kubernetes name."""
    return f"wq-{item_id}-{generation}"


def tail(text: str, limit: int) -> str:
    """The last `limit` characters of a log, starting at a line when one is near."""
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    newline = cut.find("\n")
    return cut[newline + 1 :] if 0 <= newline < limit // 4 else cut
