"""The `command` runner on its own, and re-attaching to a run after a daemon restart."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import uuid
from pathlib import Path

import pytest

from tests.conftest import Store
from tests.support.modes import mode, umask_022  # noqa: F401 - fixture
from tests.types.task.helpers import KINDS, program, submit, task, task_daemon, wait
from wq.types.task.runners import (
    FAILED,
    MISSING,
    RUNNING,
    SUCCEEDED,
    RunnerUnavailable,
    RunSpec,
    command,
    tail,
)
from wq.types.task.runners.command import CommandRunner
from wq.types.task.settings import CommandRunnerConfig


def runner(tmp_path: Path, **config: object) -> CommandRunner:
    settings = CommandRunnerConfig.model_validate({"kill_grace_seconds": 2.0, **config})
    return CommandRunner(settings, tmp_path / "runs", log_tail_bytes=200)


def spec(command: list[str], run_id: str = "wq-test-1", **payload: object) -> RunSpec:
    return RunSpec(
        run_id=run_id,
        item_id=uuid.uuid4(),
        project="demo",
        kind="k",
        repository=None,
        payload=dict(payload),
        timeout_seconds=60,
        command=command,
        env={"KIND_VAR": "from kind"},
    )


def test_payload_on_stdin_env_from_config_and_only_a_tail_kept(tmp_path: Path) -> None:
    local = runner(tmp_path, env={"RUNNER_VAR": "from runner"}, inherit_env=[])
    source = (
        "import json, os, sys\n"
        "payload = json.load(sys.stdin)\n"
        "print('x' * 1000)\n"
        "print(payload['goal'], os.environ['RUNNER_VAR'], os.environ['KIND_VAR'],"
        " os.environ['WQ_PROJECT'], 'HOME' in os.environ)\n"
    )
    local.start(spec(program(source), goal="fix it"))
    status = wait(lambda: (s := local.poll("wq-test-1")).state != RUNNING and s, message="finished")
    assert status.state == SUCCEEDED and status.exit_code == 0
    assert status.log_tail.endswith("fix it from runner from kind demo False\n")
    assert len(status.log_tail) <= 200


def test_failure_keeps_its_exit_status(tmp_path: Path) -> None:
    local = runner(tmp_path)
    local.start(spec(program("import sys; print('bad'); sys.exit(7)")))
    status = wait(lambda: (s := local.poll("wq-test-1")).state != RUNNING and s, message="end")
    assert status.state == FAILED and status.exit_code == 7 and "bad" in status.log_tail


def test_the_program_is_looked_up_on_the_runs_own_path(tmp_path: Path) -> None:
    """The kind's env may give the run a PATH of its own: the program is found there, as
    the run's process finds it, not on the daemon's PATH."""
    tools = tmp_path / "tools"
    tools.mkdir()
    script = tools / "only-here"
    script.write_text("#!/bin/sh\necho found on the PATH of the run\n")
    script.chmod(0o755)
    local = runner(tmp_path, env={"PATH": f"{tools}:/usr/bin:/bin"}, inherit_env=[])
    local.start(spec(["only-here"]))
    status = wait(lambda: (s := local.poll("wq-test-1")).state != RUNNING and s, message="end")
    assert status.state == SUCCEEDED and "found on the PATH of the run" in status.log_tail
    plain = tools / "not-executable"
    plain.write_text("#!/bin/sh\n")
    with pytest.raises(RunnerUnavailable, match="command is not executable"):
        runner(tmp_path).start(spec([str(plain)], run_id="wq-test-2"))


def test_a_second_start_and_a_new_runner_attach_to_the_same_run(tmp_path: Path) -> None:
    first = runner(tmp_path)
    marker = tmp_path / "starts"
    source = (
        f"open({str(marker)!r}, 'a').write('x')\n"
        "import sys, time\nsys.stdin.read()\nprint('up', flush=True)\ntime.sleep(2)\n"
    )
    first.start(spec(program(source)))
    first.start(spec(program(source)))  # a worker that lost its lease tries again
    again = runner(tmp_path)  # a restarted daemon knows nothing in memory
    again.start(spec(program(source)))
    assert again.poll("wq-test-1").state == RUNNING
    status = wait(
        lambda: (s := again.poll("wq-test-1")).state != RUNNING and s, timeout=30, message="end"
    )
    assert status.state == SUCCEEDED
    assert marker.read_text() == "x"


def test_cancel_terminates_the_group_and_unknown_runs_are_missing(tmp_path: Path) -> None:
    local = runner(tmp_path)
    local.start(spec(program("import time; print('up', flush=True); time.sleep(600)")))
    wait(lambda: "up" in local.poll("wq-test-1").log_tail, message="up")
    local.cancel("wq-test-1")
    status = local.poll("wq-test-1")
    assert status.state == FAILED and status.exit_code == -15
    local.cancel("wq-test-1")  # idempotent
    local.cancel("wq-never-started")
    assert local.poll("wq-never-started").state == MISSING
    local.remove("wq-test-1")
    assert local.poll("wq-test-1").state == MISSING


def test_a_run_started_on_another_machine_is_neither_signalled_nor_judged_by_its_pids(
    tmp_path: Path,
) -> None:
    """A runs_dir shared across machines: the other machine's process ids may name
    unrelated processes here, so this replica never signals them and says why it
    cannot watch the run."""
    local = runner(tmp_path)
    local.start(spec(program("import time; print('up', flush=True); time.sleep(600)")))
    wait(lambda: "up" in local.poll("wq-test-1").log_tail, message="up")
    elsewhere = runner(tmp_path)
    elsewhere.pid_space = "another-boot/pid:[1]"
    status = elsewhere.poll("wq-test-1")
    assert status.state == MISSING and "another machine" in status.reason
    elsewhere.cancel("wq-test-1")
    assert local.poll("wq-test-1").state == RUNNING  # not signalled from there
    local.cancel("wq-test-1")
    assert local.poll("wq-test-1").state == FAILED


def test_output_past_the_limit_is_dropped_but_its_last_lines_are_kept(tmp_path: Path) -> None:
    """One chatty run must not fill the disk that every other run and the daemon share;
    what it printed last (most often why it failed) still ends its log."""
    local = runner(tmp_path, max_output_bytes=100_000)
    source = (
        "import sys\n"
        "for n in range(200_000):\n"
        "    sys.stdout.write('line %06d of noise\\n' % n)\n"
        "print('the real reason', flush=True)\n"
        "sys.exit(3)\n"
    )
    local.start(spec(program(source)))
    status = wait(lambda: (s := local.poll("wq-test-1")).state != RUNNING and s, message="end")
    assert status.state == FAILED and status.exit_code == 3
    assert status.log_tail.endswith("the real reason\n")
    log = (tmp_path / "runs" / "wq-test-1" / "output.log").read_bytes()
    assert len(log) <= 2 * 100_000 + 200  # not the 4.6 MB printed
    assert log.startswith(b"line 000000 of noise\n")
    assert b"bytes of output dropped" in log


def test_a_start_that_fails_half_way_leaves_no_run_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while the run's files are written: the start fails, and the next one
    starts the run instead of attaching to a directory no supervisor will ever fill."""
    local = runner(tmp_path)

    def disk_full(path: Path, document: object) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(command, "write_json", disk_full)
        with pytest.raises(RunnerUnavailable, match="No space left on device"):
            local.start(spec(program("print('ran')")))
    assert not (tmp_path / "runs" / "wq-test-1").exists()
    local.start(spec(program("print('ran')")))
    status = wait(lambda: (s := local.poll("wq-test-1")).state != RUNNING and s, message="end")
    assert status.state == SUCCEEDED and "ran" in status.log_tail


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_run_whose_supervisor_died_is_stopped_when_found_lost(tmp_path: Path) -> None:
    """Its supervisor killed (an OOM kill, an operator): the run is lost, and its command
    must not run on beside the copy a retry starts."""
    local = runner(tmp_path)
    local.start(spec(program("import time; print('up', flush=True); time.sleep(600)")))
    wait(lambda: "up" in local.poll("wq-test-1").log_tail, message="up")
    pids = json.loads((tmp_path / "runs" / "wq-test-1" / "pid.json").read_text())
    os.kill(int(pids["supervisor"]), signal.SIGKILL)
    later = runner(tmp_path)  # another replica, or this daemon restarted
    status = wait(
        lambda: (s := later.poll("wq-test-1")).state != RUNNING and s, message="found lost"
    )
    try:
        assert status.state == MISSING and "supervisor ended" in status.reason
        wait(lambda: not group_alive(int(pids["pgid"])), message="the command stopped")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(pids["pgid"]), signal.SIGKILL)


