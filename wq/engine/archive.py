"""Audit archival to S3: one gzipped JSON object per entry, for Athena.

The `audit_log` row is the source of truth and the archiver's queue: a row is
archived when `archived_at` is set. The archiver thread claims a bounded batch of
unarchived rows (oldest first; `FOR UPDATE SKIP LOCKED` and a claim lease on
PostgreSQL, so replicas never take the same rows) into a queue that a few upload
threads drain outside any transaction (memory is bounded by the batch size), marks
the uploaded ones archived and hands the others back.
It is woken when audit rows commit and polls otherwise, so rows a restart, an
outage or a dead replica left behind are picked up; an outage only delays it
(exponential backoff, one warning) and never touches the request or worker paths.

Keys: `{prefix}/YYYY/MM/DD/HH/MM/{timestamp}-{id}#{work_item_id}::{event_type}.json.gz`
(UTC; `none` for entries without an item). The row id makes each key unique, so an
entry uploaded twice (a re-archive, a lease that ran out mid-upload) overwrites the
same object with the same bytes and is never counted twice.
"""

from __future__ import annotations

import gzip
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row, and_, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from wq.engine import jsontext
from wq.engine.audit import document, on_committed
from wq.engine.config import AuditConfig
from wq.engine.metrics import Metrics, metrics_of
from wq.engine.models import AuditEntry, utcnow

log = logging.getLogger(__name__)

CLAIM_LEASE = timedelta(minutes=2)  # an upload batch that takes longer is taken over
IDLE_POLL_SECONDS = 5.0  # without wake-ups: rows of other replicas, expired claims
MAX_BACKOFF_SECONDS = 60.0
_COLUMNS = (
    AuditEntry.id,
    AuditEntry.at,
    AuditEntry.event_type,
    AuditEntry.work_item_id,
    AuditEntry.actor,
    AuditEntry.old_state,
    AuditEntry.new_state,
    AuditEntry.trigger,
    AuditEntry.extra,
)


def entry_document(row: Row[Any]) -> dict[str, Any]:
    """The archived JSON document of one audit_log row."""
    return document(
        {
            "at": row.at,
            "event_type": row.event_type,
            "work_item_id": row.work_item_id,
            "actor": row.actor,
            "old_state": row.old_state,
            "new_state": row.new_state,
            "trigger": row.trigger,
            "metadata": row.extra,
        },
        row.id,
    )


def object_key(prefix: str, entry: dict[str, Any], at: datetime) -> str:
    """Where an entry's object goes: the date path, then a key unique to the row."""
    item = entry.get("work_item_id") or "none"
    name = f"{entry['timestamp']}-{entry['id']}#{item}::{entry['event_type']}.json.gz"
    path = f"{at:%Y/%m/%d/%H/%M}/{name}"
    return f"{prefix}/{path}" if prefix else path


def encode(entry: dict[str, Any]) -> bytes:
    """One JSON line, gzipped (mtime 0: the same entry always gives the same bytes)."""
    line = jsontext.dumps(entry, default=str, sort_keys=True) + "\n"
    return gzip.compress(line.encode(), mtime=0)


class S3Archive:
    """Writes entries to one bucket under one prefix with boto3.

    The client follows boto3's usual configuration (credentials chain, region,
    `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`), with bounded timeouts and retries so an
    outage fails an upload in seconds instead of hanging a thread.
    """

    def __init__(self, bucket: str, prefix: str, *, client: Any = None, threads: int = 4) -> None:
        self.bucket = bucket
        self.prefix = prefix
        if client is None:
            import boto3
            from botocore.config import Config as BotoConfig

            client = boto3.client(
                "s3",
                config=BotoConfig(
                    connect_timeout=5,
                    read_timeout=20,
                    retries={"mode": "standard", "max_attempts": 3},
                    max_pool_connections=threads + 2,
                ),
            )
        self.client = client

    @classmethod
    def from_config(cls, audit: AuditConfig, *, client: Any = None) -> S3Archive:
        """The archive a config names (its bucket must be set)."""
        if audit.s3_bucket is None:
            raise ValueError("audit.s3_bucket is not set")
        return cls(audit.s3_bucket, audit.s3_prefix, client=client, threads=audit.s3_upload_threads)

    @property
    def location(self) -> str:
        """`s3://bucket/prefix/`, for log lines."""
        return f"s3://{self.bucket}/{self.prefix + '/' if self.prefix else ''}"

    def put(self, row: Row[Any]) -> str:
        """Upload one row's entry; return its key (raises what boto3 raises)."""
        entry = entry_document(row)
        key = object_key(self.prefix, entry, row.at)
        self.client.put_object(
            Bucket=self.bucket,
            Key=key,
            Body=encode(entry),
            ContentType="application/json",
            ContentEncoding="gzip",
        )
        return key


