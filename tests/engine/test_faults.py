"""Fault tests: several engine processes on one PostgreSQL, one of them killed or stopped.

Each replica is `tests.support.worker_process` (a processing manager with LISTEN for
the `chain` test type, whose actions can be made slow). The test process samples the
database while they work and reads the actions' start and end times from a trace
file the replicas share. PostgreSQL only: replicas share nothing else.
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from tests.conftest import Store, make_config
from tests.engine.helpers import count_by, submit_many
from tests.support.chain import Behaviour, chain_registry
from tests.support.waiting import wait_for
from tests.support.worker_process import spawn
from wq.engine.models import AuditEntry, WorkItem

CAPACITY = 2


@pytest.fixture
def replicas(postgres_store: Store) -> Iterator[list[subprocess.Popen[str]]]:
    """Worker processes started by a test; any still running are killed at its end."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def start_replicas(
    store: Store, tmp_path: Path, count: int, **options: Any
) -> list[subprocess.Popen[str]]:
    options.setdefault("trace_file", str(tmp_path / "trace.log"))
    return [spawn(store.url, tmp_path / "executions.log", 2.0, options) for _ in range(count)]


def submit_backlog(store: Store, projects: list[str], pools: dict[str, Any]) -> list[uuid.UUID]:
    config = make_config(store.url, pools=pools)
    return submit_many(store.sessions, chain_registry(Behaviour()), config, projects)


def all_idle(store: Store, count: int) -> bool:
    return count_by(store.sessions, WorkItem.admission).get("idle") == count


def completed_per_action(store: Store) -> dict[tuple[uuid.UUID, str], int]:
    """How many times each (item, action) committed, from the audit log."""
    with store.sessions() as session:
        rows = session.execute(
            select(AuditEntry.work_item_id, AuditEntry.trigger).where(
                AuditEntry.event_type == "action_completed"
            )
        ).all()
    counts: dict[tuple[uuid.UUID, str], int] = defaultdict(int)
    for item_id, trigger in rows:
        counts[(item_id, trigger["action"])] += 1
    return counts


def read_trace(
    path: Path, exits: dict[int, float]
) -> dict[uuid.UUID, list[tuple[float, float, int]]]:
    """Per item, the (start, end, pid) of every action any replica ran.

    An action that never ended ran until its process was gone (`exits`).
    """
    open_runs: dict[tuple[str, str, int], float] = {}
    runs: dict[uuid.UUID, list[tuple[float, float, int]]] = defaultdict(list)
    for line in path.read_text().splitlines():
        what, item, action, pid_text, at_text = line.split()
        pid, at = int(pid_text), float(at_text)
        if what == "start":
            open_runs[(item, action, pid)] = at
        else:
            runs[uuid.UUID(item)].append((open_runs.pop((item, action, pid)), at, pid))
    for (item, _action, pid), started in open_runs.items():
        runs[uuid.UUID(item)].append((started, exits.get(pid, time.time()), pid))
    return runs


def overlaps(runs: dict[uuid.UUID, list[tuple[float, float, int]]]) -> list[str]:
    """Items that two replicas ran at the same time."""
    found = []
    for item_id, spans in runs.items():
        ordered = sorted(spans)
        for (_, end, pid), (start, _, other) in itertools.pairwise(ordered):
            if start < end:
                found.append(f"{item_id}: pid {pid} until {end:.3f}, pid {other} from {start:.3f}")
    return found


def running_in(trace: Path, pid: int, action: str | None = None) -> set[str]:
    """Items whose action (any, or the one named) the process started and not ended yet."""
    if not trace.exists():
        return set()
    running: set[str] = set()
    for line in trace.read_text().splitlines():
        what, item, step, pid_text, _ = line.split()
        if int(pid_text) == pid and action in (None, step):
            (running.add if what == "start" else running.discard)(item)
    return running


