"""The queues wq is compared with, each draining the same number of no-op jobs.

A raw `FOR UPDATE SKIP LOCKED` loop with psycopg 3 (DESIGN's baseline), pgqueuer (with
asyncpg or psycopg) and procrastinate; a peer that is not installed is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg
from databases import libpq_url
from measures import checkpoint

RAW_TABLE = "wq_bench_raw_jobs"
RAW_NAME = "raw SKIP LOCKED (psycopg 3)"


@dataclass
class PeerResult:
    """One comparison queue: jobs drained per second, or why it was skipped."""

    name: str
    jobs: int
    seconds: float | None = None
    jobs_per_second: float | None = None
    skipped: str | None = None
    rounds: list[float] = field(default_factory=list)  # jobs/s of each round, if several


def fastest_of(results: list[PeerResult]) -> PeerResult:
    """One peer's rounds as one result: its fastest round, with every round's rate (a
    peer whose speed varies between runs is compared with its best)."""
    ran = [result for result in results if result.jobs_per_second]
    if not ran:
        return results[0]
    best = max(ran, key=lambda result: result.jobs_per_second or 0.0)
    rates = [result.jobs_per_second or 0.0 for result in ran]
    return replace(best, rounds=rates if len(results) > 1 else [])


def run_raw_baseline(url: str, jobs: int, threads: int) -> PeerResult:
    """DESIGN's floor: one row claimed (SKIP LOCKED) and completed per round trip pair."""
    dsn = libpq_url(url)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {RAW_TABLE}")
        conn.execute(
            f"CREATE TABLE {RAW_TABLE} (id bigserial PRIMARY KEY, "
            "status text NOT NULL DEFAULT 'queued', payload jsonb NOT NULL DEFAULT '{}', "
            "created_at timestamptz NOT NULL DEFAULT now(), done_at timestamptz)"
        )
        conn.execute(f"CREATE INDEX ON {RAW_TABLE} (id) WHERE status = 'queued'")
        conn.execute(
            f"INSERT INTO {RAW_TABLE} (payload) SELECT '{{}}' FROM generate_series(1, %s)",
            (jobs,),
        )
        conn.execute(f"ANALYZE {RAW_TABLE}")
    checkpoint(url)
    claim = (
        f"UPDATE {RAW_TABLE} SET status = 'running' WHERE id = ("
        f"SELECT id FROM {RAW_TABLE} WHERE status = 'queued' ORDER BY id "
        "LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id"
    )
    complete = f"UPDATE {RAW_TABLE} SET status = 'done', done_at = now() WHERE id = %s"
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True, prepare_threshold=0) as conn:
                barrier.wait()
                while True:
                    row = conn.execute(claim).fetchone()
                    if row is None:
                        return
                    conn.execute(complete, row)
        except BaseException as err:  # reported after the run
            errors.append(err)
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.abort()

    pool = [threading.Thread(target=worker, name=f"raw-{n}") for n in range(threads)]
    for thread in pool:
        thread.start()
    barrier.wait()
    started = time.monotonic()
    for thread in pool:
        thread.join()
    seconds = time.monotonic() - started
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(f"SELECT count(*) FROM {RAW_TABLE} WHERE status = 'done'").fetchone()
        conn.execute(f"DROP TABLE {RAW_TABLE}")
    done = int(row[0]) if row else 0
    if errors or done != jobs:
        failure = f"failed: {errors[:1]}, {done} of {jobs} done"
        return PeerResult(RAW_NAME, jobs, skipped=failure)
    return PeerResult(RAW_NAME, jobs, seconds, jobs / seconds)


def run_pgqueuer(url: str, jobs: int, concurrency: int, driver: str) -> PeerResult:
    """pgqueuer draining pre-enqueued no-op jobs (`mode=drain`); skipped when absent."""
    name = f"pgqueuer ({driver})"
    needs = ["pgqueuer", driver]
    missing = [module for module in needs if importlib.util.find_spec(module) is None]
    if missing:
        return PeerResult(name, jobs, skipped=f"not installed (pip install {' '.join(needs)})")
    try:
        return asyncio.run(_pgqueuer(url, jobs, concurrency, driver, name))
    except Exception as err:
        return PeerResult(name, jobs, skipped=f"failed: {type(err).__name__}: {err}")


