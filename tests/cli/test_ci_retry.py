"""`wq ci-retry explain` on recorded traces: offline, no daemon, no GitLab."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tests.types.mr.ci_support import TRACES
from wq.cli.main import app

CONFIG: dict[str, Any] = {
    "handled_types": {
        "mr": {
            "gitlab_url": "https://gitlab.example.com",
            "projects": {"rpms": {"token_env": "UNSET_IN_THIS_TEST"}},
            "job_retry": {
                "retry_delays": ["0", "5m", "10m"],
                "retry_limit": 3,
                "matchers": [
                    {
                        "name": "runner-system-failure",
                        "description": "Job failed with runner_system_failure",
                        "failure_reason": "runner_system_failure",
                    },
                    {
                        "name": "git",
                        "description": "Git could not fetch the sources",
                        "retry_limit": 2,
                        "matchers": [
                            {"name": "git-clone", "messages": ["/(?m)^fatal: unable to access '/"]},
                            {
                                "name": "git-rpc",
                                "messages": [r"/error: RPC failed; curl \d+ HTTP\/2 stream \d+/"],
                                "retry_delays": ["1m"],
                            },
                        ],
                    },
                    {
                        "action": "report",
                        "matchers": [{"name": "oom", "messages": ["Killed"], "tail_lines": 5}],
                    },
                ],
            },
        }
    }
}


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "wq.yml"
    path.write_text(yaml.safe_dump(CONFIG))
    return path


def explain(config: Path, trace: str | Path, *args: str) -> Any:
    runner = CliRunner()
    trace_path = trace if isinstance(trace, Path) else TRACES / f"{trace}.log"
    return runner.invoke(
        app,
        ["ci-retry", "explain", "--config", str(config), "--trace", str(trace_path), *args],
        catch_exceptions=False,
    )


def document(config: Path, trace: str | Path, *args: str) -> dict[str, Any]:
    result = explain(config, trace, "--json", *args)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_a_git_clone_failure_matches_a_child_with_inherited_fields(config: Path) -> None:
    data = document(config, "git-clone-failure", "--failure-reason", "script_failure")
    node = data["matcher"]
    assert node["name"] == "git-clone"
    assert node["path"] == "handled_types.mr.job_retry.matchers[1].matchers[0]"
    assert node["description"] == "Git could not fetch the sources"  # from its parent
    assert node["retry_limit"] == 2  # from its parent
    assert node["retry_delays"] == ["0", "5m", "10m"]  # from the top
    assert node["messages"] == [{"pattern": "/(?m)^fatal: unable to access '/", "found": True}]
    assert (data["outcome"], data["delay"], data["trace_read"]) == ("retry_now", "0", True)


def test_delays_and_the_limit_follow_the_attempt(config: Path) -> None:
    args = ("--failure-reason", "script_failure")
    assert document(config, "git-clone-failure", *args, "--attempt", "1")["outcome"] == (
        "retry_after_delay"
    )
    assert document(config, "git-clone-failure", *args, "--attempt", "1")["delay"] == "5m"
    assert document(config, "git-clone-failure", *args, "--attempt", "2")["outcome"] == (
        "limit_reached"
    )
    rpc = document(config, "git-rpc-failure", *args, "--attempt", "1")
    assert (rpc["matcher"]["name"], rpc["outcome"], rpc["delay"]) == (
        "git-rpc",
        "retry_after_delay",
        "1m",
    )


def test_a_runner_system_failure_is_decided_without_the_trace(config: Path) -> None:
    result = explain(config, "runner-system-failure", "--failure-reason", "runner_system_failure")
    assert result.exit_code == 0, result.output
    assert "runner-system-failure" in result.stdout
    assert "trace:    not needed" in result.stdout
    assert "outcome:  retry now (attempt 0, delay 0)" in result.stdout
    # The same trace without GitLab's failure reason matches nothing.
    data = document(config, "runner-system-failure", "--failure-reason", "script_failure")
    assert (data["matcher"], data["outcome"]) == (None, "no_match")


def test_a_genuine_test_failure_does_not_match(config: Path) -> None:
    data = document(config, "genuine-test-failure", "--failure-reason", "script_failure")
    assert (data["matcher"], data["outcome"], data["trace_read"]) == (None, "no_match", True)
    text = explain(config, "genuine-test-failure", "--failure-reason", "script_failure")
    assert "no matcher matches" in text.stdout


def test_a_report_matcher_and_tail_lines(config: Path, tmp_path: Path) -> None:
    trace = tmp_path / "oom.log"
    trace.write_text("compiling\nKilled\nmake: *** [all] Error 137\nERROR: Job failed\n")
    data = document(config, trace)
    assert (data["matcher"]["name"], data["matcher"]["action"], data["outcome"]) == (
        "oom",
        "report",
        "report",
    )
    trace.write_text("Killed\n" + "later\n" * 10)
    assert document(config, trace)["outcome"] == "no_match"


def test_the_trace_is_cut_as_the_executor_cuts_it(config: Path, tmp_path: Path) -> None:
    CONFIG["handled_types"]["mr"]["job_trace_max_bytes"] = 100
    try:
        config.write_text(yaml.safe_dump(CONFIG))
    finally:
        del CONFIG["handled_types"]["mr"]["job_trace_max_bytes"]
    trace = tmp_path / "long.log"
    trace.write_text("fatal: unable to access 'https://x/'\n" + "x" * 200 + "\nend\n")
    assert document(config, trace, "--failure-reason", "script_failure")["outcome"] == "no_match"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            {"job_retry": {"matchers": [{"name": "a"}, {"name": "b", "messages": ["ok", "/(/"]}]}},
            "job_retry.matchers[1].messages[1]: invalid regex",
        ),
        (
            {"handled_types": {"mr": {"job_retry": {"retry_delays": ["soon"]}}}},
            "handled_types.mr.job_retry.retry_delays[0]: invalid duration",
        ),
        ({"handled_types": {"mr": {}}}, "no handled_types.mr.job_retry"),
        ("matchers: [", "not valid YAML"),
        (b"\xff\xfejob_retry: {}\n", "not UTF-8 text"),
    ],
)
def test_a_bad_config_is_one_line_and_exit_1(tmp_path: Path, content: Any, message: str) -> None:
    path = tmp_path / "bad.yml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    result = explain(path, "git-clone-failure")
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wq: error: config ") and message in lines[0]


def test_a_missing_file_is_a_usage_error(config: Path, tmp_path: Path) -> None:
    result = explain(config, tmp_path / "nope.log")
    assert result.exit_code == 2
    assert "cannot read" in result.stderr and "Traceback" not in result.output


def explain_limited(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`wq ci-retry explain` in a process of its own, limited to 1.5 GB of address space."""

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1_500_000_000, 1_500_000_000))

    return subprocess.run(
        [sys.executable, "-m", "wq", "ci-retry", "explain", "-c", str(config), *args],
        preexec_fn=limited,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_device_named_as_the_trace_is_a_usage_error(config: Path) -> None:
    # /dev/zero seeks "successfully" to an end of 0: explain then read it forever,
    # 8 GB of memory within seconds.
    result = explain_limited(config, "--trace", "/dev/zero")
    assert result.returncode == 2, result.stderr
    assert "wq: error: --trace: /dev/zero is not a file or a pipe" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_trace_from_a_pipe_is_read(config: Path) -> None:
    trace = b"$ make test\nKilled\n"
    args = ["ci-retry", "explain", "-c", str(config), "--json", "--trace", "/dev/stdin"]
    result = subprocess.run(
        [sys.executable, "-m", "wq", *args],
        input=trace,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["matcher"]["name"] == "oom"


def test_only_the_end_of_a_huge_trace_is_read(config: Path, tmp_path: Path) -> None:
    # A 4 GiB trace (sparse: no disk used) within 1.5 GB of address space: reading it
    # whole, as explain did, is a MemoryError; its last job_trace_max_bytes are enough.
    trace = tmp_path / "huge.log"
    with trace.open("wb") as stream:
        stream.truncate(4 << 30)
        stream.seek(0, 2)
        stream.write(b"\nKilled\n")
    result = explain_limited(config, "--json", "--trace", str(trace))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["matcher"]["name"] == "oom"