class CapacitySampler:
    """Samples admitted items per (project, lane) in the background; records overruns."""

    def __init__(self, store: Store, limits: dict[str, int]) -> None:
        self.store, self.limits = store, limits
        self.samples = 0
        self.overruns: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with self.store.sessions() as session:
                rows = session.execute(
                    select(WorkItem.project, WorkItem.lane, func.count())
                    .where(WorkItem.admission == "admitted")
                    .group_by(WorkItem.project, WorkItem.lane)
                ).all()
            self.samples += 1
            for project, lane, count in rows:
                if count > self.limits[lane]:
                    self.overruns.append(f"{project} {lane}: {count}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def test_replicas_keep_pools_bounded_and_admit_in_fifo_order(
    postgres_store: Store, replicas: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    store = postgres_store
    pools = {"default": {"capacity": CAPACITY, "alert_capacity": 1}}
    projects = [f"team/{n % 4}" for n in range(40)]
    sampler = CapacitySampler(store, {"normal": CAPACITY, "alert": 1})
    replicas.extend(
        start_replicas(
            store,
            tmp_path,
            3,
            pools=pools,
            processing={"workers": 3},
            sleep={"step1": 0.1, "step2": 0.1},
        )
    )
    ids = submit_backlog(store, projects, pools)
    try:
        wait_for(lambda: all_idle(store, len(ids)), timeout=120, interval=0.2, message="idle")
    finally:
        sampler.stop()
    assert sampler.samples > 20
    assert sampler.overruns == []
    # FIFO per project: admitted (by any replica) in the order submitted.
    with store.sessions() as session:
        admitted = session.execute(
            select(AuditEntry.new_state)
            .where(AuditEntry.event_type == "admitted")
            .order_by(AuditEntry.id)
        ).scalars()
        order: dict[str, list[int]] = defaultdict(list)
        for state in admitted:
            order[state["project"]].append(state["seq"])
    assert set(order) == set(projects)
    assert all(seqs == sorted(seqs) and len(seqs) == 10 for seqs in order.values()), order
    assert set(completed_per_action(store).values()) == {1}


def test_a_killed_replicas_items_finish_about_one_lease_later_each_action_once(
    postgres_store: Store, replicas: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    store = postgres_store
    lease = 3.0
    pools = {"default": {"capacity": 10}}
    replicas.extend(
        start_replicas(
            store,
            tmp_path,
            3,
            pools=pools,
            processing={"workers": 2, "lease_seconds": lease},
            sleep={"step1": 1.0, "step2": 1.0, "step3": 1.0},
        )
    )
    ids = submit_backlog(store, [f"team/{n % 3}" for n in range(12)], pools)
    victim = replicas[0]
    trace = tmp_path / "trace.log"
    wait_for(lambda: running_in(trace, victim.pid), message="the victim running actions")
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    in_flight = running_in(trace, victim.pid)
    killed_at = time.monotonic()
    wait_for(lambda: all_idle(store, len(ids)), timeout=90, interval=0.2, message="all idle")
    # About one lease later (generous: the machine is loaded), never earlier.
    assert time.monotonic() - killed_at < lease + 30
    counts = completed_per_action(store)
    assert len(counts) == 3 * len(ids) and set(counts.values()) == {1}
    with store.sessions() as session:
        takeovers = session.execute(
            select(AuditEntry.work_item_id, AuditEntry.old_state).where(
                AuditEntry.event_type.in_(("lease_taken_over", "lease_expired"))
            )
        ).all()
    victim_owner = f":{victim.pid}"
    rescued = {
        str(item_id) for item_id, old in takeovers if old["lease_owner"].endswith(victim_owner)
    }
    assert in_flight and in_flight <= rescued


def test_a_stopped_replica_never_shares_an_item_and_exits_within_the_grace(
    postgres_store: Store, replicas: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    store = postgres_store
    lease, grace = 1.5, 3.0
    pools = {"default": {"capacity": 10}}
    # step1 outlasts the lease: heartbeats must keep it. step2 outlasts the grace by
    # far: the stopping replica must neither hand it over early nor wait for it.
    replicas.extend(
        start_replicas(
            store,
            tmp_path,
            3,
            pools=pools,
            processing={"workers": 2, "lease_seconds": lease, "shutdown_grace_seconds": grace},
            sleep={"step1": 2.0, "step2": 15.0, "step3": 0.2},
        )
    )
    ids = submit_backlog(store, [f"team/{n % 3}" for n in range(6)], pools)
    leaving = replicas[0]
    trace = tmp_path / "trace.log"
    wait_for(
        lambda: len(running_in(trace, leaving.pid, "step2")) == 2,
        timeout=60,
        message="the leaving replica running two long actions",
    )
    signalled = time.monotonic()
    leaving.send_signal(signal.SIGTERM)
    assert leaving.wait(timeout=60) == 0
    exited_after = time.monotonic() - signalled
    exited_at = time.time()
    assert leaving.stdout is not None
    stopped = leaving.stdout.read().split()
    assert stopped[0] == "stopped" and len(stopped) == 3  # both actions logged by id
    # The grace is a bound: grace plus a short step, far less than the 15 s action
    # (generous: the machine is loaded, and interpreter teardown counts too).
    assert exited_after < grace + 8.0, exited_after
    wait_for(lambda: all_idle(store, len(ids)), timeout=120, interval=0.2, message="all idle")
    with store.sessions() as session:
        phases = session.execute(select(WorkItem.phase, WorkItem.error)).all()
    assert {phase for phase, _ in phases} == {"active"}, phases
    assert overlaps(read_trace(trace, {leaving.pid: exited_at})) == []
    assert set(completed_per_action(store).values()) == {1}
