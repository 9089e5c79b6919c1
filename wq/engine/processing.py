"""The processing manager: admission, claims, workers, heartbeat.

One scheduler thread turns wake-ups into work: it applies stored events, runs an
admission pass for the projects that changed, and claims as many admitted items as
there are free workers. Each claimed item runs on a pool worker one action at a
time: ask the decider, run the executor, commit fenced by the lease token, ask
again, until the decider has nothing to do (the item goes idle and frees its slot),
asks to wait (the item keeps its slot and is claimed again later), the phase becomes
terminal, or the per-item deadline returns the worker.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from wq.engine import store
from wq.engine.admission import dispatch
from wq.engine.audit import AuditRecord, audit
from wq.engine.config import Config
from wq.engine.events import drain_events
from wq.engine.fence import LeaseLost, fenced_executor
from wq.engine.items import release_slot, set_phase, snapshot
from wq.engine.models import FAILED, QUEUED, TERMINAL_PHASES, WorkItem, utcnow
from wq.engine.registry import (
    ActionContext,
    Decision,
    PermanentFailure,
    Requeue,
    RetryLater,
    TickContext,
    Ticker,
    TypeRegistry,
    Wait,
)
from wq.engine.sweep import sweep_once
from wq.engine.wakeup import PROJECT_QUEUED, WAKEUP_KEY, Wakeup, signal

log = logging.getLogger(__name__)


def default_owner() -> str:
    """This process's name in lease_owner: host and pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


def backoff_delay(attempts: int, base: float, maximum: float) -> float:
    """Seconds to wait before retrying after the given number of failed attempts."""
    return float(min(maximum, base * 2 ** max(0, attempts - 1)))


