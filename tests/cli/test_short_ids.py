"""Short ids (the TUI's 8 hex digits, or any 6 or more) wherever the CLI takes an id:
resolved by the server; several matches are a usage error listing them."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert, select

from tests.cli.daemon import BLOCKED, RunningDaemon, base_env, cli_env, free_port, invoke, run
from wq.engine.db import make_engine
from wq.engine.models import WorkItem
from wq.types.mr.models import MrItem


def env(daemon: RunningDaemon, cache_home: Path) -> dict[str, str | None]:
    return cli_env(cache_home, WQ_URL=daemon.url, WQ_TOKEN=daemon.admin)


def twins(daemon: RunningDaemon, item_id: str, *new_ids: str) -> None:
    """Copies of a submitted item under other ids, cancelled (so that nothing works on
    them): the only way to have ids that share a prefix."""
    engine = make_engine(daemon.database_url, pool_size=1)
    try:
        with engine.begin() as conn:
            for table in (WorkItem.__table__, MrItem.__table__):
                found = conn.execute(select(table).where(table.c.id == uuid.UUID(item_id))).one()
                row: dict[str, Any] = dict(found._mapping)
                for new_id in new_ids:
                    copy = {**row, "id": uuid.UUID(new_id)}
                    if table is WorkItem.__table__:
                        copy.update(phase="cancelled", admission="done", idempotency_key=None)
                    conn.execute(insert(table).values(copy))
    finally:
        engine.dispose()


def test_a_short_id_names_one_item_for_status_retry_and_cancel(
    daemon: RunningDaemon, cache_home: Path
) -> None:
    item = daemon.submit(project=BLOCKED)
    short = item["id"][:8]  # as the TUI shows it
    shown = invoke(["status", "--id", short, "--json"], env(daemon, cache_home))
    assert shown.code == 0, shown
    assert shown.json()["id"] == item["id"]
    cancelled = invoke(["cancel", short.upper()], env(daemon, cache_home))
    assert cancelled.code == 0, cancelled
    assert cancelled.stdout == f"cancelled {item['id']}: cancelled\n"
    retried = invoke(["retry", "--id", item["id"][:6]], env(daemon, cache_home))
    assert retried.code == 0, retried
    assert retried.stdout.startswith(f"retried {item['id']}: active")


def test_a_prefix_of_several_items_lists_them_and_exits_2(
    daemon: RunningDaemon, cache_home: Path
) -> None:
    item = daemon.submit(project=BLOCKED)
    prefix = uuid.uuid4().hex[:6]
    others = [str(uuid.UUID(hex=f"{prefix}{n:02x}" + "0" * 24)) for n in range(3)]
    twins(daemon, item["id"], *others)
    for args in (["status", "--id", prefix], ["retry", prefix], ["cancel", "--id", prefix]):
        result = invoke(args, env(daemon, cache_home))
        assert result.code == 2, result
        first, hint = result.stderr.splitlines()
        assert first.startswith(f"wq: error: id {prefix} matches 3 items: "), result
        assert all(other in first for other in others)
        assert hint == "hint: give more of the id's digits"
        assert result.stdout == ""
    # One more digit tells them apart.
    one = invoke(["status", "--id", others[1][:8], "--json"], env(daemon, cache_home))
    assert one.code == 0, one
    assert one.json()["id"] == others[1]


def test_a_short_id_of_no_item_is_not_found(daemon: RunningDaemon, cache_home: Path) -> None:
    prefix = uuid.uuid4().hex[:10]
    for args in (["status", "--id", prefix], ["retry", prefix]):
        result = invoke(args, env(daemon, cache_home))
        assert result.code == 3, result
        assert result.stderr == f"wq: error: not found: no work item id starts with {prefix}\n"


def test_a_short_id_through_the_console_script(daemon: RunningDaemon, tmp_path: Path) -> None:
    item = daemon.submit(project=BLOCKED)
    result = run(
        ["status", "--id", item["id"][:8], "-o", "yaml"],
        base_env(tmp_path, WQ_URL=daemon.url, WQ_TOKEN=daemon.admin),
        tmp_path,
    )
    assert result.code == 0, result
    assert f"id: {item['id']}" in result.stdout


@pytest.mark.parametrize("value", ["abcde", "abc-de", "abcdeg", "0" * 33, "2f6c1a2b!"])
def test_fewer_than_six_hex_digits_or_others_are_a_usage_error_before_any_request(
    cache_home: Path, value: str
) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nobody there: a request would exit 1
    for args in (["status", "--id", value], ["retry", value], ["cancel", "--id", value]):
        result = invoke([*args, "--url", url], cli_env(cache_home, WQ_TOKEN="t"))
        assert result.code == 2, result
        assert result.stderr.startswith(f"wq: error: {value!r} is not an item id"), result
