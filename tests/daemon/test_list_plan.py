"""A page of `GET /api/work-items` reads its own rows, however many items exist.

The list is newest first with a `(created_at, id)` cursor. Without an index in that
order PostgreSQL sorted every item for every page. A database of its own with 20,000
items (analyzed), the statement exactly as the endpoint sent it, custom and generic
plans; a short id's page (`id_prefix`) reads its range of the primary key. PostgreSQL
only (the plan is PostgreSQL's).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Select, text

from tests.conftest import make_config, throwaway_pg_database
from tests.support.chain import Behaviour, chain_registry
from tests.support.plans import Sent, capture, explain, scans, seq_scans
from wq.daemon.app import create_app
from wq.daemon.loop_reads import LoopReads
from wq.daemon.runtime import Runtime, build_runtime
from wq.engine import driver_reads, schema
from wq.engine.db import make_engine

pytestmark = pytest.mark.postgres

ITEMS = 20000
LIMIT = 50

FILL = f"""
INSERT INTO work_items (
    id, type, project, phase, attempts, admission, lane, autonomous, created_at, updated_at
)
SELECT gen_random_uuid(), 'chain', 'team/p' || (i % 50), 'active', 0, 'idle', 'normal',
    false, now() - make_interval(secs => i), now()
FROM generate_series(1, {ITEMS}) AS s(i)
"""


@pytest.fixture(scope="module")
def runtime() -> Iterator[Runtime]:
    with throwaway_pg_database("wq_listplan") as url:
        engine = make_engine(url, pool_size=1)
        schema.upgrade(engine)
        with engine.begin() as conn:
            conn.execute(text(FILL))
            conn.execute(text("ANALYZE work_items"))
        engine.dispose()
        built = build_runtime(make_config(url), registry=chain_registry(Behaviour()))
        try:
            yield built
        finally:
            built.engine.dispose()


def recording_loop_reads(monkeypatch: pytest.MonkeyPatch) -> list[Sent]:
    """The statements the list's reads send on the event loop (`LoopReads`), which
    skip SQLAlchemy's events: recorded as they are sent."""
    through_driver: list[Sent] = []
    awaited = LoopReads.fetch_all

    async def recorded(
        reads: LoopReads, statement: Select[Any], params: Mapping[str, Any]
    ) -> Sequence[Any]:
        through_driver.append(Sent(driver_reads.sql_of(statement, reads.dialect), dict(params)))
        return await awaited(reads, statement, params)

    monkeypatch.setattr(LoopReads, "fetch_all", recorded)
    return through_driver