def finished(local: CommandRunner, run_id: str = "wq-test-1") -> None:
    wait(lambda: local.poll(run_id).state != RUNNING, timeout=30, message="finished")


@pytest.mark.usefixtures("umask_022")
def test_a_runs_directory_and_files_are_its_users_alone(tmp_path: Path) -> None:
    # spec.json holds the run's environment (a kind's or the runner's `env:` may carry
    # secrets) and its payload; output.log what the command printed. As the default
    # runs_dir, $XDG_DATA_HOME/wq/task-runs, with none of it there yet.
    data = tmp_path / "data"
    settings = CommandRunnerConfig(env={"API_TOKEN": "s3cret"}, kill_grace_seconds=2.0)
    local = CommandRunner(settings, data / "wq" / "task-runs", log_tail_bytes=200)
    local.start(spec(program("print('out')")))
    finished(local)
    run_dir = data / "wq" / "task-runs" / "wq-test-1"
    for directory in (data, data / "wq", data / "wq" / "task-runs", run_dir):
        assert mode(directory) == 0o700, directory
    files = {path.name: mode(path) for path in run_dir.iterdir()}
    assert {"spec.json", "output.log", "exit.json", "supervisor.log"} <= set(files)
    assert files == dict.fromkeys(files, 0o600)


@pytest.mark.usefixtures("umask_022")
def test_a_runs_dir_that_exists_keeps_its_mode(tmp_path: Path) -> None:
    # The operator's choice (a directory shared by replicas running as one user); each
    # run's own directory is private all the same.
    runs = tmp_path / "runs"
    runs.mkdir(mode=0o750)
    local = runner(tmp_path)
    local.start(spec(program("print('out')")))
    finished(local)
    assert mode(runs) == 0o750
    assert mode(runs / "wq-test-1") == 0o700


