"""The supervisor of one local run: `python -m wq.types.task.runners.supervise RUN_DIR`.

Started by the `command` runner in a session of its own, so it outlives the daemon
that started it (a restarted daemon finds the run again through RUN_DIR). It starts
the command in a new process group with the payload on stdin, sends its output to
`output.log`, and writes `exit.json` when the command ends; that file is the run's
result for whoever polls it. Its files are 0600, as the rest of the run's directory
(the command's output may show what its environment holds). Standard library only
(`wq.engine.private` is too): it starts fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from wq.engine.private import open_private_append, write_private


def write_json(path: Path, document: dict[str, Any]) -> None:
    """Write a small JSON file atomically (readers never see half of it), 0600."""
    write_private(path, json.dumps(document))


def _feed(stdin: Any, data: bytes) -> None:
    # A command that never reads its stdin must not block the supervisor.
    with contextlib.suppress(BrokenPipeError, OSError):
        stdin.write(data)
    with contextlib.suppress(BrokenPipeError, OSError):
        stdin.close()


def supervise(run_dir: Path) -> int:
    """Run the command described in RUN_DIR/spec.json to its end; return its exit code."""
    spec = json.loads((run_dir / "spec.json").read_text(encoding="utf-8"))
    with open_private_append(run_dir / "output.log") as out:
        try:
            child = subprocess.Popen(
                spec["argv"],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=spec["env"],
                cwd=spec.get("cwd"),
                start_new_session=True,
                close_fds=True,
            )
        except OSError as err:
            out.write(f"wq: cannot start {spec['argv'][0]}: {err.strerror or err}\n".encode())
            write_json(run_dir / "exit.json", {"exit_code": 127, "reason": "cannot start"})
            return 127
        write_json(run_dir / "pid.json", {"supervisor": os.getpid(), "pgid": child.pid})
        if (run_dir / "cancel").exists():  # cancelled while it was starting
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)
        feeder = threading.Thread(
            target=_feed, args=(child.stdin, json.dumps(spec["payload"]).encode()), daemon=True
        )
        feeder.start()
        code = child.wait()
        # What the command left running in its group ends with it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
    write_json(run_dir / "exit.json", {"exit_code": code})
    return code


def main() -> None:
    """Entry point: one argument, the run directory."""
    if len(sys.argv) != 2:
        sys.stderr.write("usage: python -m wq.types.task.runners.supervise RUN_DIR\n")
        raise SystemExit(2)
    # Terminal signals belong to the daemon's terminal, not to runs.
    for number in (signal.SIGINT, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)
    supervise(Path(sys.argv[1]))


if __name__ == "__main__":
    main()