def missing_credentials(audit: AuditConfig) -> str | None:
    """Why archival cannot work at all (no AWS credentials anywhere), else None.

    Asked once at start, so that a daemon told to archive refuses instead of warning
    forever; boto3 resolves the same chain its uploads will use.
    """
    if not audit.archiving:
        return None
    import boto3

    if boto3.session.Session().get_credentials() is None:
        return (
            f"audit.s3_bucket (or WQ_AUDIT_S3_BUCKET) names bucket {audit.s3_bucket}, but boto3 "
            "finds no AWS credentials (AWS_ACCESS_KEY_ID, a profile, a web identity or an "
            "instance role)"
        )
    return None


@dataclass
class BatchResult:
    """What one round of uploads did."""

    claimed: int = 0
    uploaded: int = 0
    failed: int = 0
    error: str | None = None  # the first failure's message


def claim(session: Session, *, limit: int, now: datetime) -> list[Row[Any]]:
    """Claim up to `limit` unarchived rows nobody else holds, oldest first."""
    free = select(AuditEntry.id).where(
        AuditEntry.archived_at.is_(None),
        or_(AuditEntry.archive_claimed_until.is_(None), AuditEntry.archive_claimed_until < now),
    )
    free = free.order_by(AuditEntry.id).limit(limit)
    if session.get_bind().dialect.name == "postgresql":
        # Replicas skip each other's rows instead of queueing behind them.
        free = free.with_for_update(skip_locked=True)
    # SQLite: the session's write transaction (BEGIN IMMEDIATE) already serializes.
    rows = session.execute(
        update(AuditEntry)
        .where(AuditEntry.id.in_(free.scalar_subquery()))
        .values(archive_claimed_until=now + CLAIM_LEASE)
        .returning(*_COLUMNS)
        .execution_options(synchronize_session=False)
    ).all()
    return sorted(rows, key=lambda row: row.id)


def settle_claims(
    session: Session, *, archived: Sequence[int], failed: Sequence[int], now: datetime
) -> None:
    """Mark uploaded rows archived; hand failed ones back for the next attempt."""
    if archived:
        session.execute(
            update(AuditEntry)
            .where(AuditEntry.id.in_(archived))
            .values(archived_at=now, archive_claimed_until=None)
            .execution_options(synchronize_session=False)
        )
    if failed:
        session.execute(
            update(AuditEntry)
            .where(AuditEntry.id.in_(failed), AuditEntry.archived_at.is_(None))
            .values(archive_claimed_until=None)
            .execution_options(synchronize_session=False)
        )


def upload_all(
    archive: S3Archive, rows: Sequence[Row[Any]], threads: int, metrics: Metrics
) -> tuple[list[int], list[int], str | None]:
    """Upload rows from a queue on up to `threads` threads: (uploaded, failed, first error).

    The threads are daemon threads, so an upload that hangs never holds up the exit
    of the process (its row stays claimed and is retried once the claim lapses).
    """
    work: queue.SimpleQueue[Row[Any]] = queue.SimpleQueue()
    for row in rows:
        work.put(row)
    errors: dict[int, str | None] = {}

    def drain() -> None:
        while True:
            try:
                row = work.get_nowait()
            except queue.Empty:
                return
            try:
                archive.put(row)
            except Exception as err:  # boto3/botocore errors, and any other: retried later
                errors[row.id] = f"{type(err).__name__}: {err}"
            else:
                errors[row.id] = None

    uploaders = [
        threading.Thread(target=drain, name=f"wq-audit-upload-{n}", daemon=True)
        for n in range(min(threads, len(rows)))
    ]
    for thread in uploaders:
        thread.start()
    for thread in uploaders:
        thread.join()
    uploaded = [row.id for row in rows if row.id in errors and errors[row.id] is None]
    failed = [row.id for row in rows if errors.get(row.id) is not None]
    first_error = next((errors[row.id] for row in rows if errors.get(row.id)), None)
    metrics.audit_s3_uploads.inc(len(uploaded))
    metrics.audit_s3_upload_failures.inc(len(failed))
    return uploaded, failed, first_error


