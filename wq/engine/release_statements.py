"""PostgreSQL: workers' releases under their lease fence, in one statement.

The items whose lease and stamp are still as their worker read them are released;
the audit rows of those items alone are written with them, and their wake-ups sent as
NOTIFYs, all by the statement (`release_fenced`). A worker's single item
(`wq.engine.releases.release_if_unchanged`) and a worker's group
(`wq.engine.finish_group`) both go this way.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import text
from sqlalchemy.orm import Session

from wq.engine import jsontext
from wq.engine.models.base import without_nul
from wq.engine.store import NOTIFY_CHANNEL
from wq.engine.wakeup import NO_HUB, NOTIFY_CHUNK_BYTES, SUBJECT_SEPARATOR, WAKEUP_KEY, Wakeup


class FencedRelease(NamedTuple):
    """One item to release on PostgreSQL under its fence, with what goes out with it:
    audit rows (`AuditRecord.row()`s) and signals to other replicas ((kind, subject)
    pairs), written and sent only if it matches."""

    item_id: uuid.UUID
    token: str
    read_stamp: int
    new_admission: str
    rows: list[dict[str, Any]]
    signals: list[tuple[str, str]]


def release_fenced(
    session: Session, releases: Sequence[FencedRelease], *, now: datetime
) -> set[uuid.UUID]:
    """PostgreSQL: release the items whose lease and stamp are still as read, write
    their rows and send their signals, in one statement; return the released ids.

    The released items' signals go out as `wakeup.payloads_of` puts them (one NOTIFY
    a kind, its subjects one a line), from the session's hub. Each list goes as one
    JSON document (no array of quoted texts to escape one by one).
    """
    wanted = [
        {
            "id": release.item_id,
            "token": release.token,
            "stamp": release.read_stamp,
            "admission": release.new_admission,
        }
        for release in releases
    ]
    rows = [
        {**row, "at": row["at"].isoformat(), "of": release.item_id}
        for release in releases
        for row in release.rows
    ]
    signals = [
        {"of": release.item_id, "kind": kind, "subject": subject}
        for release in releases
        for kind, subject in release.signals
    ]
    hub = session.info.get(WAKEUP_KEY)
    answer = (
        session.connection()  # the connection: no autoflush before it
        .execute(
            _RELEASE_PG,
            {
                "now": now,
                "wanted": _json(wanted),
                "rows": _json(rows),
                "channel": NOTIFY_CHANNEL,
                "origin": hub.origin if isinstance(hub, Wakeup) else NO_HUB,
                "signals": _json(signals),
                "separator": SUBJECT_SEPARATOR,
                "chunk_bytes": NOTIFY_CHUNK_BYTES,
            },
        )
        .one()
    )
    return set(answer.released or ())


def _json(value: Any) -> str:
    """JSON text PostgreSQL accepts: NUL, which its JSON refuses, replaced."""
    text = jsontext.dumps(value)
    return jsontext.dumps(without_nul(value)) if "\\u0000" in text else text


# The items still leased by their tokens and unchanged since read are released; the
# audit rows of those items alone are written, in their order, and their signals sent
# as `wakeup.payloads_of` groups them (a kind's subjects, one a line, in chunks). A row
# another transaction holds is not waited for (that would hold up every other item of
# a worker's group): it is left as if changed, and its item goes on alone.
_RELEASE_PG = text(
    """
WITH wanted AS MATERIALIZED (
    SELECT * FROM jsonb_to_recordset(CAST(:wanted AS jsonb))
        AS wanted(id uuid, token text, stamp bigint, admission text)
), free AS MATERIALIZED (
    SELECT item.id FROM work_items AS item
    WHERE item.id = ANY(ARRAY(SELECT wanted.id FROM wanted))
    FOR UPDATE SKIP LOCKED
), released AS (
    UPDATE work_items AS item
    SET admission = wanted.admission, lease_owner = NULL, lease_token = NULL,
        leased_until = NULL, updated_at = :now
    FROM wanted
    WHERE item.id = wanted.id AND item.id IN (SELECT free.id FROM free)
        AND item.lease_token = wanted.token AND item.stamp = wanted.stamp
    RETURNING item.id
), audited AS (
    INSERT INTO audit_log (at, event_type, work_item_id, actor, old_state, new_state,
        "trigger", metadata)
    SELECT a.at, a.event_type, a.work_item_id, a.actor, a.old_state, a.new_state,
        a."trigger", a.metadata
    FROM ROWS FROM (
        jsonb_to_recordset(CAST(:rows AS jsonb)) AS (at timestamptz, event_type text,
            work_item_id uuid, actor text, old_state jsonb, new_state jsonb,
            "trigger" jsonb, metadata jsonb, "of" uuid)
    ) WITH ORDINALITY AS a(at, event_type, work_item_id, actor, old_state, new_state,
        "trigger", metadata, "of", n)
    WHERE a."of" IN (SELECT id FROM released)
    ORDER BY a.n
)
SELECT ARRAY(SELECT id FROM released) AS released,
    (SELECT count(pg_notify(:channel, p.payload))
     FROM (SELECT CAST(:origin AS text) || '|' || c.kind || ':'
                  || string_agg(c.subject, CAST(:separator AS text) ORDER BY c.sent) AS payload
           FROM (SELECT u.kind, u.subject, sum(octet_length(u.subject) + 1)
                     OVER (PARTITION BY u.kind ORDER BY u.subject) AS sent
                 FROM (SELECT DISTINCT s.kind, s.subject
                       FROM jsonb_to_recordset(CAST(:signals AS jsonb))
                           AS s("of" uuid, kind text, subject text)
                       WHERE s."of" IN (SELECT id FROM released)) AS u) AS c
           GROUP BY c.kind, c.sent / :chunk_bytes) AS p) AS notified
"""
)
