"""`wq queue` without `--project` when no project has work: the empty queue.

`-o json` printed nothing at all (not JSON) and `--watch` exited at once; now the machine
formats print the empty list and the watch keeps redrawing, taking the most pressed
project once one has work. Every test leaves this module's daemon without queued work.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.cli.daemon import BLOCKED, RunningDaemon, base_env, cli_env, invoke
from tests.support.signals import default_sigint
from tests.support.waiting import wait_for

NO_WORK = "no project has queued or in-flight work\n"


@pytest.mark.parametrize(
    ("args", "load"),
    [(["-o", "json"], None), (["--json"], None), (["-o", "yaml"], yaml.safe_load)],
)
def test_machine_formats_print_the_empty_queue(
    daemon: RunningDaemon, cache_home: Path, args: list[str], load: object
) -> None:
    result = invoke(["queue", *args], cli_env(cache_home, WQ_URL=daemon.url, WQ_TOKEN=daemon.admin))
    assert result.code == 0, result
    assert (result.json() if load is None else yaml.safe_load(result.stdout)) == [], result
    assert result.stderr == NO_WORK, result


def test_a_table_says_so_on_stderr(daemon: RunningDaemon, cache_home: Path) -> None:
    result = invoke(["queue"], cli_env(cache_home, WQ_URL=daemon.url, WQ_TOKEN=daemon.admin))
    assert (result.code, result.stdout, result.stderr) == (0, "", NO_WORK), result


def test_watch_keeps_watching_until_a_project_has_work(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    env = base_env(tmp_path, WQ_URL=daemon.url, WQ_TOKEN=daemon.admin, COLUMNS="200")
    out = tmp_path / "watch.out"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "wq", "queue", "--watch", "--interval", "0.3"],
            env=env,
            stdout=sink,
            stderr=subprocess.PIPE,
            preexec_fn=default_sigint,
        )
    item = None
    try:
        # Frame after frame of the empty queue: the watch did not end (it used to, at once).
        wait_for(
            lambda: out.read_bytes().count(b"nothing queued") >= 3 or proc.poll() is not None,
            timeout=60,
            message="frames",
        )
        assert proc.poll() is None, out.read_text()
        # Then a project has work: its queue is shown.
        item = daemon.submit(project=BLOCKED)
        wait_for(lambda: item["id"].encode() in out.read_bytes(), timeout=60, message="the item")
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if item is not None:  # no queued work left for the other tests
            with daemon.api() as http:
                http.post(f"/api/work-items/{item['id']}/cancel")
    assert proc.returncode == 0, stderr
    assert b"Traceback" not in stderr
    assert f"the queue of {BLOCKED}, the most pressed project".encode() in stderr
