"""Shell completion of option values, through the installed `wq` script as a shell calls it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.cli.daemon import PROJECT, RunningDaemon, base_env, free_port

WQ = str(Path(sys.executable).parent / "wq")


def complete(words: str, root: Path, **env: str) -> list[str]:
    """What bash would offer for the last word of `words` (typer's bash protocol)."""
    parts = words.split(" ")
    proc = subprocess.run(
        [WQ],
        env=base_env(
            root,
            _WQ_COMPLETE="complete_bash",
            COMP_WORDS=words,
            COMP_CWORD=str(len(parts) - 1),
            **env,
        ),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    return proc.stdout.split()


def test_fixed_choices_complete_without_a_server(tmp_path: Path) -> None:
    unreachable = f"http://127.0.0.1:{free_port()}"
    assert complete("wq status --phase c", tmp_path, WQ_URL=unreachable) == [
        "cancelled",
        "completed",
    ]
    assert complete("wq status --admission ", tmp_path, WQ_URL=unreachable) == [
        "admitted",
        "done",
        "idle",
        "queued",
    ]


def test_projects_types_and_ids_come_from_the_server(daemon: RunningDaemon, tmp_path: Path) -> None:
    item = daemon.submit()
    env = {"WQ_URL": daemon.url, "WQ_TOKEN": daemon.admin}
    assert PROJECT in complete("wq pools --project ", tmp_path, **env)
    assert complete(f"wq queue --project {PROJECT[:3]}", tmp_path, **env) == [PROJECT]
    assert "mr" in complete("wq status --type ", tmp_path, **env)
    assert item["id"] in complete("wq status --id ", tmp_path, **env)
    assert complete(f"wq retry {item['id'][:6]}", tmp_path, **env) == [item["id"]]


def test_an_unreachable_server_offers_nothing_and_prints_no_error(tmp_path: Path) -> None:
    unreachable = f"http://127.0.0.1:{free_port()}"
    assert complete("wq status --project ", tmp_path, WQ_URL=unreachable, WQ_TOKEN="x") == []


def test_completion_never_logs_in(daemon: RunningDaemon, tmp_path: Path) -> None:
    # No token in the environment or the cache: asking the user for a login while they
    # press TAB would be worse than offering nothing.
    assert complete("wq status --project ", tmp_path, WQ_URL=daemon.url) == []
