"""The supervisor of one local run: `python -m wq.types.task.runners.supervise RUN_DIR`.

Started by the `command` runner in a session of its own, so it outlives the daemon
that started it (a restarted daemon finds the run again through RUN_DIR). It starts
the command in a new process group with the payload on stdin, copies its output to
`output.log` (up to the runner's `max_output_bytes`, then only its last part), and
writes `exit.json` when the command ends; that file is the run's result for whoever
polls it. Its files are 0600, as the rest of the run's directory (the command's
output may show what its environment holds). Standard library only
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
from typing import Any, BinaryIO

from wq.engine.private import open_private_append, write_private

# Output a run may leave in its output.log, unless the runner's settings say otherwise.
DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024 * 1024
# Past the limit, at most this much of the latest output is kept for the log's end.
MAX_KEPT_TAIL = 1024 * 1024
# How long the output of an ended command is still read (its pipe may be held open by a
# process that left its group).
PUMP_DRAIN_SECONDS = 2.0


def write_json(path: Path, document: dict[str, Any]) -> None:
    """Write a small JSON file atomically (readers never see half of it), 0600."""
    write_private(path, json.dumps(document))


def _feed(stdin: Any, data: bytes) -> None:
    # A command that never reads its stdin must not block the supervisor.
    with contextlib.suppress(BrokenPipeError, OSError):
        stdin.write(data)
    with contextlib.suppress(BrokenPipeError, OSError):
        stdin.close()


class _CappedLog:
    """The run's output.log, written up to `limit` bytes; past it, output is dropped but
    its last bytes are kept in memory and appended when the run ends, so that the log
    (and the tail the daemon reports) still ends with what the command printed last."""

    def __init__(self, out: BinaryIO, limit: int) -> None:
        self.out = out
        self.room = limit
        self.limit = limit
        self.dropped = 0
        self.kept = bytearray()
        self.lock = threading.Lock()
        self.closed = False

    def pump(self, source: int) -> None:
        """Copy the command's output from a pipe until it closes."""
        while chunk := os.read(source, 65536):
            with self.lock:
                if self.closed:  # a process that left the group still writes: dropped
                    return
                self._write(chunk)

    def _write(self, chunk: bytes) -> None:
        if self.room > 0:
            head = chunk[: self.room]
            self.out.write(head)
            self.out.flush()
            self.room -= len(head)
            chunk = chunk[len(head) :]
        if chunk:
            self.dropped += len(chunk)
            self.kept += chunk
            del self.kept[: max(0, len(self.kept) - min(self.limit, MAX_KEPT_TAIL))]

    def close(self) -> None:
        """Append the kept tail after a note of what was dropped."""
        with self.lock:
            if self.dropped:
                gone = self.dropped - len(self.kept)
                self.out.write(
                    f"\nwq: {gone} bytes of output dropped past max_output_bytes"
                    f" ({self.limit}); the last {len(self.kept)} bytes follow\n".encode()
                )
                self.out.write(self.kept)
            self.out.flush()
            self.closed = True


def supervise(run_dir: Path) -> int:
    """Run the command described in RUN_DIR/spec.json to its end; return its exit code."""
    spec = json.loads((run_dir / "spec.json").read_text(encoding="utf-8"))
    with open_private_append(run_dir / "output.log") as out:
        log = _CappedLog(out, int(spec.get("max_output_bytes") or DEFAULT_MAX_OUTPUT_BYTES))
        reader, writer = os.pipe()
        try:
            child = subprocess.Popen(
                spec["argv"],
                stdin=subprocess.PIPE,
                stdout=writer,
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
        finally:
            os.close(writer)
        write_json(run_dir / "pid.json", {"supervisor": os.getpid(), "pgid": child.pid})
        if (run_dir / "cancel").exists():  # cancelled while it was starting
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)
        pump = threading.Thread(target=log.pump, args=(reader,), daemon=True)
        pump.start()
        feeder = threading.Thread(
            target=_feed, args=(child.stdin, json.dumps(spec["payload"]).encode()), daemon=True
        )
        feeder.start()
        code = child.wait()
        # What the command left running in its group ends with it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
        # A process that left the group (setsid) may hold the pipe open: not waited for.
        pump.join(PUMP_DRAIN_SECONDS)
        log.close()
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
