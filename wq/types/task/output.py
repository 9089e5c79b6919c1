"""A task's output for `GET /api/work-items/{id}/logs`: its run's log as the runner has
it (live while it runs), else the tail kept when the run ended."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from wq.engine.models import TERMINAL_PHASES, WorkItem
from wq.engine.registry import NoOutput, OutputReader
from wq.types.task.models import TaskItem
from wq.types.task.runners import Runner, RunnerUnavailable, RunNotHere

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

# How often a follower looks whether a queued task has started its run.
START_POLL_SECONDS = 1.0


@dataclass(frozen=True)
class RunView:
    """What a task's row says of its current run (read before its session closes)."""

    run_id: str
    runner: str
    finished: bool
    log_tail: str
    started_by: str | None


def _view(task: TaskItem) -> RunView | None:
    if task.run_id is None:
        return None
    return RunView(
        task.run_id, task.runner, task.finished_at is not None, task.log_tail or "", task.started_by
    )


def last_lines(text: str, lines: int | None) -> str:
    """The last `lines` lines of a text (all of it when None)."""
    if lines is None:
        return text
    kept = text.splitlines(keepends=True)
    return "".join(kept[-lines:]) if lines else ""


def make_output(runners: dict[str, Runner]) -> OutputReader:
    """The `task` type's output reader over its runners."""

    def output(
        sessions: sessionmaker[Session], item: WorkItem, tail_lines: int | None, follow: bool
    ) -> Iterator[str]:
        view = _view(cast(TaskItem, item))
        if view is not None:
            return _of_run(runners, view, tail_lines, follow)
        if item.phase in TERMINAL_PHASES:
            raise NoOutput(f"the task ended {item.phase} without starting a run")
        if not follow:
            raise NoOutput("the task has not started a run yet (follow it to wait for one)")
        return _once_started(sessions, runners, item.id, tail_lines)

    return output


def _of_run(
    runners: dict[str, Runner], view: RunView, tail_lines: int | None, follow: bool
) -> Iterator[str]:
    runner = runners.get(view.runner)
    if runner is None:
        raise NoOutput(f"the run's runner {view.runner!r} is not configured here")
    if view.finished:
        return _finished(runner, view, tail_lines)
    try:
        return runner.output(view.run_id, tail_lines=tail_lines, follow=follow)
    except RunNotHere as err:
        where = f"the replica of {view.started_by}" if view.started_by else "another machine"
        raise NoOutput(
            f"run {view.run_id} runs on {where}, whose runs directory holds its output "
            f"({err}); ask that replica, or give the replicas a shared runs_dir"
        ) from None


def _finished(runner: Runner, view: RunView, tail_lines: int | None) -> Iterator[str]:
    """The whole log while the runner still has it, else the tail the task kept."""
    try:
        chunks = iter(runner.output(view.run_id, tail_lines=tail_lines, follow=False))
        first = next((chunk for chunk in chunks if chunk), None)
    except (RunNotHere, RunnerUnavailable):
        first = None
    if first is None:
        yield last_lines(view.log_tail, tail_lines)
        return
    yield first
    yield from chunks


def _once_started(
    sessions: sessionmaker[Session],
    runners: dict[str, Runner],
    item_id: uuid.UUID,
    tail_lines: int | None,
) -> Iterator[str]:
    """Wait for a queued task's run to start, then follow it; end if it ends first."""
    while True:
        with sessions() as session:
            task = session.get(TaskItem, item_id)
            if task is None or (task.phase in TERMINAL_PHASES and task.run_id is None):
                return
            view = _view(task)
        if view is not None:
            yield from _of_run(runners, view, tail_lines, follow=True)
            return
        yield ""
        time.sleep(START_POLL_SECONDS)
