"""The `command` runner: a local process per run, supervised, found again by its directory.

Each run has a directory `<runs_dir>/<run_id>` holding its spec, output and exit
status. Creating that directory is the start's claim: a second start of the same run
id finds it and does nothing, so a new owner re-attaches instead of starting twice.
The spec holds the run's whole environment (the runner's and the kind's `env:`, which
may carry secrets) and its payload: each run's directory is 0700 and its files 0600,
and a runs_dir wq creates is 0700 (one that exists keeps the operator's mode).
The command runs without a shell, in its own process group, under a small supervisor
process that outlives the daemon; a restarted daemon polls the directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wq.engine.private import DIR_MODE, FILE_MODE, make_private_dirs, open_private_append
from wq.types.task.runners import (
    FAILED,
    MISSING,
    RUNNING,
    SUCCEEDED,
    RunnerUnavailable,
    RunNotHere,
    RunSpec,
    RunState,
    RunStatus,
    pid_space,
    tail,
)
from wq.types.task.runners.logfile import read_growing, tail_offset
from wq.types.task.runners.supervise import write_json
from wq.types.task.settings import CommandRunnerConfig

# How long a run directory may exist before its supervisor has announced itself.
STARTING_GRACE_SECONDS = 60.0
# How long a just-announced supervisor may take to exec.
EXEC_GRACE_SECONDS = 5.0
# How long a run's supervisor is waited for once its exit status is written (it exits then).
REAP_WAIT_SECONDS = 1.0
# How a missing run is reported when its directory is not there (another replica's
# runs_dir is not this one's: `wq.types.task.executors` says so).
NO_RUN_DIRECTORY = "no run directory"
ELSEWHERE = (
    "the run was started on another machine or in another container (its process ids"
    " are not this replica's to watch or signal): a runs_dir is for one machine; give"
    " each machine its own, or use the kubernetes runner"
)


class TemplateError(ValueError):
    """The argv template cannot be filled from this task (a missing payload key)."""


class _Value:
    """A template value: indexed as its document is, written as JSON unless a string or
    a number (an object or a list became Python's repr, which no program reads)."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def __getitem__(self, key: str | int) -> _Value:
        # `format` hands `[0]` over as the number 0 and `[a]` as the text "a".
        value = self._value
        if isinstance(value, list) and isinstance(key, int):
            return _Value(value[key])
        if isinstance(value, dict):
            return _Value(value[str(key)])
        raise KeyError(key)

    def __format__(self, spec: str) -> str:
        value = self._value
        if isinstance(value, str) or type(value) in (int, float):
            return format(value, spec)
        return format(json.dumps(value, ensure_ascii=False, sort_keys=True), spec)


def render_argv(template: list[str], values: dict[str, Any]) -> list[str]:
    """Fill the argv template; each element stays one argument (no shell, no splitting)."""
    wrapped = {name: _Value(value) for name, value in values.items()}
    argv = []
    for part in template:
        try:
            argv.append(part.format_map(wrapped))
        except KeyError as err:
            raise TemplateError(f"argv template {part!r}: the task has no {err}") from None
        except IndexError:
            raise TemplateError(f"argv template {part!r}: the task's list is shorter") from None
        except (ValueError, AttributeError, TypeError) as err:
            raise TemplateError(f"argv template {part!r}: {err}") from None
    return argv


def group_environments(pgid: int) -> Iterator[bytes]:
    """The environments of the processes in a process group (those this user may read)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            # The fields after the command's name, which may hold spaces and parentheses.
            fields = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()
            if int(fields[2]) == pgid:
                yield (entry / "environ").read_bytes()


class CommandRunner:
    """Runs tasks as local processes."""

    name = "command"

    def __init__(self, config: CommandRunnerConfig, runs_dir: Path, log_tail_bytes: int) -> None:
        self.config = config
        self.runs_dir = runs_dir
        self.log_tail_bytes = log_tail_bytes
        # Supervisors this process started: polled so that they never linger as zombies.
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self.pid_space = pid_space.current()

    def _dir(self, run_id: str) -> Path:
        if "/" in run_id or run_id.startswith("."):
            raise ValueError(f"not a run id: {run_id!r}")
        return self.runs_dir / run_id

    def _environment(self, spec: RunSpec) -> dict[str, str]:
        env = {name: os.environ[name] for name in self.config.inherit_env if name in os.environ}
        env.update(self.config.env)
        env.update(spec.env)
        env.update(
            WQ_TASK_ID=str(spec.item_id),
            WQ_RUN_ID=spec.run_id,
            WQ_PROJECT=spec.project,
            WQ_KIND=spec.kind,
            WQ_REPOSITORY=spec.repository or "",
        )
        return env

    def start(self, spec: RunSpec) -> None:
        """Start the run under a supervisor, unless its directory exists already."""
        if not spec.command:
            raise TemplateError(f"kind {spec.kind!r} has no command")
        values = {
            "id": str(spec.item_id),
            "project": spec.project,
            "kind": spec.kind,
            "repository": spec.repository or "",
            "payload": spec.payload,
        }
        argv = render_argv(spec.command, values)
        env = self._environment(spec)
        # Looked up as the run's process will be: on the run's own PATH.
        if shutil.which(argv[0], path=env.get("PATH", os.defpath)) is None:
            if os.sep in argv[0] and os.path.isfile(argv[0]):
                raise RunnerUnavailable(f"command is not executable: {argv[0]}")
            raise RunnerUnavailable(f"command not found: {argv[0]}")
        run_dir = self._dir(spec.run_id)
        try:
            make_private_dirs(self.runs_dir)
            run_dir.mkdir(mode=DIR_MODE)
        except FileExistsError:
            return  # started before (by us or by a worker that lost its lease): attach
        except OSError as err:
            raise RunnerUnavailable(f"cannot create {run_dir}: {err.strerror or err}") from None
        document = {
            "argv": argv,
            "env": env,
            "cwd": self.config.workdir,
            "payload": spec.payload,
            "max_output_bytes": self.config.max_output_bytes,
        }
        try:
            write_json(run_dir / "spec.json", document)
            # The child keeps its own copy of the log's descriptor; ours closes at once.
            with open_private_append(run_dir / "supervisor.log") as supervisor_log:
                process = subprocess.Popen(
                    [sys.executable, "-m", "wq.types.task.runners.supervise", str(run_dir)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=supervisor_log,
                    start_new_session=True,
                    close_fds=True,
                )
        except OSError as err:
            # Half made (a full disk): gone, or the next start would take it for a run.
            shutil.rmtree(run_dir, ignore_errors=True)
            raise RunnerUnavailable(f"cannot start the run in {run_dir}: {err}") from None
        write_json(run_dir / "supervisor.json", {"pid": process.pid, "pid_space": self.pid_space})
        self._children[spec.run_id] = process

    def _read(self, path: Path) -> dict[str, Any] | None:
        try:
            document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return document

    def _tail(self, run_dir: Path) -> str:
        path = run_dir / "output.log"
        try:
            with open(path, "rb") as log:
                log.seek(0, os.SEEK_END)
                size = log.tell()
                log.seek(max(0, size - self.log_tail_bytes))
                data = log.read()
        except FileNotFoundError:
            return ""
        return tail(data.decode("utf-8", errors="replace"), self.log_tail_bytes)

    def _supervisor_alive(self, run_id: str, run_dir: Path) -> bool | None:
        """True/False, or None when the supervisor has not announced itself yet."""
        child = self._children.get(run_id)
        if child is not None:
            if child.poll() is None:
                # Our own supervisor, still running: perhaps not exec'd yet, when its
                # /proc cmdline is still this process's.
                return True
            self._children.pop(run_id, None)  # reaped
            return False
        announced = self._read(run_dir / "supervisor.json")
        if announced is None:
            return None
        if self._started_elsewhere(announced):
            return False
        pid = int(announced["pid"])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        cmdline = Path(f"/proc/{pid}/cmdline")
        if cmdline.exists():  # the pid may have been reused by another program
            with contextlib.suppress(OSError):
                if str(run_dir).encode() in cmdline.read_bytes():
                    return True
                # Announced by its parent right after the fork: until it has exec'd,
                # its cmdline is still the parent's. Only time tells it from a reused pid.
                announced_at = (run_dir / "supervisor.json").stat().st_mtime
                return None if time.time() - announced_at < EXEC_GRACE_SECONDS else False
        return True

    def _started_elsewhere(self, announced: dict[str, Any] | None) -> bool:
        """Whether the run's supervisor lives in another PID space (another machine or
        container sharing the runs_dir): its process ids mean nothing here."""
        space = announced.get("pid_space") if announced else None
        return space is not None and space != self.pid_space

    def _reap(self, ended: str | None = None) -> None:
        """Collect the exit of our supervisors that have ended, so that none lingers as a
        zombie (a pod's PID limit counts them). `ended`: a run whose exit status is
        written; its supervisor exits right after, so it is waited for a moment."""
        child = self._children.get(ended) if ended is not None else None
        if child is not None:
            try:
                child.wait(timeout=REAP_WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                # Slow to exit (a loaded machine): collected the moment it does, not at
                # the next poll, which may never come when no other run follows.
                threading.Thread(target=child.wait, name="wq-reap", daemon=True).start()
        for run_id, process in list(self._children.items()):
            if process.poll() is not None:
                self._children.pop(run_id, None)

    def poll(self, run_id: str) -> RunStatus:
        """The run's state from its directory (works from any process on this machine)."""
        run_dir = self._dir(run_id)
        if not run_dir.is_dir():
            return RunStatus(MISSING, reason=f"{NO_RUN_DIRECTORY} {run_dir}")
        self._reap()
        for _ in range(2):
            result = self._read(run_dir / "exit.json")
            if result is not None:
                self._reap(run_id)
                code = int(result["exit_code"])
                state: RunState = SUCCEEDED if code == 0 else FAILED
                return RunStatus(state, exit_code=code, log_tail=self._tail(run_dir))
            alive = self._supervisor_alive(run_id, run_dir)
            if alive is None:
                age = time.time() - run_dir.stat().st_mtime
                if age < STARTING_GRACE_SECONDS:
                    return RunStatus(RUNNING, log_tail=self._tail(run_dir))
                break
            if alive:
                return RunStatus(RUNNING, log_tail=self._tail(run_dir))
            # The supervisor ended: read exit.json once more (it may have just written it).
        if self._started_elsewhere(self._read(run_dir / "supervisor.json")):
            reason = ELSEWHERE
        else:
            reason = "the run's supervisor ended without an exit status"
            self._stop_orphans(run_id, run_dir)
        return RunStatus(MISSING, log_tail=self._tail(run_dir), reason=reason)

    def _stop_orphans(self, run_id: str, run_dir: Path) -> None:
        """Kill what is left of a run whose supervisor died: a retry starts it anew, and
        the old copy must not run on beside it. Only a group one of whose processes
        carries the run's id in its environment: the group's id may have been reused."""
        pids = self._read(run_dir / "pid.json")
        if pids is None:
            return
        pgid = int(pids["pgid"])
        marker = f"WQ_RUN_ID={run_id}".encode()
        if any(marker in environ.split(b"\0") for environ in group_environments(pgid)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)

    def _signal_group(self, run_dir: Path, number: int) -> bool:
        pids = self._read(run_dir / "pid.json")
        if pids is None:
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(pids["pgid"]), number)
        return True

    def _wait_exit(self, run_dir: Path, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if (run_dir / "exit.json").exists():
                return True
            time.sleep(0.05)
        return (run_dir / "exit.json").exists()

    def cancel(self, run_id: str) -> None:
        """TERM the run's process group, then KILL it after the grace period."""
        run_dir = self._dir(run_id)
        if not run_dir.is_dir() or (run_dir / "exit.json").exists():
            return
        (run_dir / "cancel").touch(mode=FILE_MODE)
        if self._started_elsewhere(self._read(run_dir / "supervisor.json")):
            return  # its process ids are another machine's: signalling them hits strangers
        if not self._signal_group(run_dir, signal.SIGTERM):
            # Not announced yet: the supervisor sees the `cancel` file after starting.
            self._wait_exit(run_dir, self.config.kill_grace_seconds)
            self._signal_group(run_dir, signal.SIGTERM)
        if not self._wait_exit(run_dir, self.config.kill_grace_seconds):
            self._signal_group(run_dir, signal.SIGKILL)
            self._wait_exit(run_dir, self.config.kill_grace_seconds)
        self.poll(run_id)  # reap our supervisor if it was ours

    def output(self, run_id: str, *, tail_lines: int | None, follow: bool) -> Iterator[str]:
        """The run's `output.log`, from its last `tail_lines` lines, followed until the
        run has ended (its exit status is written, or its supervisor is gone)."""
        run_dir = self._dir(run_id)
        if not run_dir.is_dir():
            raise RunNotHere(f"no run directory {run_dir} on this machine")
        path = run_dir / "output.log"
        return read_growing(
            path,
            tail_offset(path, tail_lines),
            follow=follow,
            ended=lambda: self.poll(run_id).state != RUNNING,
        )

    def remove(self, run_id: str) -> None:
        """Delete the run's directory (after it ended)."""
        self._children.pop(run_id, None)
        shutil.rmtree(self._dir(run_id), ignore_errors=True)
