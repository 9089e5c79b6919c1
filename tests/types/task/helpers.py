"""Helpers for task tests: kinds made of small Python programs, a daemon, submissions."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from fastapi.testclient import TestClient

from tests.conftest import Store, make_config
from tests.support.waiting import wait_for
from wq.daemon.app import create_app
from wq.daemon.runtime import Runtime, build_runtime
from wq.engine.models import WorkItem
from wq.types.task.models import TaskItem

PY = sys.executable
T = TypeVar("T")


def program(source: str) -> list[str]:
    """An argv running a Python snippet."""
    return [PY, "-c", source]


# Appends one line per start to $STARTS, so tests can count starts across daemons.
COUNT_START = "import os\nopen(os.environ['STARTS'], 'a').write('start\\n')\n"

KINDS: dict[str, dict[str, Any]] = {
    "echo": {
        "scope": "project",
        "command": program("import sys; print(sys.stdin.read())"),
    },
    "fail": {
        "scope": "project",
        "command": program("print('something broke'); raise SystemExit(3)"),
    },
    "sleep": {
        "scope": "project",
        "payload_schema": {
            "type": "object",
            "properties": {"seconds": {"type": "number", "minimum": 0}},
        },
        "command": program(
            COUNT_START + "import json, sys, time\n"
            "seconds = json.load(sys.stdin).get('seconds', 600)\n"
            "print('sleeping', seconds, flush=True)\n"
            "time.sleep(seconds)\nprint('woke up')\n"
        ),
    },
    "slow": {
        "scope": "project",
        "timeout_seconds": 4.0,
        "command": program(
            "print('starting a helper', flush=True)\n"
            "import os, subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            "open(os.environ['PIDFILE'], 'w').write(str(child.pid))\n"
            "time.sleep(600)\n"
        ),
    },
    "review": {"scope": "repository", "command": program("print('reviewed')")},
    "incident": {"scope": "project", "lane": "alert", "command": program("print('paged')")},
    "missing": {"scope": "project", "command": ["/nonexistent/wq-test-program"]},
    "args": {
        "scope": "project",
        "command": [PY, "-c", "import sys; print(sys.argv[1:])", "{project}", "{payload[n]}"],
    },
}


def task_settings(runs_dir: Path, **overrides: Any) -> dict[str, Any]:
    """`handled_types.task` for tests: fast checks, runs under `runs_dir`."""
    runners = overrides.pop("runners", {})
    settings: dict[str, Any] = {
        "kinds": KINDS,
        "poll_interval_seconds": 0.1,
        "start_backoff_seconds": 0.2,
        "runners": {
            **runners,
            "command": {
                "runs_dir": str(runs_dir),
                "env": {
                    "STARTS": str(runs_dir.parent / "starts.log"),
                    "PIDFILE": str(runs_dir.parent / "helper.pid"),
                },
                "kill_grace_seconds": 2.0,
            },
        },
    }
    settings.update(overrides)
    return settings


@contextmanager
def task_daemon(
    store: Store,
    runs_dir: Path,
    *,
    start: bool = True,
    pools: dict[str, Any] | None = None,
    **overrides: Any,
) -> Iterator[tuple[Runtime, TestClient]]:
    """A runtime handling only `task`, its processing started, and a client with a token."""
    config = make_config(
        store.url,
        handled_types={"task": task_settings(runs_dir, **overrides)},
        pools=pools or {"default": {"capacity": 10}},
    )
    runtime = build_runtime(config)
    assert runtime.local_tier is not None
    if start:
        runtime.start_processing()
    headers = {"Authorization": f"Bearer {runtime.local_tier.token}"}
    try:
        with TestClient(
            create_app(runtime), headers=headers, raise_server_exceptions=False
        ) as client:
            yield runtime, client
    finally:
        if runtime.manager is not None:
            runtime.manager.stop(grace=2)
        runtime.engine.dispose()


def submit(client: TestClient, kind: str, project: str = "demo", **fields: Any) -> dict[str, Any]:
    """Submit a task over HTTP; return the created item."""
    response = client.post(
        "/api/work-items/task", json={"project": project, "kind": kind, **fields}
    )
    assert response.status_code in (200, 201), response.text
    item: dict[str, Any] = response.json()["item"]
    return item


def task(runtime: Runtime, item_id: str | uuid.UUID) -> TaskItem:
    """A fresh copy of a task."""
    with runtime.sessions() as session:
        item = session.get(WorkItem, uuid.UUID(str(item_id)))
        assert isinstance(item, TaskItem)
        session.expunge_all()
        return item


def wait(predicate: Callable[[], T], *, message: str, timeout: float = 60.0) -> T:
    """`wait_for` with a deadline that suits starting real processes on a loaded machine."""
    return wait_for(predicate, timeout=max(timeout, 60.0), interval=0.05, message=message)