def test_a_page_and_the_next_read_their_rows_not_every_item(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert runtime.local_tier is not None
    headers = {"Authorization": f"Bearer {runtime.local_tier.token}"}
    through_driver = recording_loop_reads(monkeypatch)
    with TestClient(create_app(runtime)) as client, capture(runtime.engine) as sent:
        first = client.get(f"/api/work-items?limit={LIMIT}", headers=headers)
        assert first.status_code == 200, first.text
        cursor = first.json()["next_cursor"]
        second = client.get(f"/api/work-items?limit={LIMIT}&cursor={cursor}", headers=headers)
        assert second.status_code == 200, second.text
    pages = [first.json()["items"], second.json()["items"]]
    assert [len(page) for page in pages] == [LIMIT, LIMIT]
    stamps = [item["created_at"] for page in pages for item in page]
    assert stamps == sorted(stamps, reverse=True) and len(set(stamps)) == 2 * LIMIT
    lists = [
        s
        for s in sent + through_driver
        if "FROM work_items" in s.statement and "LIMIT" in s.statement
    ]
    assert len(lists) == 2, [s.statement for s in sent]
    for number, statement in enumerate(lists):
        plan = explain(
            runtime.config.database_url,
            f"page{number}",
            statement.statement,
            dict(statement.parameters),
        )
        for kind, lines in (("custom", plan.custom), ("generic", plan.generic)):
            report = f"page {number + 1}, {kind} plan:\n" + "\n".join(lines)
            assert not seq_scans(lines), report
            assert sum(scan.read for scan in scans(lines)) <= 3 * LIMIT, report


def test_a_short_id_reads_its_range_of_the_primary_key(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert runtime.local_tier is not None
    headers = {"Authorization": f"Bearer {runtime.local_tier.token}"}
    through_driver = recording_loop_reads(monkeypatch)
    with TestClient(create_app(runtime)) as client, capture(runtime.engine) as sent:
        some = client.get("/api/work-items?limit=1", headers=headers).json()["items"][0]["id"]
        sent.clear()
        through_driver.clear()
        found = client.get(f"/api/work-items?id_prefix={some[:8]}", headers=headers)
        assert found.status_code == 200, found.text
    assert some in [item["id"] for item in found.json()["items"]]
    (statement,) = [
        s
        for s in sent + through_driver
        if "FROM work_items" in s.statement and "LIMIT" in s.statement
    ]
    plan = explain(
        runtime.config.database_url, "prefix", statement.statement, dict(statement.parameters)
    )
    for kind, lines in (("custom", plan.custom), ("generic", plan.generic)):
        report = f"{kind} plan:\n" + "\n".join(lines)
        assert not seq_scans(lines), report
        # Its range of the primary key, not every item in the list's order.
        assert "pk_work_items" in report and "ix_work_items_newest" not in report, report


def test_the_pools_read_their_partial_indexes_not_every_item(runtime: Runtime) -> None:
    assert runtime.local_tier is not None
    headers = {"Authorization": f"Bearer {runtime.local_tier.token}"}
    with runtime.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE work_items SET admission = CASE WHEN random() < 0.5 THEN 'queued'"
                " ELSE 'admitted' END, seq = 1 WHERE project = 'team/p7'"
            )
        )
        conn.execute(text("ANALYZE work_items"))
    with TestClient(create_app(runtime)) as client, capture(runtime.engine) as sent:
        response = client.get("/api/pools", headers=headers)
        assert response.status_code == 200, response.text
    assert [pool["project"] for pool in response.json()] == ["team/p7"]
    statements = [s for s in sent if "FROM work_items" in s.statement]
    assert len(statements) == 2  # the usage per admission state, the failed counts
    for number, statement in enumerate(statements):
        plan = explain(
            runtime.config.database_url,
            f"pools-{number}",
            statement.statement,
            dict(statement.parameters),
        )
        for kind, lines in (("custom", plan.custom), ("generic", plan.generic)):
            report = f"{kind} plan:\n" + "\n".join(lines)
            assert not seq_scans(lines), report


def test_the_failed_items_read_their_own_index_not_the_newest_ones(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Few items fail, and the newest are the active ones: walking the newest items
    for the failed ones read every newer item first (2.5x on scale.py's history)."""
    assert runtime.local_tier is not None
    headers = {"Authorization": f"Bearer {runtime.local_tier.token}"}
    with runtime.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE work_items SET phase = 'failed', admission = 'done' WHERE id IN"
                " (SELECT id FROM work_items ORDER BY created_at LIMIT 200)"
            )
        )
        conn.execute(text("ANALYZE work_items"))
    through_driver = recording_loop_reads(monkeypatch)
    with TestClient(create_app(runtime)) as client, capture(runtime.engine) as sent:
        found = client.get(f"/api/work-items?phase=failed&limit={LIMIT}", headers=headers)
        assert found.status_code == 200, found.text
    assert [item["phase"] for item in found.json()["items"]] == ["failed"] * LIMIT
    (statement,) = [
        s
        for s in sent + through_driver
        if "FROM work_items" in s.statement and "LIMIT" in s.statement
    ]
    plan = explain(
        runtime.config.database_url, "failed", statement.statement, dict(statement.parameters)
    )
    for kind, lines in (("custom", plan.custom), ("generic", plan.generic)):
        report = f"{kind} plan:\n" + "\n".join(lines)
        assert not seq_scans(lines), report
        assert "ix_work_items_failed_newest" in report, report
        assert sum(scan.read for scan in scans(lines)) <= 3 * LIMIT, report
