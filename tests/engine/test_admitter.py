"""The admission thread beside the scheduler (`wq.engine.admitter`).

Asking for a pass never waits for the thread; one thread serves pass after pass, the
projects asked for during a pass go in the next, and the thread ends when idle or
stopped. Runs against SQLite and PostgreSQL (the manager uses it on PostgreSQL only,
the class itself knows no dialect).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

from tests.conftest import Store
from tests.engine.test_admission import admitted_ids, config_for, enqueue
from tests.support.waiting import wait_for
from wq.engine import admitter as admitter_module
from wq.engine.admitter import Admitter
from wq.engine.models import utcnow
from wq.engine.outage import EngineFailures
from wq.engine.wakeup import Wakeup


def admission_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "wq-admission"]


@pytest.fixture
def stopping() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def make_admitter(store: Store, stopping: threading.Event, idle_seconds: float = 5.0) -> Admitter:
    return Admitter(
        store.sessions,
        config_for(store, capacity=10),
        clock=utcnow,
        wakeup=Wakeup(),
        failures=EngineFailures(logging.getLogger("wq.engine.processing")),
        stopping=stopping,
        held_retry_seconds=0.5,
        idle_seconds=idle_seconds,
    )


def test_one_thread_serves_pass_after_pass_and_ends_when_joined(
    store: Store, stopping: threading.Event
) -> None:
    admitter = make_admitter(store, stopping)
    config = config_for(store, capacity=10)
    first = enqueue(store, config, "team/a")
    admitter.admit({"team/a"})
    wait_for(lambda: admitted_ids(store) == [first], message="the first pass admitted")
    (thread,) = admission_threads()
    second = enqueue(store, config, "team/b")
    admitter.admit({"team/b"})
    wait_for(lambda: admitted_ids(store) == [first, second], message="the second pass")
    assert admission_threads() == [thread]  # the same thread, not one per pass
    passed = admitter.take_results().passed
    assert [projects for projects, _ in passed] == [{"team/a"}, {"team/b"}]
    admitter.join(5)
    assert not thread.is_alive()
    admitter.admit({"team/b"})  # joined: no more passes, no new thread
    assert admission_threads() == []


def test_projects_asked_for_during_a_pass_go_in_the_next(
    store: Store, stopping: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    admitter = make_admitter(store, stopping)
    config = config_for(store, capacity=10)
    a, b, c = (enqueue(store, config, f"team/{name}") for name in "abc")
    entered, go_on = threading.Event(), threading.Event()
    run = admitter_module.AdmissionPass.run

    def slow_run(self: admitter_module.AdmissionPass, session: object) -> int:
        entered.set()
        go_on.wait(5)
        return run(self, session)  # type: ignore[arg-type]

    monkeypatch.setattr(admitter_module.AdmissionPass, "run", slow_run)
    admitter.admit({"team/a"})
    assert entered.wait(5)
    started = time.monotonic()
    admitter.admit({"team/b"})
    admitter.admit({"team/c"})
    assert time.monotonic() - started < 1  # asking never waits for the pass running
    go_on.set()
    wait_for(lambda: set(admitted_ids(store)) == {a, b, c}, message="both passes")
    passed = admitter.take_results().passed
    assert [projects for projects, _ in passed] == [{"team/a"}, {"team/b", "team/c"}]
    admitter.join(5)


def test_the_thread_ends_when_idle_and_the_next_pass_starts_another(
    store: Store, stopping: threading.Event
) -> None:
    admitter = make_admitter(store, stopping, idle_seconds=0.2)
    config = config_for(store, capacity=10)
    first = enqueue(store, config, "team/a")
    admitter.admit(None)
    wait_for(lambda: admitted_ids(store) == [first], message="the pass over every project")
    wait_for(lambda: not admission_threads(), message="the idle thread ended")
    second = enqueue(store, config, "team/a")
    admitter.admit({"team/a"})
    wait_for(lambda: admitted_ids(store) == [first, second], message="a pass on a new thread")
    admitter.join(5)


def test_a_stopping_manager_starts_no_pass(store: Store, stopping: threading.Event) -> None:
    admitter = make_admitter(store, stopping)
    enqueue(store, config_for(store, capacity=10), "team/a")
    stopping.set()
    admitter.admit({"team/a"})
    assert admission_threads() == []
    assert admitted_ids(store) == []


def test_a_failed_pass_hands_its_projects_back_and_the_next_pass_runs(
    store: Store, stopping: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    admitter = make_admitter(store, stopping)
    config = config_for(store, capacity=10)
    item = enqueue(store, config, "team/a")
    run = admitter_module.AdmissionPass.run
    failures = [RuntimeError("the database went away")]

    def failing_once(self: admitter_module.AdmissionPass, session: object) -> int:
        if failures:
            raise failures.pop()
        return run(self, session)  # type: ignore[arg-type]

    monkeypatch.setattr(admitter_module.AdmissionPass, "run", failing_once)
    admitter.admit({"team/a"})
    wait_for(lambda: admitter.take_results().failed == {"team/a"}, message="handed back")
    assert admitted_ids(store) == []
    admitter.admit({"team/a"})  # the scheduler asks again: the same thread serves it
    wait_for(lambda: admitted_ids(store) == [item], message="the next pass admitted")
    admitter.join(5)
