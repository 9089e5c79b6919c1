"""Task executors: start a run, follow it to its end, cancel it.

They talk to the task's runner and record what they saw on the task row; the engine
commits, fenced by the lease. A run is always addressed by its id, so whichever
worker follows it (after a lost lease or a daemon restart) finds the same run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from wq.engine import items
from wq.engine.failures import ERROR_CHARS
from wq.engine.models import CANCELLED, COMPLETED, FAILED
from wq.engine.registry import ActionContext, PermanentFailure, Requeue, RetryLater
from wq.types.task.models import TaskItem
from wq.types.task.runners import (
    MISSING,
    RUNNING,
    SUCCEEDED,
    Runner,
    RunnerUnavailable,
    RunSpec,
    RunStatus,
    run_id_for,
    tail,
)
from wq.types.task.runners.command import NO_RUN_DIRECTORY, TemplateError
from wq.types.task.settings import TaskSettings

Executor = Callable[[ActionContext], None]

log = logging.getLogger(__name__)


def _elsewhere(task: TaskItem, ctx: ActionContext, status: RunStatus) -> str:
    """Why a run another process started may be missing here: its runs_dir is not
    this one's (each replica's `runs_dir` must be one directory they share). Not when
    its directory is here and only its supervisor is gone."""
    started_in = (task.started_by or "").partition("/")[0]
    if (
        task.runner != "command"
        or not status.reason.startswith(NO_RUN_DIRECTORY)
        or not started_in
        or started_in == ctx.actor.partition("/")[0]
    ):
        return ""
    return (
        f" (started by {started_in}, another process: replicas on one machine must share"
        " handled_types.task.runners.command.runs_dir)"
    )


def _task(ctx: ActionContext) -> TaskItem:
    assert isinstance(ctx.item, TaskItem)
    return ctx.item


def make_executors(settings: TaskSettings, runners: Mapping[str, Runner]) -> dict[str, Executor]:
    """The executors bound to the type's settings and runner instances."""

    def runner_of(name: str) -> Runner:
        try:
            return runners[name]
        except KeyError:
            # A replica of a rolling update that adds the runner: another one has it.
            # Retried as an unreachable runner is, so failed after `max_attempts`.
            raise RetryLater(f"runner {name!r} is not configured here") from None

    def finish(
        ctx: ActionContext,
        phase: str,
        status: RunStatus,
        summary: str,
        *,
        at: datetime | None = None,
    ) -> None:
        task = _task(ctx)
        task.finished_at = at or ctx.now
        task.exit_status = status.exit_code
        task.log_tail = status.log_tail  # NUL in it is stored as a stand-in (OutsideText)
        task.next_check_at = None
        error = None
        if phase != COMPLETED:
            # The end of the tail: its last lines most often say why the run failed.
            error = f"{summary}\n{tail(status.log_tail.rstrip(), ERROR_CHARS - len(summary) - 1)}"
            error = error.rstrip()[:ERROR_CHARS]
        items.set_phase(
            ctx.session,
            task,
            phase,
            actor=ctx.actor,
            trigger={
                "source": "worker",
                "reason": "run ended",
                "runner": task.runner,
                "run_id": task.run_id,
                "exit_status": status.exit_code,
                "summary": summary,
            },
            error=error,
        )

    def start(ctx: ActionContext) -> None:
        task = _task(ctx)
        kind = settings.kinds.get(task.kind)
        generation = task.run_generation + 1
        try:
            if kind is None or task.runner not in runners:
                # Replicas may differ for a while (a rolling update adding a kind or
                # a runner): another one may have it. Failed only once none has, as
                # a start that keeps failing is.
                missing = f"kind {task.kind!r}" if kind is None else f"runner {task.runner!r}"
                raise RunnerUnavailable(f"task {missing} is not configured here")
            spec = RunSpec(
                run_id=run_id_for(task.id, generation),
                item_id=task.id,
                project=task.project,
                kind=task.kind,
                repository=task.repository,
                payload=task.payload,
                timeout_seconds=kind.timeout_seconds,
                command=kind.command,
                env=kind.env,
                job=kind.job,
            )
            runners[task.runner].start(spec)
        except TemplateError as err:
            raise PermanentFailure(str(err)) from None
        except RunnerUnavailable as err:
            # `attempts` counts this action's failures in a row (the engine resets it
            # when another action fails or this one succeeds).
            failures = task.attempts + 1 if (task.error or "").startswith("start: ") else 1
            if failures >= settings.max_start_failures:
                raise PermanentFailure(
                    f"the run could not start ({failures} times in a row): {err}"
                ) from None
            raise Requeue(
                f"the run could not start: {err}", retry_after=settings.start_backoff_seconds
            ) from None
        task.run_generation = generation
        task.run_id = spec.run_id
        task.started_by = ctx.actor
        task.started_at = ctx.now
        task.deadline_at = ctx.now + timedelta(seconds=kind.timeout_seconds)
        task.next_check_at = ctx.now + timedelta(seconds=settings.poll_interval_seconds)
        task.finished_at = task.exit_status = task.log_tail = None
        task.attempts = 0  # start failures before this one are history now
        task.error = None

    def follow(ctx: ActionContext) -> None:
        task = _task(ctx)
        assert task.run_id is not None
        runner = runner_of(task.runner)
        try:
            status = runner.poll(task.run_id)
        except RunnerUnavailable as err:
            if task.deadline_at is not None and ctx.now < task.deadline_at:
                # The run goes on while its runner cannot be read (an API outage): looked
                # at again at the next check, not counted against `max_attempts`, until
                # its deadline; after it, each failure counts.
                log.warning("task %s: cannot reach the run %s: %s", task.id, task.run_id, err)
                task.next_check_at = ctx.now + timedelta(seconds=settings.poll_interval_seconds)
                ctx.found_nothing_new()
                return
            raise RetryLater(f"cannot reach the run: {err}") from None
        if status.state == RUNNING:
            if task.deadline_at is not None and ctx.now >= task.deadline_at:
                runner.cancel(task.run_id)
                status = runner.poll(task.run_id)
                assert task.started_at is not None
                limit = (task.deadline_at - task.started_at).total_seconds()
                finish(ctx, FAILED, status, f"timed out after {limit:g} s")
                return
            task.next_check_at = ctx.now + timedelta(seconds=settings.poll_interval_seconds)
            ctx.found_nothing_new()
        else:
            ended(ctx, status)

    def ended(ctx: ActionContext, status: RunStatus) -> None:
        """Finish the task as its run ended by itself."""
        if status.state == SUCCEEDED:
            finish(ctx, COMPLETED, status, "exit status 0")
        elif status.state == MISSING:
            elsewhere = _elsewhere(_task(ctx), ctx, status)
            finish(ctx, FAILED, status, f"the run was lost: {status.reason}{elsewhere}")
        else:
            finish(ctx, FAILED, status, f"exit status {status.exit_code} {status.reason}".strip())

    def cancel(ctx: ActionContext) -> None:
        task = _task(ctx)
        runner = runner_of(task.runner)
        # Not recorded as started: a worker that lost its lease may still have
        # started the next run under its deterministic id; stop that one too.
        run_id = task.run_id if task.running else run_id_for(task.id, task.run_generation + 1)
        assert run_id is not None
        try:
            if task.running:
                status = runner.poll(run_id)
                if status.state not in (RUNNING, MISSING):
                    # It ended before the cancel reached it (its worker had not looked
                    # yet): it ends as it ran, a success included.
                    task.cancel_requested = False
                    ended(ctx, status)
                    return
            asked = time.monotonic()
            runner.cancel(run_id)
            status = runner.poll(run_id)
        except RunnerUnavailable as err:
            # Tried until the runner answers: failing the task would free its slot
            # while its run may go on.
            raise RetryLater(
                f"cannot reach the run to cancel it: {err}", keep_trying=True
            ) from None
        task.cancel_requested = False
        if task.running:
            # It ended when the cancel came back (a run that ignores TERM is killed
            # a grace later), not when the action began.
            stopped = ctx.now + timedelta(seconds=time.monotonic() - asked)
            finish(ctx, CANCELLED, status, "cancelled", at=stopped)
        else:
            items.set_phase(
                ctx.session,
                task,
                CANCELLED,
                actor=ctx.actor,
                trigger={"source": "worker", "action": "cancel", "reason": "run not started"},
            )

    return {"start": start, "follow": follow, "cancel": cancel}
