"""`wq tui` is a registered command with its options."""

from __future__ import annotations

import contextlib
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.fakes.foreign import ForeignServer
from wq.cli.main import app


def test_tui_command_has_its_options() -> None:
    result = CliRunner().invoke(app, ["tui", "--help"], catch_exceptions=False)
    assert result.exit_code == 0, result.stdout
    for option in ("--url", "--refresh", "--readonly"):
        assert option in result.stdout


@pytest.mark.parametrize("seconds", ["0", "3601", "inf", "nan"])
def test_tui_refuses_a_refresh_out_of_bounds(seconds: str) -> None:
    """A refresh above an hour (`inf` too) made a dashboard that never refreshed."""
    result = CliRunner().invoke(app, ["tui", "--refresh", seconds], catch_exceptions=False)
    assert result.exit_code == 2, result.output


def test_tui_without_a_terminal_refuses_at_once(tmp_path: Path) -> None:
    # Textual reads keys from stdin and draws on a terminal: with /dev/null and pipes it
    # used to spin at full CPU forever, writing escape codes into the pipe.
    env = {**os.environ, "WQ_TOKEN": "x", "TERM": "xterm-256color", "HOME": str(tmp_path)}
    try:
        result = subprocess.run(
            [sys.executable, "-m", "wq", "tui", "--url", "http://127.0.0.1:9"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=env,
            timeout=15,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("wq tui ran without a terminal") from None
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr == (
        "wq: error: wq tui needs a terminal (stdin, stdout and stderr must be a TTY)\n"
    )


# `python -m wq` with a bug planted in the app: it raises as soon as it is mounted.
CRASHING = """
from wq.tui.app import WqApp
def boom(self):
    raise RuntimeError("a bug in the app")
WqApp.on_mount = boom
from wq.cli.main import main
main()
"""


def test_a_crash_ends_the_tui_with_a_non_zero_exit() -> None:
    # `wq tui` used to exit 0 whatever happened to the app. (A server's unexpected answer
    # no longer crashes it: see test_foreign_server.py.)
    primary, secondary = pty.openpty()
    proc: subprocess.Popen[bytes] | None = None
    try:
        with ForeignServer("object") as server:
            env = {**os.environ, "WQ_TOKEN": "x", "TERM": "xterm-256color"}
            proc = subprocess.Popen(
                [sys.executable, "-c", CRASHING, "tui", "--url", server.url],
                stdin=secondary,
                stdout=secondary,
                stderr=secondary,
                env=env,
                start_new_session=True,
            )
            os.close(secondary)
            # Drain the terminal so the app never blocks writing to it.
            threading.Thread(target=drain, args=(primary,), daemon=True).start()
            assert proc.wait(timeout=60) != 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        with contextlib.suppress(OSError):
            os.close(primary)


def drain(fd: int) -> None:
    with contextlib.suppress(OSError):
        while os.read(fd, 65536):
            pass