def test_tail_starts_at_a_line_when_one_is_near() -> None:
    assert tail("short", 10) == "short"
    assert tail("aaaa\nbbbbbbbbbbbbbbbb", 18) == "bbbbbbbbbbbbbbbb"
    assert tail("x" * 30, 10) == "x" * 10


def test_a_restarted_daemon_follows_the_run_without_starting_it_again(
    store: Store, tmp_path: Path
) -> None:
    assert "sleep" in KINDS
    runs = tmp_path / "runs"
    with task_daemon(store, runs) as (runtime, client):
        item = submit(client, "sleep", payload={"seconds": 4})
        wait(lambda: task(runtime, item["id"]).run_id is not None, message="started")
    # The first daemon is gone; its run goes on. A new daemon picks the task up.
    with task_daemon(store, runs) as (runtime, _):
        done = wait(
            lambda: (t := task(runtime, item["id"])).phase != "active" and t,
            timeout=60,
            message="finished under the second daemon",
        )
        assert done.phase == "completed", done.error
        assert "woke up" in (done.log_tail or "")
        assert done.run_generation == 1
    assert (tmp_path / "starts.log").read_text() == "start\n"


def zombie_children() -> list[int]:
    """This process's children that ended and were not reaped (`<defunct>`)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            found.append(int(stat.parent.name))
    return found


@pytest.mark.parametrize("reap_wait", [command.REAP_WAIT_SECONDS, 0.0])
def test_a_finished_run_leaves_no_zombie(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reap_wait: float
) -> None:
    """The daemon had a `<defunct>` child per finished task until garbage collection.

    With no wait for the supervisor's exit (as when it is slow to exit on a loaded
    machine), it is still collected once it exits, without another poll."""
    monkeypatch.setattr(command, "REAP_WAIT_SECONDS", reap_wait)
    local = runner(tmp_path)
    run_ids = [f"wq-zombie-{n}" for n in range(5)]
    for run_id in run_ids:
        local.start(spec(program("print('done')"), run_id=run_id))
    for run_id in run_ids:
        status = wait(lambda r=run_id: (s := local.poll(r)).state != RUNNING and s, message="end")
        assert status.state == SUCCEEDED
    supervisors = {
        int(json.loads((tmp_path / "runs" / r / "supervisor.json").read_text())["pid"])
        for r in run_ids
    }
    # Each supervisor exits right after writing the exit status: reaped, it is gone.
    # (One may be seen `<defunct>` for the moment between its exit and its collection:
    # only one that stays so fails the test.)
    wait(
        lambda: not any(Path(f"/proc/{pid}").exists() for pid in supervisors),
        message="the supervisors' exit and collection",
    )
    assert supervisors.isdisjoint(zombie_children())