class ProcessingManager:
    """Drives admitted items through their actions with a bounded worker pool."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        registry: TypeRegistry,
        config: Config,
        *,
        wakeup: Wakeup | None = None,
        owner: str | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.sessions = sessions
        self.registry = registry
        self.config = config
        self.settings = config.processing
        self.wakeup = wakeup or Wakeup()
        self.owner = owner or default_owner()
        self.clock = clock
        self.sessions.configure(info={WAKEUP_KEY: self.wakeup})
        self._pool = ThreadPoolExecutor(self.settings.workers, thread_name_prefix="wq-worker")
        self._running: dict[uuid.UUID, str] = {}
        self._running_lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start the scheduler and heartbeat threads."""
        loops = (
            ("wq-scheduler", self._schedule_loop),
            ("wq-heartbeat", self._heartbeat_loop),
            ("wq-sweep", self._sweep_loop),
        )
        for name, target in loops:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        for type_name in self.registry.names:
            for ticker in self.registry.get(type_name).tickers:
                thread = threading.Thread(
                    target=self._ticker_loop, args=(ticker,), name=f"wq-{ticker.name}", daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def stop(self, grace: float | None = None) -> None:
        """Stop claiming, let running actions finish up to `grace`, release held leases."""
        grace = self.settings.shutdown_grace_seconds if grace is None else grace
        self._stopping.set()
        self.wakeup.poke()
        deadline = time.monotonic() + grace
        while self.busy and time.monotonic() < deadline:
            time.sleep(0.05)
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._running_lock:
            leftovers = dict(self._running)
        for item_id, token in leftovers.items():
            with self.sessions.begin() as session:
                store.drop_lease(session, item_id, token)
        for thread in self._threads:
            thread.join(timeout=2)

    @property
    def busy(self) -> int:
        """How many items are being processed right now."""
        with self._running_lock:
            return len(self._running)

    # ----------------------------------------------------------------- scheduler

    def _schedule_loop(self) -> None:
        last_resync = 0.0
        while not self._stopping.is_set():
            pending = self.wakeup.wait(self.settings.poll_interval_seconds)
            if self._stopping.is_set():
                return
            try:
                resync = time.monotonic() - last_resync >= self.settings.poll_interval_seconds
                if resync:
                    last_resync = time.monotonic()
                self.run_once(
                    projects=None if resync else pending.projects,
                    event_items=pending.event_items,
                )
            except Exception:
                log.exception("scheduler pass failed; retrying after the poll interval")
                self._stopping.wait(self.settings.poll_interval_seconds)

    def run_once(
        self,
        *,
        projects: set[str] | None = None,
        event_items: set[uuid.UUID] | frozenset[uuid.UUID] = frozenset(),
    ) -> int:
        """One scheduler pass: apply events, admit, claim; return how many were claimed.

        `projects=None` admits every project with queued work (a resync).
        """
        for item_id in event_items:
            try:
                with self.sessions.begin() as session:
                    drain_events(session, item_id, self.registry)
            except Exception:  # the sweep tries again; other items go on
                log.exception("applying the events of work item %s failed", item_id)
        if projects is None or projects:
            dispatch(self.sessions, self.config, projects, now=self.clock())
        return self._claim_and_submit()

    def _claim_and_submit(self) -> int:
        free = self.settings.workers - self.busy
        if free <= 0 or self._stopping.is_set():
            return 0
        now = self.clock()
        with self.sessions.begin() as session:
            claimed = store.claim(
                session,
                owner=self.owner,
                limit=free,
                types=self.registry.names,
                now=now,
                lease_until=now + timedelta(seconds=self.settings.lease_seconds),
            )
        with self._running_lock:
            self._running.update(claimed)
        for item_id, token in claimed:
            self._pool.submit(self._work, item_id, token)
        return len(claimed)

    # ----------------------------------------------------------------- heartbeat

    def _heartbeat_loop(self) -> None:
        interval = self.settings.lease_seconds / 3
        while not self._stopping.wait(interval):
            try:
                self.heartbeat()
            except Exception:
                log.exception("heartbeat failed")

    def heartbeat(self) -> int:
        """Extend the leases of every item being processed; return how many still held."""
        with self._running_lock:
            running = dict(self._running)
        if not running:
            return 0
        lease_until = self.clock() + timedelta(seconds=self.settings.lease_seconds)
        with self.sessions.begin() as session:
            result = session.execute(
                update(WorkItem)
                .where(
                    WorkItem.id.in_(running),
                    WorkItem.lease_token.in_(set(running.values())),
                )
                .values(leased_until=lease_until)
                .execution_options(synchronize_session=False)
            )
        return int(result.rowcount)  # type: ignore[attr-defined]

    def _sweep_loop(self) -> None:
        # The first sweep runs at start: it recovers what a previous process left.
        while not self._stopping.is_set():
            try:
                sweep_once(self.sessions, self.registry, self.config)
            except Exception:
                log.exception("sweep failed")
            if self._stopping.wait(self.settings.sweep_interval_seconds):
                return

    def _ticker_loop(self, ticker: Ticker) -> None:
        while not self._stopping.is_set():
            try:
                ticker.run(TickContext(self.sessions, self.registry, self.config, self.clock()))
            except Exception:
                log.exception("periodic %s failed", ticker.name)
            if self._stopping.wait(ticker.interval_seconds):
                return

    # ----------------------------------------------------------------- workers

    def _work(self, item_id: uuid.UUID, token: str) -> None:
        try:
            self._run_item(item_id, token)
        except Exception:
            log.exception("processing of work item %s failed", item_id)
        finally:
            with self._running_lock:
                self._running.pop(item_id, None)
            self.wakeup.poke()

    def _run_item(self, item_id: uuid.UUID, token: str) -> None:
        """Run one claimed item's actions until it idles, ends, fails or hits the deadline.

        Before the item is let go, the decider is asked with the item re-read under the
        lease fence (the row is locked until commit on PostgreSQL), so an event applied
        meanwhile is seen and can never be lost by releasing the item to `idle`.
        """
        actor = threading.current_thread().name
        started = time.monotonic()
        with self.sessions() as session:
            item = session.get(WorkItem, item_id)
            if item is None or item.lease_token != token:
                return
            action = self._next_action(item)
            fenced = False  # is the item fresh and locked under our lease right now?
            while True:
                if not isinstance(action, str) and not fenced:
                    # Confirm under the fence with fresh state before letting go.
                    if not store.fence_lease(session, item_id, token, self.clock()):
                        return
                    session.get(WorkItem, item_id, populate_existing=True)
                    action = self._next_action(item)
                if action is None:
                    terminal = item.phase in TERMINAL_PHASES
                    self._let_go(
                        session, item, actor, {"source": "worker" if terminal else "decider"}
                    )
                    return
                if isinstance(action, Wait):
                    self._hold(session, item, action)
                    return
                if fenced and (
                    self._stopping.is_set()
                    or time.monotonic() - started >= self.settings.deadline_seconds
                ):
                    # Keep the slot, give the worker back; the item is claimed again
                    # behind the items that were already waiting.
                    store.drop_lease(session, item_id, token, resume_at=self.clock())
                    session.commit()
                    return
                # End the transaction: on SQLite the write lock is then taken only when
                # the executor first touches the database, not for its whole run.
                session.commit()
                if not self._run_action(session, item, token, action, actor):
                    return
                # The item was re-read under the fence: decide on fresh state.
                fenced = True
                action = self._next_action(item)

    def _let_go(
        self, session: Session, item: WorkItem, actor: str, trigger: dict[str, Any]
    ) -> None:
        """Release the item's slot (idle, or done once terminal) and commit, under the fence."""
        release_slot(session, item, actor=actor, trigger=trigger)
        session.commit()

    def _next_action(self, item: WorkItem) -> Decision:
        if item.phase in TERMINAL_PHASES:
            return None
        return self.registry.get(item.type).decider(item, self.clock())

    @staticmethod
    def _hold(session: Session, item: WorkItem, wait: Wait) -> None:
        """Keep the item's slot and give the worker back until `wait.until`.

        The caller holds the lease fence in the open transaction. No audit row: a
        long run is checked many times and nothing about the item changes.
        """
        item.run_after = wait.until
        item.lease_owner = item.lease_token = None
        item.leased_until = None
        session.commit()

    def _run_action(
        self, session: Session, item: WorkItem, token: str, action: str, actor: str
    ) -> bool:
        """Run one executor and stage its changes, fenced; False when the item is let go.

        On success the transaction is left open with the item re-read under the
        fence, so the caller can decide (and release) in the same transaction.
        """
        item_id = item.id
        item_type = self.registry.get(item.type)
        executor = self.registry.executor(item.type, action)
        old = snapshot(item)
        try:
            with fenced_executor(session, item_id, token):
                executor(ActionContext(session, item, self.clock(), item_type.settings))
                session.connection()  # make sure the fenced write transaction has begun
                session.flush()
        except LeaseLost:
            session.rollback()
            log.warning("lost the lease of work item %s during %s; discarded", item_id, action)
            return False
        except Exception as err:
            session.rollback()
            self._record_failure(item_id, token, action, err, actor)
            return False
        trigger = {"source": "worker", "action": action}
        audit(
            session,
            AuditRecord(
                "action_completed",
                actor,
                item_id,
                old_state=old,
                new_state=snapshot(item),
                trigger=trigger,
            ),
        )
        if item.phase in TERMINAL_PHASES:
            self._let_go(session, item, actor, trigger)
            return False
        session.get(WorkItem, item_id, populate_existing=True)
        return True

    def _record_failure(
        self, item_id: uuid.UUID, token: str, action: str, err: Exception, actor: str
    ) -> None:
        now = self.clock()
        known = isinstance(err, RetryLater | PermanentFailure | Requeue)
        message = (f"{action}: {err}" if known else f"{action}: {type(err).__name__}: {err}")[:4000]
        log.warning("work item %s: %s", item_id, message)
        with self.sessions.begin() as session:
            if not store.fence_lease(session, item_id, token, now):
                return
            item = session.get(WorkItem, item_id, populate_existing=True)
            if item is None:
                return
            old = snapshot(item)
            item.attempts += 1
            item.error = message
            trigger = {"source": "worker", "action": action, "error": message}
            requeue = isinstance(err, Requeue)
            if not requeue and (
                isinstance(err, PermanentFailure) or item.attempts >= self.settings.max_attempts
            ):
                reason = (
                    "permanent failure"
                    if isinstance(err, PermanentFailure)
                    else "max attempts reached"
                )
                set_phase(session, item, FAILED, actor=actor, trigger={**trigger, "reason": reason})
                return
            delay = backoff_delay(
                item.attempts, self.settings.backoff_base_seconds, self.settings.backoff_max_seconds
            )
            if isinstance(err, RetryLater | Requeue) and err.retry_after:
                delay = max(delay, err.retry_after)
            item.run_after = now + timedelta(seconds=delay)
            item.lease_owner = item.lease_token = None
            item.leased_until = None
            if requeue:
                # Back in line at its old place (same seq); its slot is free meanwhile,
                # and the dispatcher admits it again once run_after has passed.
                item.admission = QUEUED
                signal(session, PROJECT_QUEUED, item.project)
            audit(
                session,
                AuditRecord(
                    "requeued" if requeue else "action_failed",
                    actor,
                    item_id,
                    old_state=old,
                    new_state={**snapshot(item), "attempts": item.attempts},
                    trigger={**trigger, "retry_in_seconds": delay},
                ),
            )
