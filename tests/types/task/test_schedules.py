"""Cron schedules: autonomous tasks, one per tick across replicas, skipped at the cap."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from tests.conftest import Store, make_config
from tests.types.task.helpers import task_settings
from wq.engine.config import ConfigError
from wq.engine.models import WorkItem
from wq.engine.registry import TickContext, TypeRegistry
from wq.types.task import TaskRuntime, register, schedules
from wq.types.task.models import TaskItem, TaskScheduleTick
from wq.types.task.schedules import latest_tick, produce

SCHEDULES = [
    {"project": "shop", "kind": "echo", "cron": "*/5 * * * *", "payload": {"goal": "scan"}},
    {"project": "shop", "kind": "review", "cron": "0 * * * *", "repository": "shop/api"},
]


def setup(store: Store, tmp_path: Path, cap: int = 6) -> tuple[TypeRegistry, Any, TaskRuntime]:
    registry = TypeRegistry()
    register(registry, task_settings(tmp_path / "runs", schedules=SCHEDULES), source="test")
    config = make_config(store.url, pools={"default": {"queued_autonomous_cap": cap}})
    bundle = registry.get("task").settings
    assert isinstance(bundle, TaskRuntime)
    return registry, config, bundle


def tasks(store: Store) -> list[TaskItem]:
    with store.sessions() as session:
        # Tasks made by one tick share their creation time: seq keeps their order.
        query = select(TaskItem).order_by(TaskItem.created_at, TaskItem.seq)
        rows = list(session.execute(query).scalars())
        session.expunge_all()
        return rows


def at(hour: int, minute: int, second: int = 0) -> datetime:
    return datetime(2026, 12, 1, hour, minute, second, tzinfo=UTC)


def test_latest_tick_includes_now() -> None:
    assert latest_tick("*/5 * * * *", at(5, 0)) == at(5, 0)
    assert latest_tick("*/5 * * * *", at(5, 4, 59)) == at(5, 0)
    assert latest_tick("0 * * * *", at(5, 30)) == at(5, 0)


def test_each_tick_makes_one_autonomous_task(store: Store, tmp_path: Path) -> None:
    registry, config, bundle = setup(store, tmp_path)

    def tick(now: datetime) -> list[str]:
        context = TickContext(store.sessions, registry, config, now)
        return [made.outcome for made in produce(context, bundle.settings)]

    assert tick(at(5, 0, 10)) == ["created", "created"]  # both schedules are due at 05:00
    assert tick(at(5, 0, 40)) == []  # the same ticks again: nothing
    assert tick(at(5, 5, 1)) == ["created"]  # only the 5-minute one
    made = tasks(store)
    assert [(t.kind, t.repository, t.autonomous) for t in made] == [
        ("echo", None, True),
        ("review", "shop/api", True),
        ("echo", None, True),
    ]
    assert made[0].payload["goal"] == "scan" and made[0].payload["tick"] == at(5, 0).isoformat()
    # A tick missed while no daemon ran is not made up long after.
    assert tick(at(5, 9, 30)) == []


def test_ticks_beyond_the_cap_are_skipped_and_counted(store: Store, tmp_path: Path) -> None:
    registry, config, bundle = setup(store, tmp_path, cap=2)
    outcomes = []
    for minute in (0, 5, 10, 15):
        context = TickContext(store.sessions, registry, config, at(6, minute, 5))
        outcomes += [
            (made.schedule.split("|")[1], made.outcome)
            for made in produce(context, bundle.settings)
        ]
    assert outcomes == [
        ("echo", "created"),
        ("review", "created"),
        ("echo", "capped"),
        ("echo", "capped"),
        ("echo", "capped"),
    ]
    assert len(tasks(store)) == 2
    with store.sessions() as session:
        recorded = list(session.execute(select(TaskScheduleTick.outcome)).scalars())
    assert sorted(recorded) == ["capped"] * 3 + ["created"] * 2


def test_two_replicas_make_one_task_per_tick(store: Store, tmp_path: Path) -> None:
    replicas = [setup(store, tmp_path, cap=100) for _ in range(2)]
    for minute in range(0, 30, 5):
        now = at(7, minute, 3)
        barrier = threading.Barrier(len(replicas))
        results: list[list[str]] = []

        def run(
            replica: tuple[TypeRegistry, Any, TaskRuntime],
            now: datetime,
            barrier: threading.Barrier,
            results: list[list[str]],
        ) -> None:
            registry, config, bundle = replica
            barrier.wait()
            made = produce(TickContext(store.sessions, registry, config, now), bundle.settings)
            results.append([m.outcome for m in made])

        threads = [
            threading.Thread(target=run, args=(replica, now, barrier, results))
            for replica in replicas
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        expected = 2 if minute == 0 else 1
        assert sum(len(made) for made in results) == expected, (minute, results)
    with store.sessions() as session:
        count = len(list(session.execute(select(WorkItem.id)).scalars()))
    assert count == 7  # six 5-minute ticks and one hourly


STRICT = {
    "scope": "project",
    "command": ["/bin/true"],
    "payload_schema": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"n": {"type": "integer"}},
    },
}


@pytest.mark.parametrize(
    ("schedule", "key", "reason"),
    [
        (
            {"project": "sched", "kind": "strict", "cron": "* * * * *", "payload": {"n": 1}},
            "schedules.0.payload",
            "payload: Additional properties are not allowed ('source', 'tick' were unexpected)"
            " (the kind's payload_schema, with `source` and `tick` added)",
        ),
        (
            {"project": "../x", "kind": "echo", "cron": "* * * * *"},
            "schedules.0.project",
            "",
        ),
        (
            {"project": "sched", "kind": "echo", "cron": "* * * * *", "payload": {"tick": 1}},
            "schedules.0.payload",
            "tick: set by the schedule on each task it makes",
        ),
    ],
)
def test_a_schedule_that_could_never_make_its_task_refuses_the_start(
    tmp_path: Path, schedule: dict[str, Any], key: str, reason: str
) -> None:
    """It failed on every tick instead, with a traceback, and the schedules after it
    never made anything."""
    settings = task_settings(tmp_path / "runs", schedules=[schedule])
    settings["kinds"] = {**settings["kinds"], "strict": STRICT}
    with pytest.raises(ConfigError) as refused:
        register(TypeRegistry(), settings, source="test")
    assert f"handled_types.task.{key}: {reason}" in str(refused.value)


def test_a_schedule_whose_task_fails_holds_back_no_other(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    registry, config, bundle = setup(store, tmp_path)
    made = schedules.submit_task

    def failing_for_echo(session: Any, create: Any, **kwargs: Any) -> Any:
        if create.kind == "echo":
            raise RuntimeError("the database refused it")
        return made(session, create, **kwargs)

    monkeypatch.setattr(schedules, "submit_task", failing_for_echo)
    context = TickContext(store.sessions, registry, config, at(5, 0, 10))
    assert [made.outcome for made in produce(context, bundle.settings)] == ["created"]
    assert [task.kind for task in tasks(store)] == ["review"]
    assert "not produced: the database refused it" in caplog.text
