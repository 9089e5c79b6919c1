"""The LISTEN connection's and the heartbeat's troubles: few lines, each one line.

An operator's log shipper takes a line for a record: libpq's messages span several
(`\\n\\t` hints), and a listener that cannot reach its server tries again and again.
"""

from __future__ import annotations

import logging
import time

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import sessionmaker

from tests.conftest import Store
from tests.support.waiting import wait_for
from wq.engine.listener import NotifyListener
from wq.engine.replicas import ReplicaHeartbeat, ReplicaReport
from wq.engine.wakeup import Wakeup

LOGGER = "wq.engine.listener"


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


def test_an_unreachable_server_is_one_line_not_one_per_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    # Nothing listens on port 1: every attempt is refused at once.
    listener = NotifyListener(create_engine("postgresql+psycopg://wq@127.0.0.1:1/wq"), Wakeup())
    listener.start()
    try:
        time.sleep(2.0)  # attempts at 0, 0.5 and 1.5 s (the back-off doubles)
    finally:
        listener.stop()
    ((level, message),) = lines(caplog)
    assert level == logging.WARNING
    assert message.startswith("LISTEN connection lost (OperationalError: ")
    assert "\n" not in message and message.endswith("; reconnecting")


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_lost_connection_and_its_return_are_one_line_each(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    listener = NotifyListener(store.engine, Wakeup())
    listener.start()
    try:
        assert listener.wait_ready(10)
        with store.engine.begin() as connection:
            connection.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE query LIKE 'LISTEN %' AND datname = current_database()"
                )
            )
        wait_for(lambda: len(lines(caplog)) >= 2, timeout=10, message="lost, then back")
    finally:
        listener.stop()
    (lost, back) = lines(caplog)
    assert lost[0] == logging.WARNING and lost[1].startswith("LISTEN connection lost (")
    assert "\n" not in lost[1]
    assert back[0] == logging.INFO and back[1].startswith("LISTEN connection back after ")


def test_a_failed_heartbeat_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="wq.engine")
    unreachable = sessionmaker(create_engine("postgresql+psycopg://wq@127.0.0.1:1/wq"))
    report = ReplicaReport(
        workers_busy=0, workers_total=1, consumes_events=False, last_event_at=None
    )
    heartbeat = ReplicaHeartbeat(unreachable, "r1", lambda: report, interval=0.2)
    heartbeat.start()
    time.sleep(1.0)  # several beats, all failing: one line says so
    heartbeat.stop(timeout=2)
    messages = [r.getMessage() for r in caplog.records if r.name == "wq.engine"]
    assert messages[0].startswith("replica heartbeat failed: OperationalError: ")
    assert messages[1].startswith("could not remove this replica's row: OperationalError: ")
    assert len(messages) == 2 and not any("\n" in message for message in messages)
