"""Exit codes and error lines: 0 ok, 1 failure, 2 usage, 3 not found, 4 auth, 5 conflict.

Errors go to stderr as one `wq: error:` line (and maybe a `hint:`), stdout stays empty,
and there is never a traceback.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.cli.daemon import BLOCKED, Result, RunningDaemon, cli_env, free_port, invoke


def assert_error(result: Result, code: int, *words: str) -> None:
    assert result.code == code, result
    assert result.stdout == "", result
    lines = result.stderr.splitlines()
    assert lines and lines[0].startswith("wq: error: "), result
    assert all(line.startswith(("wq: error: ", "hint: ")) for line in lines), result
    assert len(lines) <= 2 and "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], result


def env(daemon: RunningDaemon, cache_home: Path, token: str | None = None) -> dict[str, str | None]:
    return cli_env(cache_home, WQ_URL=daemon.url, WQ_TOKEN=token or daemon.admin)


def test_connection_refused_names_the_url(cache_home: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = invoke(["whoami", "--url", url], cli_env(cache_home, WQ_TOKEN="t"))
    assert_error(result, 1, url, "connection refused")


@pytest.mark.parametrize("command", [["status"], ["whoami"], ["login"]])
def test_an_unreachable_server_without_a_token_is_exit_1_not_a_login(
    cache_home: Path, command: list[str]
) -> None:
    # No token anywhere: a login would be next, but there is no server to log in to.
    url = f"http://127.0.0.1:{free_port()}"
    result = invoke([*command, "--url", url], cli_env(cache_home))
    assert_error(result, 1, f"cannot connect to {url}: connection refused")
    assert "login" not in result.stderr.splitlines()[0] and "Kerberos" not in result.stderr


def test_unknown_item_is_exit_3(daemon: RunningDaemon, cache_home: Path) -> None:
    missing = str(uuid.uuid4())
    for command in ("status", "retry", "cancel"):
        result = invoke([command, "--id", missing], env(daemon, cache_home))
        assert_error(result, 3, missing)
        # Said once: it used to be `not found: work item ... not found`.
        assert result.stderr == f"wq: error: work item {missing} not found\n", result


@pytest.mark.parametrize(
    "args",
    [
        ["status", "--phase", "bogus"],
        ["status", "--admission", "nope"],
        ["status", "--id", "x", "--phase", "active"],
        ["status", "--bogus-flag"],
        ["queue", "--project", "p", "--lane", "fast"],
        ["retry"],
        ["status", "-o", "xml"],
    ],
)
def test_usage_errors_are_exit_2(daemon: RunningDaemon, cache_home: Path, args: list[str]) -> None:
    result = invoke(args, env(daemon, cache_home))
    assert result.code == 2, result
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.strip()


def test_a_request_the_server_finds_invalid_is_exit_2(
    daemon: RunningDaemon, cache_home: Path
) -> None:
    # The CLI lets a NUL through in a project: the server is the judge of it.
    assert_error(invoke(["status", "--project", "a\x00b"], env(daemon, cache_home)), 2, "project")


def test_one_id_that_fails_is_one_line(daemon: RunningDaemon, cache_home: Path) -> None:
    item = daemon.submit(project=BLOCKED)  # active: nothing to retry
    result = invoke(["retry", item["id"]], env(daemon, cache_home))
    assert_error(result, 5, "conflict")
    assert "retries failed" not in result.stderr


def test_no_credentials_and_no_login_is_exit_4(daemon: RunningDaemon, cache_home: Path) -> None:
    # No env token, an empty cache, and the daemon has no OAuth login in front of it.
    result = invoke(["whoami"], cli_env(cache_home, WQ_URL=daemon.url))
    assert_error(result, 4)
    assert "hint:" in result.stderr


def test_no_auth_sends_nothing(daemon: RunningDaemon, cache_home: Path) -> None:
    # The env token is valid, but --no-auth must not send it.
    result = invoke(["whoami", "--no-auth"], env(daemon, cache_home))
    assert_error(result, 4, daemon.url, "requires authentication")
    assert "--no-auth" in result.stderr


def test_a_rejected_env_token_is_exit_4_and_names_the_variable(
    daemon: RunningDaemon, cache_home: Path
) -> None:
    result = invoke(["whoami"], env(daemon, cache_home, "sha256~not-a-real-token"))
    assert_error(result, 4, "WQ_TOKEN")
    assert "sha256~not-a-real-token" not in result.stderr  # secrets are never printed
    # The server's reason is said (it was dropped: `expired` and `wrong audience` read alike).
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"wq: error: {daemon.url} rejected the token in WQ_TOKEN: "), first
    assert len(first) > len(f"wq: error: {daemon.url} rejected the token in WQ_TOKEN: "), first


def test_a_missing_permission_is_exit_4(daemon: RunningDaemon, cache_home: Path) -> None:
    item = daemon.submit(project=BLOCKED)
    result = invoke(["retry", "--id", item["id"]], env(daemon, cache_home, daemon.reader))
    assert result.code == 4, result
    assert "permission denied" in result.stderr and "Traceback" not in result.stderr


def test_a_conflict_is_exit_5(daemon: RunningDaemon, cache_home: Path) -> None:
    item = daemon.submit(project=BLOCKED)  # active: nothing to retry
    result = invoke(["retry", item["id"]], env(daemon, cache_home))
    assert result.code == 5, result
    assert "conflict" in result.stderr


def test_retry_of_several_ids_reports_each(daemon: RunningDaemon, cache_home: Path) -> None:
    item = daemon.submit(project=BLOCKED)
    missing = str(uuid.uuid4())
    result = invoke(["retry", "--id", missing, "--id", item["id"]], env(daemon, cache_home))
    assert result.code == 3, result  # the first failure decides
    assert missing in result.stderr and item["id"] in result.stderr
    assert "2 of 2 retries failed" in result.stderr


def test_cancel_of_several_ids_reports_each_and_prints_the_rest(
    daemon: RunningDaemon, cache_home: Path
) -> None:
    item = daemon.submit(project=BLOCKED)  # queued: cancelled at once
    missing = str(uuid.uuid4())
    result = invoke(["cancel", "--id", missing, item["id"], "-o", "json"], env(daemon, cache_home))
    assert result.code == 3, result
    assert f"wq: error: {missing}: " in result.stderr
    assert "1 of 2 cancels failed" in result.stderr
    (answer,) = json.loads(result.stdout)
    assert answer["item"]["id"] == item["id"] and answer["item"]["phase"] == "cancelled"


def test_an_item_named_twice_is_acted_on_once(daemon: RunningDaemon, cache_home: Path) -> None:
    # The second cancel (or retry) of one item used to fail as a conflict (exit 5).
    item_id = daemon.submit(project=BLOCKED)["id"]  # queued: cancelled at once
    cancelled = invoke(["cancel", "--id", item_id, "--id", item_id], env(daemon, cache_home))
    assert (cancelled.code, cancelled.stderr) == (0, ""), cancelled
    assert cancelled.stdout == f"cancelled {item_id}: cancelled\n"
    # A short id and the whole one name the same item too.
    retried = invoke(["retry", item_id[:8], "--id", item_id, "--json"], env(daemon, cache_home))
    assert (retried.code, retried.stderr) == (0, ""), retried
    assert [answer["id"] for answer in retried.json()] == [item_id]
    # Its failure reads as the failure of one id: one line, no count of one.
    refused = invoke(["retry", item_id[:8], "--id", item_id], env(daemon, cache_home))
    assert refused.code == 5, refused
    (line,) = refused.stderr.splitlines()
    assert line.startswith("wq: error: conflict: ") and item_id in line, line