async def _pgqueuer(url: str, jobs: int, concurrency: int, driver: str, name: str) -> PeerResult:
    from pgqueuer import QueueManager
    from pgqueuer.models import Job
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    dsn = libpq_url(url)

    @contextlib.asynccontextmanager
    async def connect() -> Any:
        if driver == "asyncpg":
            import asyncpg
            from pgqueuer.db import AsyncpgDriver

            conn = await asyncpg.connect(dsn)
            try:
                yield AsyncpgDriver(conn)
            finally:
                await conn.close()
        else:
            from pgqueuer.db import PsycopgDriver

            aconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
            try:
                yield PsycopgDriver(aconn)
            finally:
                await aconn.close()

    async with connect() as setup:
        queries = Queries(setup)
        with contextlib.suppress(Exception):
            await queries.uninstall()
        await queries.install()
        for start in range(0, jobs, 1000):
            size = min(1000, jobs - start)
            await queries.enqueue(["noop"] * size, [None] * size, [0] * size)
    checkpoint(url)
    done = 0
    try:
        async with connect() as worker:
            manager = QueueManager(Queries(worker))

            @manager.entrypoint("noop")
            async def noop(job: Job) -> None:
                nonlocal done
                done += 1

            started = time.monotonic()
            await asyncio.wait_for(
                manager.run(batch_size=concurrency, mode=QueueExecutionMode.drain), timeout=900
            )
            seconds = time.monotonic() - started
    finally:
        async with connect() as teardown:
            await Queries(teardown).uninstall()
    if done != jobs:
        return PeerResult(name, jobs, skipped=f"ran {done} of {jobs} jobs")
    return PeerResult(name, jobs, seconds, jobs / seconds)


def run_pgqueuer_asyncpg(url: str, jobs: int, concurrency: int) -> PeerResult:
    """pgqueuer with its asyncpg driver."""
    return run_pgqueuer(url, jobs, concurrency, "asyncpg")


def run_pgqueuer_psycopg(url: str, jobs: int, concurrency: int) -> PeerResult:
    """pgqueuer with its psycopg 3 driver (the driver wq uses)."""
    return run_pgqueuer(url, jobs, concurrency, "psycopg")


PROCRASTINATE_SCHEMA = "wq_bench_procrastinate"


def run_procrastinate(url: str, jobs: int, concurrency: int) -> PeerResult:
    """procrastinate's async worker (`wait=False`) draining pre-deferred no-op jobs."""
    name = "procrastinate (psycopg)"
    if importlib.util.find_spec("procrastinate") is None:
        return PeerResult(name, jobs, skipped="not installed (pip install procrastinate)")
    dsn = libpq_url(url)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {PROCRASTINATE_SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {PROCRASTINATE_SCHEMA}")
    try:
        return asyncio.run(_procrastinate(dsn, jobs, concurrency, name))
    except Exception as err:
        return PeerResult(name, jobs, skipped=f"failed: {type(err).__name__}: {err}")
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {PROCRASTINATE_SCHEMA} CASCADE")


async def _procrastinate(dsn: str, jobs: int, concurrency: int, name: str) -> PeerResult:
    import procrastinate

    logging.getLogger("procrastinate").setLevel(logging.ERROR)
    connector = procrastinate.PsycopgConnector(
        conninfo=dsn,
        kwargs={"options": f"-c search_path={PROCRASTINATE_SCHEMA}"},
        max_size=concurrency + 2,
    )
    app = procrastinate.App(connector=connector)
    done = 0

    @app.task(name="noop")
    async def noop() -> None:
        nonlocal done
        done += 1

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        for start in range(0, jobs, 1000):
            await noop.batch_defer_async(*({} for _ in range(min(1000, jobs - start))))
        started = time.monotonic()
        await asyncio.wait_for(
            app.run_worker_async(
                concurrency=concurrency, wait=False, install_signal_handlers=False
            ),
            timeout=900,
        )
        seconds = time.monotonic() - started
    if done != jobs:
        return PeerResult(name, jobs, skipped=f"ran {done} of {jobs} jobs")
    return PeerResult(name, jobs, seconds, jobs / seconds)


PEERS: dict[str, Callable[[str, int, int], PeerResult]] = {
    "raw": run_raw_baseline,
    "pgqueuer": run_pgqueuer_asyncpg,
    "pgqueuer-psycopg": run_pgqueuer_psycopg,
    "procrastinate": run_procrastinate,
}