class AuditArchiver:
    """The background uploader of one process: claim, upload, mark; back off on errors."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        archive: S3Archive,
        *,
        batch_size: int = 100,
        threads: int = 4,
        clock: Callable[[], datetime] = utcnow,
        idle_seconds: float = IDLE_POLL_SECONDS,
        max_backoff_seconds: float = MAX_BACKOFF_SECONDS,
    ) -> None:
        self.sessions = sessions
        self.archive = archive
        self.batch_size = batch_size
        self.clock = clock
        self.idle_seconds = idle_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.threads = threads
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._remove_listener: Callable[[], None] | None = None
        self._failing_since: float | None = None

    def start(self) -> None:
        """Start the uploader thread; it wakes whenever audit rows commit in this process."""
        self._remove_listener = on_committed(self._wake.set)
        self._thread = threading.Thread(target=self._loop, name="wq-audit-archiver", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the current round, waiting for it at most `timeout` seconds.

        A round still uploading then is abandoned: its rows stay claimed until the claim
        lapses and are uploaded again by whichever archiver runs next.
        """
        self._stopping.set()
        self._wake.set()
        if self._remove_listener is not None:
            self._remove_listener()
            self._remove_listener = None
        if self._thread is not None:
            self._thread.join(timeout)

    def archive_once(self) -> BatchResult:
        """One round: claim a batch, upload it, settle the claims."""
        with self.sessions.begin() as session:
            rows = claim(session, limit=self.batch_size, now=self.clock())
        if not rows:
            return BatchResult()
        uploaded, failed, error = upload_all(
            self.archive, rows, self.threads, metrics_of(self.sessions)
        )
        with self.sessions.begin() as session:
            settle_claims(session, archived=uploaded, failed=failed, now=self.clock())
        return BatchResult(len(rows), len(uploaded), len(failed), error)

    def _loop(self) -> None:
        backoff = 0.0
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                result = self.archive_once()
            except Exception as err:  # the database is unreachable: try again later
                result = BatchResult(error=f"database: {type(err).__name__}: {err}", failed=1)
            if result.failed and not result.uploaded:
                backoff = min(self.max_backoff_seconds, backoff * 2 or 1.0)
                self._report_failure(result, backoff)
                self._stopping.wait(backoff)
                continue
            if self._failing_since is not None:
                log.info(
                    "audit archive to %s works again after %.0f s",
                    self.archive.location,
                    time.monotonic() - self._failing_since,
                )
                self._failing_since = None
            backoff = 0.0
            if result.claimed < self.batch_size:
                self._wake.wait(self.idle_seconds)

    def _report_failure(self, result: BatchResult, backoff: float) -> None:
        # One warning when an outage starts, then one a minute at most.
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            log.warning(
                "cannot archive audit entries to %s (%s); they stay in the database and "
                "are retried, next in %g s",
                self.archive.location,
                result.error,
                backoff,
            )
        elif backoff >= self.max_backoff_seconds:
            log.warning(
                "audit archive to %s still failing (%s)", self.archive.location, result.error
            )


def rows_between(
    sessions: sessionmaker[Session], since: datetime, until: datetime | None, *, page: int = 500
) -> Iterator[list[Row[Any]]]:
    """Every row with `since <= at < until`, in pages by id (each page its own read)."""
    after = 0
    while True:
        conditions = [AuditEntry.at >= since, AuditEntry.id > after]
        if until is not None:
            conditions.append(AuditEntry.at < until)
        with sessions() as session:
            rows = session.execute(
                select(*_COLUMNS).where(and_(*conditions)).order_by(AuditEntry.id).limit(page)
            ).all()
        if not rows:
            return
        yield list(rows)
        after = rows[-1].id


def rearchive(
    sessions: sessionmaker[Session],
    archive: S3Archive,
    since: datetime,
    until: datetime | None = None,
    *,
    threads: int = 4,
    clock: Callable[[], datetime] = utcnow,
) -> BatchResult:
    """Upload every entry still in the database from `since` (to `until`), archived or not.

    The same entry gives the same key and bytes, so re-archiving never duplicates.
    """
    total = BatchResult()
    for rows in rows_between(sessions, since, until):
        uploaded, failed, error = upload_all(archive, rows, threads, metrics_of(sessions))
        with sessions.begin() as session:
            settle_claims(session, archived=uploaded, failed=[], now=clock())
        total.claimed += len(rows)
        total.uploaded += len(uploaded)
        total.failed += len(failed)
        total.error = total.error or error
    return total
