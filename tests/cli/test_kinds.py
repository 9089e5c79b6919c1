"""`--kind` of `wq retry` and `wq cancel` against the embedded daemon (kinds `echo`,
`sleep`, `count`): a kind the server does not run is refused, not reported as
"no items match" (exit 0), which read as if there were no such tasks to act on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_logs import embedded
from tests.daemon.test_daemon_process import (  # noqa: F401 - fixtures
    Daemon,
    daemons,
    no_system_config,
    run_wq,
)
from tests.support.runs import cancel_runs_under


@pytest.fixture(autouse=True)
def no_run_outlives_its_test(tmp_path: Path) -> Iterator[None]:
    """The sleep this module starts would outlive its daemon."""
    yield
    cancel_runs_under(tmp_path)


@pytest.mark.usefixtures("no_system_config")
def test_an_unknown_kind_is_refused_and_a_known_one_selects(
    daemons: list[Daemon],  # noqa: F811
    tmp_path: Path,
) -> None:
    _, http, env = embedded(daemons, tmp_path)
    for action in ("retry", "cancel"):
        refused = run_wq(action, "--kind", "bogus", "--yes", env=env, cwd=tmp_path)
        assert refused.returncode == 2 and refused.stdout == "", refused
        error, hint = refused.stderr.splitlines()
        assert error == (
            "wq: error: --kind: 'bogus' is not a task kind this server knows (count, echo, sleep)"
        )
        assert hint.startswith("hint: see ") and hint.endswith(f" {action} --help")
        none = run_wq(action, "--kind", "echo", "--yes", env=env, cwd=tmp_path)
        assert (none.returncode, none.stdout, none.stderr) == (0, "", "no items match\n"), none
    body = {"project": "demo", "kind": "sleep", "payload": {"seconds": 60}}
    created = http.post("/api/work-items/task", json=body)
    assert created.status_code == 201, created.text
    item_id = created.json()["item"]["id"]
    cancelled = run_wq("cancel", "--kind", "sleep", "--yes", env=env, cwd=tmp_path)
    assert cancelled.returncode == 0, cancelled.stderr
    assert item_id in cancelled.stdout
