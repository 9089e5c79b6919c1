"""`python -m wq` as a real process: help, completion, a call, an error without traceback."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from tests.cli.daemon import RunningDaemon, base_env, run


def test_help(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    top = run(["--help"], env, tmp_path)
    assert top.code == 0, top
    for command in ("submit", "status", "retry", "pools", "queue", "whoami", "login", "logout"):
        assert command in top.stdout
    status = run(["status", "--help"], env, tmp_path)
    assert status.code == 0 and "--watch" in status.stdout, status


def test_shell_completion_completes_commands(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "wq"
    env = base_env(tmp_path, _WQ_COMPLETE="complete_bash", COMP_WORDS="wq sta", COMP_CWORD="1")
    proc = subprocess.run(
        [str(script)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == ["stats", "status"]
    # The shell named, not detected from the process tree (pytest's, not a shell's):
    # typer's own switch for that, without which it ignores the name it is given.
    shown = subprocess.run(
        [str(script), "--show-completion", "bash"],
        env=base_env(tmp_path, _TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0 and "_WQ_COMPLETE=complete_bash" in shown.stdout


def test_a_call_and_an_error_as_processes(daemon: RunningDaemon, tmp_path: Path) -> None:
    env = base_env(tmp_path, WQ_URL=daemon.url, WORKQUEUE_SERVICE_TOKEN=daemon.admin)
    ok = run(["whoami"], env, tmp_path)
    assert (ok.code, ok.stdout, ok.stderr) == (0, "ada\n", ""), ok
    missing = str(uuid.uuid4())
    error = run(["status", "--id", missing, "--json"], env, tmp_path)
    assert error.code == 3 and error.stdout == "", error
    assert error.stderr == f"wq: error: work item {missing} not found\n", error
    pools = run(["pools", "--json"], env, tmp_path)
    assert pools.code == 0 and pools.json() is not None, pools


def test_output_that_cannot_be_written_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "wq"
    for args in (["--version"], ["config", "--help"]):
        with open("/dev/full", "w") as full:
            proc = subprocess.run(
                [str(script), *args],
                env=base_env(tmp_path),
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
                check=False,
            )
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr == "wq: error: No space left on device\n"
