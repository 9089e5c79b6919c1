"""The events queue's AWS region: from the environment, else from the queue URL's host."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.daemon.test_daemon_process import (
    COMMAND_TIMEOUT,
    Daemon,
    clean_env,
    error_lines,
    start_daemon,
    write,
)
from wq.engine.sqs import EventsConfigError, queue_region, sqs_client


@pytest.mark.parametrize(
    ("url", "region"),
    [
        ("https://sqs.eu-west-1.amazonaws.com/123456789012/gitlab-events", "eu-west-1"),
        ("https://eu-central-1.queue.amazonaws.com/123456789012/q", "eu-central-1"),
        ("https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q", "cn-north-1"),
        ("https://sqs.us-gov-west-1.amazonaws.com/123456789012/q", "us-gov-west-1"),
        ("http://127.0.0.1:5000/123456789012/q", None),
        ("https://sqs.eu-west-1.amazonaws.com.evil.example/1/q", None),
    ],
)
def test_queue_region_is_read_off_aws_hosts_only(url: str, region: str | None) -> None:
    assert queue_region(url) == region


def test_the_environment_region_wins_else_the_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    url = "https://sqs.eu-west-1.amazonaws.com/123456789012/q"
    assert sqs_client(url).meta.region_name == "eu-west-1"
    with pytest.raises(EventsConfigError, match="AWS_DEFAULT_REGION"):
        sqs_client("http://127.0.0.1:5000/123456789012/q")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-2")
    assert sqs_client(url).meta.region_name == "us-east-2"


def test_a_daemon_without_a_region_for_its_queue_refuses_in_one_line(tmp_path: Path) -> None:
    config = write(
        tmp_path / "wq.yml",
        f"database_url: sqlite:///{tmp_path / 'wq.db'}\n"
        "events: {queue_url: 'http://127.0.0.1:9/123456789012/q'}\n",
    )
    env = clean_env(tmp_path, AWS_CONFIG_FILE=str(tmp_path / "none"))
    for variable in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        env.pop(variable, None)
    daemons: list[Daemon] = []
    daemon = start_daemon(daemons, tmp_path, env, "--config", str(config))
    code = daemon.wait_exit(COMMAND_TIMEOUT)
    log = daemon.log()
    assert code not in (None, 0), log
    assert "Traceback" not in log and "listening on" not in log, log
    last = error_lines(log)[-1]
    assert "AWS_DEFAULT_REGION" in last and "127.0.0.1:9/123456789012/q" in last, log
