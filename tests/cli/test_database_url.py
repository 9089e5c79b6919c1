"""A database URL wq cannot use is refused in one line naming where it came from.

`garbage` made SQLAlchemy raise while parsing, `mysql://` while importing a driver wq
does not ship: both were tracebacks from `wq db ...` and `wq daemon`, and `wq config
check` passed a file whose `database_url` a start then crashed on. No database is
opened here: each command is refused before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.daemon import Result, base_env, cli_env, invoke, run

SUPPORTED = "only postgresql:// and sqlite:// URLs are supported"

BAD_URLS = [
    ("garbage", "cannot be parsed"),
    ("mysql://x@y/z", "mysql:// is not supported"),
    ("postgresql+asyncpg://wq@db/wq", "postgresql+asyncpg:// is not supported"),
    ("postgresql://wq@db:port/wq", "cannot be parsed"),
]
# A SQLite URL that names no file: the daemon's pool cannot share an in-memory database
# between its threads (a traceback from every command), and what it held would be lost.
NOT_A_FILE = [
    ("sqlite://", "must be a file"),
    ("sqlite:///", "must be a file"),
    ("sqlite:///:memory:", "must be a file"),
    ("sqlite:///%00", "holds a NUL character"),
]


def assert_one_line(result: Result, *words: str) -> None:
    assert result.code == 1, result
    assert "Traceback" not in result.stderr, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("wq: error: "), result
    for word in words:
        assert word in lines[0], result


@pytest.mark.parametrize(("url", "said"), BAD_URLS)
@pytest.mark.parametrize("command", [["db", "current"], ["db", "migrate"]])
@pytest.mark.parametrize("variable", ["WQ_DATABASE_URL", "DATABASE_URL"])
def test_a_bad_database_url_in_the_environment_is_named(
    variable: str, command: list[str], url: str, said: str, cache_home: Path
) -> None:
    result = invoke(command, cli_env(cache_home, **{variable: url}))
    assert_one_line(result, f"environment variable {variable}: ", said, SUPPORTED)


@pytest.mark.parametrize(("url", "said"), NOT_A_FILE)
def test_a_sqlite_url_without_a_file_is_refused(url: str, said: str, cache_home: Path) -> None:
    for command in (["db", "current"], ["db", "migrate"]):
        result = invoke(command, cli_env(cache_home, WQ_DATABASE_URL=url))
        assert_one_line(result, "environment variable WQ_DATABASE_URL: ", said)


@pytest.mark.parametrize(("url", "said"), BAD_URLS + NOT_A_FILE)
def test_config_check_refuses_a_bad_database_url(
    url: str, said: str, tmp_path: Path, cache_home: Path
) -> None:
    config = tmp_path / "wq.yml"
    config.write_text(f'database_url: "{url}"\n')
    line = f"config {config}: database_url: "
    assert_one_line(invoke(["config", "check", str(config)], cli_env(cache_home)), line, said)
    assert_one_line(invoke(["db", "current", "-c", str(config)], cli_env(cache_home)), line)


def test_a_password_in_a_refused_url_is_not_shown(cache_home: Path) -> None:
    result = invoke(["db", "current"], cli_env(cache_home, DATABASE_URL="mysql://wq:s3cret@db/wq"))
    assert_one_line(result, "mysql://")
    assert "s3cret" not in result.stderr


def test_the_daemon_refuses_a_bad_database_url_at_once(tmp_path: Path) -> None:
    config = tmp_path / "wq.yml"
    config.write_text('database_url: "garbage"\n')
    from_file = run(["daemon", "-c", str(config), "--port", "0"], base_env(tmp_path), tmp_path)
    assert_one_line(from_file, f"config {config}: database_url: cannot be parsed")
    env = base_env(tmp_path, WQ_DATABASE_URL="mysql://x@y/z")
    from_env = run(["daemon", "--port", "0"], env, tmp_path)
    assert_one_line(from_env, "environment variable WQ_DATABASE_URL: mysql://", SUPPORTED)


def test_db_current_on_a_missing_sqlite_file_says_so_and_creates_nothing(
    tmp_path: Path, cache_home: Path
) -> None:
    # It read an empty database into being (and its directories), then called it outdated.
    path = tmp_path / "nx" / "a" / "b" / "x.db"
    env = cli_env(cache_home, WQ_DATABASE_URL=f"sqlite:///{path}")
    assert_one_line(invoke(["db", "current"], env), f"no database at {path}", "wq db migrate")
    assert not (tmp_path / "nx").exists()
    # Creating it is `wq db migrate`'s job.
    migrated = invoke(["db", "migrate"], env)
    assert migrated.code == 0, migrated
    assert "migrated from empty" in migrated.stdout
    current = invoke(["db", "current"], env)
    assert current.code == 0 and "up to date" in current.stdout, current
