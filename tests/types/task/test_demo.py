"""The embedded default's demo kinds, as the command runner starts them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


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
    assert done.stderr.splitlines() == [f"sleep: seconds must be a number >= 0, not {seconds!r}"], (
        done.stderr
    )


def test_sleep_and_echo_do_their_work() -> None:
    slept = demo("sleep", {"seconds": 0})
    assert (slept.returncode, slept.stdout) == (0, "sleeping 0 s\ndone\n")
    echoed = demo("echo", {"goal": "hi"})
    assert (echoed.returncode, echoed.stdout) == (0, '{"goal": "hi"}\n')
