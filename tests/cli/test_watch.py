"""`--watch`: a real `wq` process redraws until Ctrl-C (SIGINT), then exits 0.

`pools` runs as on a terminal (rich Live redraws in place with cursor controls); the
others write to a file as in a pipe, where each frame follows the last.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.daemon import BLOCKED, RunningDaemon, base_env, cli_env, invoke
from tests.support.signals import default_sigint
from tests.support.waiting import wait_for


def shows(path: Path, text: str) -> Callable[[], bool]:
    return lambda: text.encode() in path.read_bytes()


@pytest.mark.parametrize("command", ["pools", "queue", "status"])
def test_watch_redraws_until_ctrl_c(daemon: RunningDaemon, tmp_path: Path, command: str) -> None:
    first = daemon.submit(project=BLOCKED)
    args = {
        "pools": ["pools"],
        "queue": ["queue", "--project", BLOCKED],
        "status": ["status", "--project", BLOCKED, "-o", "wide"],
    }[command]
    env = base_env(tmp_path, WQ_URL=daemon.url, WQ_TOKEN=daemon.admin, COLUMNS="200")
    terminal = command == "pools"
    if terminal:
        env.update(TTY_COMPATIBLE="1", TTY_INTERACTIVE="1")
    out = tmp_path / "watch.out"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "wq", *args, "--watch", "--interval", "0.3"],
            env=env,
            stdout=sink,
            stderr=subprocess.PIPE,
            preexec_fn=default_sigint,
        )
    try:
        wait_for(shows(out, BLOCKED if terminal else first["id"]), timeout=60, message="a frame")
        if terminal:
            wait_for(shows(out, "\x1b[2K"), timeout=60, message="an in-place redraw")
        else:
            # A later frame shows an item submitted after the watch began.
            second = daemon.submit(project=BLOCKED)
            wait_for(shows(out, second["id"]), timeout=60, message="a redraw")
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0, stderr
    assert b"Traceback" not in stderr
    frames = out.read_bytes().count(b"Ctrl-C to stop")
    assert frames >= (1 if terminal else 2)


@pytest.mark.parametrize("interval", ["inf", "1e308", "nan"])
def test_an_interval_out_of_range_is_a_usage_error(tmp_path: Path, interval: str) -> None:
    # `inf` reached time.sleep: an OverflowError traceback after the first frame.
    for command in ("pools", "status"):
        result = invoke([command, "--watch", "--interval", interval], cli_env(tmp_path))
        assert result.code == 2, result
        assert "--interval" in result.stderr


def test_watch_in_json_streams_one_line_per_change(daemon: RunningDaemon, tmp_path: Path) -> None:
    project = f"{BLOCKED}/stream-{daemon.dialect}"
    first = daemon.submit(project=project)
    env = base_env(tmp_path, WQ_URL=daemon.url, WQ_TOKEN=daemon.admin)
    out = tmp_path / "stream.out"
    args = ["status", "--project", project, "--watch", "-o", "json", "--interval", "0.3"]
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "wq", *args],
            env=env,
            stdout=sink,
            stderr=subprocess.PIPE,
            preexec_fn=default_sigint,
        )
    try:
        wait_for(shows(out, first["id"]), timeout=60, message="the first item")
        second = daemon.submit(project=project)
        wait_for(shows(out, second["id"]), timeout=60, message="the new item")
        with daemon.api() as http:
            cancelled = http.post(f"/api/work-items/{first['id']}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        wait_for(shows(out, '"phase":"cancelled"'), timeout=60, message="the change")
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0, stderr
    documents = [json.loads(line) for line in out.read_text().splitlines()]
    # Each item when first seen, then only what changed: the cancelled one.
    assert [(d["id"], d["phase"]) for d in documents] == [
        (first["id"], "active"),
        (second["id"], "active"),
        (first["id"], "cancelled"),
    ]


def test_pools_watch_in_json_streams_the_pool_that_changed(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    env = base_env(tmp_path, WQ_URL=daemon.url, WQ_TOKEN=daemon.admin)
    out = tmp_path / "pools.out"
    args = ["pools", "--project", BLOCKED, "--watch", "--json", "--interval", "0.3"]
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "wq", *args],
            env=env,
            stdout=sink,
            stderr=subprocess.PIPE,
            preexec_fn=default_sigint,
        )
    try:
        wait_for(shows(out, BLOCKED), timeout=60, message="the pool")
        daemon.submit(project=BLOCKED)
        wait_for(lambda: len(out.read_bytes().splitlines()) >= 2, timeout=60, message="a change")
        # Five more polls: the oldest queued item's age grows at each, and is no change
        # (every poll printed the pool again).
        time.sleep(1.5)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0, stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 2, lines
    before, after = [json.loads(line) for line in lines]
    assert before["project"] == after["project"] == BLOCKED
    assert after["normal"]["queued"] == before["normal"]["queued"] + 1
