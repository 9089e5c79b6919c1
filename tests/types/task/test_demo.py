"""The embedded default's demo kinds, as the command runner starts them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Store
from tests.types.task.helpers import task_daemon
from wq.types.task.settings import TaskSettings


def demo(kind: str, payload: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wq.types.task.demo", kind],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("seconds", ["abc", -1, None, True])
def test_sleep_refuses_a_bad_duration_in_one_line(seconds: object) -> None:
    done = demo("sleep", {"seconds": seconds})
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        f"sleep: seconds must be a number from 0 to 86400, not {seconds!r}"
    ], done.stderr


def test_sleep_and_echo_do_their_work() -> None:
    slept = demo("sleep", {"seconds": 0})
    assert (slept.returncode, slept.stdout) == (0, "sleeping 0 s\ndone\n")
    echoed = demo("echo", {"goal": "hi"})
    assert (echoed.returncode, echoed.stdout) == (0, '{"goal": "hi"}\n')


@pytest.mark.parametrize(
    ("kind", "payload", "message"),
    [
        # Accepted, then the task failed with a traceback (`time.sleep`'s OverflowError).
        ("sleep", {"seconds": 1e308}, "payload.seconds: 1e+308 is greater than the maximum"),
        ("sleep", {"seconds": 86400.5}, "payload.seconds: 86400.5 is greater than the maximum"),
        ("count", {"to": 10**30}, "payload.to: 1000000000000000000000000000000 is greater"),
    ],
)
def test_the_demo_kinds_refuse_what_they_cannot_run_with_422(
    store: Store, tmp_path: Path, kind: str, payload: object, message: str
) -> None:
    kinds = {name: config.model_dump() for name, config in TaskSettings().kinds.items()}
    with task_daemon(store, tmp_path / "runs", start=False, kinds=kinds) as (_, client):
        response = client.post(
            "/api/work-items/task", json={"project": "demo", "kind": kind, "payload": payload}
        )
        assert response.status_code == 422, response.text
        assert message in response.json()["error"]
        accepted = {"sleep": {"seconds": 86400}, "count": {"to": 86400}}[kind]
        response = client.post(
            "/api/work-items/task", json={"project": "demo", "kind": kind, "payload": accepted}
        )
        assert response.status_code in (200, 201), response.text


@pytest.mark.parametrize(
    ("kind", "payload"), [("sleep", {"seconds": 1e308}), ("count", {"to": 10**30})]
)
def test_the_demo_program_refuses_too_long_in_one_line(kind: str, payload: object) -> None:
    # A task stored before its kind's schema said so, or a kind configured without it.
    done = demo(kind, payload)
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1 and "86400" in done.stderr, done.stderr


def test_count_takes_a_whole_number_its_schema_lets_in() -> None:
    # JSON Schema's integers include 2.0: the API took it, then the program refused it.
    counted = demo("count", {"to": 2.0})
    assert (counted.returncode, counted.stdout, counted.stderr) == (0, "1 of 2\n2 of 2\n", "")
