"""The SQS consumer against a moto server over HTTP, on both databases."""

from __future__ import annotations

import json
import logging
import re
import signal
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text

from tests.conftest import Store
from tests.daemon.test_daemon_process import Daemon, clean_env, run_wq, start_daemon
from tests.support.bombs import poison_bodies, sns
from tests.support.waiting import wait_for
from tests.types.mr.events_support import (
    apply_pending,
    counted,
    deliver,
    item,
    make_queue,
    mr_event,
    new_item,
    queue_depth,
)
from tests.types.mr.helpers import mr_registry
from wq.engine.events import drain_events
from wq.engine.models import AuditEntry, PendingEvent
from wq.engine.sqs import EventStoreUnavailable, Outcome, SqsConsumer


def calls_of(sqs: Any) -> list[str]:
    """Record the names of the SQS API calls the client makes from now on."""
    seen: list[str] = []
    sqs.meta.events.register("before-call.sqs.*", lambda model, **_: seen.append(model.name))
    return seen


def nine_items_and_their_merges(store: Store, registry: Any) -> tuple[list[uuid.UUID], list[str]]:
    ids = [new_item(store, registry, n, f"wq/item-{n}") for n in range(1, 10)]
    bodies = [sns(json.dumps(mr_event("merge", n, branch=f"wq/item-{n}"))) for n in range(1, 10)]
    return ids, bodies


@pytest.mark.parametrize("kind", sorted(poison_bodies()))
def test_one_poison_message_spares_the_nine_valid_ones_of_its_batch(
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
    sqs: Any,
    kind: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = mr_registry(monkeypatch)
    ids, bodies = nine_items_and_their_merges(store, registry)
    queue = make_queue(sqs)
    poison = poison_bodies()[kind]
    bodies.insert(4, poison)
    for body in bodies:
        sqs.send_message(QueueUrl=queue, MessageBody=body)
    consumer = SqsConsumer(store.sessions, registry, queue, wait_seconds=0, client=sqs)
    undecodable = counted("undecodable")
    seen = calls_of(sqs)
    with caplog.at_level(logging.WARNING, logger="wq.engine.sqs"):
        handled = 0
        for _ in range(10):  # moto may hand the ten out in more than one batch
            handled += consumer.poll_once()
            if handled == 10:
                break
    apply_pending(store, registry)
    assert [item(store, item_id).phase for item_id in ids] == ["completed"] * 9
    assert counted("undecodable") - undecodable == 1
    assert queue_depth(sqs, queue) == 0  # no redrive policy: the poison is deleted too
    poison_lines = [r for r in caplog.records if "cannot be decoded" in r.getMessage()]
    assert len(poison_lines) == 1 and poison_lines[0].exc_info is None
    assert "DeleteMessage" not in seen and "DeleteMessageBatch" in seen
    consumer.poll_once()  # nothing comes back, nothing is counted again
    assert counted("undecodable") - undecodable == 1


def test_with_a_redrive_policy_poison_goes_to_the_dead_letter_queue_counted_once(
    store: Store, monkeypatch: pytest.MonkeyPatch, sqs: Any
) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(store, registry)
    dead = make_queue(sqs)
    dead_arn = sqs.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    queue = make_queue(
        sqs,
        VisibilityTimeout="0",  # redelivered at once, so the test needs no waiting
        RedrivePolicy=json.dumps({"deadLetterTargetArn": dead_arn, "maxReceiveCount": "3"}),
    )
    sqs.send_message(QueueUrl=queue, MessageBody="poison {")
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(mr_event("approved")))
    consumer = SqsConsumer(store.sessions, registry, queue, wait_seconds=0, client=sqs)
    undecodable = counted("undecodable")
    for _ in range(6):
        consumer.poll_once()
    assert consumer.redrive_policy is True
    assert queue_depth(sqs, queue) == 0
    moved = sqs.receive_message(QueueUrl=dead, MaxNumberOfMessages=10)["Messages"]
    assert [message["Body"] for message in moved] == ["poison {"]
    assert counted("undecodable") - undecodable == 1
    apply_pending(store, registry)
    assert item(store, item_id).status("needs_reconcile") is not None  # the valid one


def _dead_letter_queue(sqs: Any) -> tuple[str, dict[str, str]]:
    """A dead-letter queue, and the attributes that make a queue redrive into it."""
    dead = make_queue(sqs)
    arn = sqs.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "5"})
    return dead, {"RedrivePolicy": policy}


@pytest.mark.parametrize("redrive", [False, True], ids=["no_redrive", "redrive"])
def test_a_database_failure_keeps_the_batch_for_redelivery(
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
    sqs: Any,
    caplog: pytest.LogCaptureFixture,
    redrive: bool,
) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(store, registry)
    dead, attributes = _dead_letter_queue(sqs) if redrive else ("", {})
    queue = make_queue(sqs, VisibilityTimeout="0", **attributes)
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(mr_event("approved")))
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(mr_event("merge")))
    consumer = SqsConsumer(store.sessions, registry, queue, wait_seconds=0, client=sqs)
    transient = counted("transient")
    with store.engine.begin() as conn:
        conn.execute(text("ALTER TABLE pending_events RENAME TO pending_events_away"))
    try:
        message = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=1)["Messages"][0]
        assert consumer.handle(message) is Outcome.TRANSIENT
        with (
            caplog.at_level(logging.WARNING, logger="wq.engine.sqs"),
            pytest.raises(EventStoreUnavailable),  # the loop backs off on this
        ):
            consumer.poll_once()
    finally:
        with store.engine.begin() as conn:
            conn.execute(text("ALTER TABLE pending_events_away RENAME TO pending_events"))
    assert counted("transient") - transient == 2  # the first stops the rest of its batch
    assert queue_depth(sqs, queue) == 2  # nothing was deleted
    assert consumer.redrive_policy is redrive
    if redrive:
        assert queue_depth(sqs, dead) == 0  # kept on the queue, not dead-lettered
    assert not [r for r in caplog.records if r.exc_info]  # a warning, not a traceback
    # The database is back: the kept event is stored and deleted.
    survivor = SqsConsumer(store.sessions, registry, queue, wait_seconds=0, client=sqs)
    wait_for(lambda: survivor.poll_once() == 0 and queue_depth(sqs, queue) == 0, timeout=20)
    apply_pending(store, registry)
    assert item(store, item_id).phase == "completed"


def test_a_failed_entry_of_a_batch_delete_is_redelivered_and_the_rest_deleted(
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
    sqs: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(store, registry)
    queue = make_queue(sqs)
    for action in ("approved", "update", "unapproved"):
        sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(mr_event(action)))
    received = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]
    assert len(received) == 3

    def break_second_entry(params: dict[str, Any], **_: Any) -> None:
        # Fault injection on the wire: SQS then reports that entry as failed.
        params["Entries"][1]["ReceiptHandle"] = "not-a-receipt-handle"

    sqs.meta.events.register("provide-client-params.sqs.DeleteMessageBatch", break_second_entry)
    consumer = SqsConsumer(store.sessions, registry, queue, wait_seconds=0, client=sqs)
    failed = counted("delete_failed")
    with caplog.at_level(logging.WARNING, logger="wq.engine.sqs"):
        assert [consumer.handle(message) for message in received] == [Outcome.DONE] * 3
        assert consumer.delete(received) == 2
    assert counted("delete_failed") - failed == 1
    assert any(received[1]["MessageId"] in r.getMessage() for r in caplog.records)
    sqs.meta.events.unregister("provide-client-params.sqs.DeleteMessageBatch", break_second_entry)
    assert queue_depth(sqs, queue) == 1  # only the failed one is left, for redelivery
    apply_pending(store, registry)
    assert item(store, item_id).status("needs_reconcile") is not None


def test_stop_does_not_wait_out_the_long_poll(
    store: Store, monkeypatch: pytest.MonkeyPatch, sqs: Any
) -> None:
    registry = mr_registry(monkeypatch)
    queue = make_queue(sqs)
    receiving = threading.Event()
    sqs.meta.events.register("before-call.sqs.ReceiveMessage", lambda **_: receiving.set())
    consumer = SqsConsumer(store.sessions, registry, queue, wait_seconds=20, client=sqs)
    consumer.start()
    assert receiving.wait(10), "the consumer never polled"
    time.sleep(0.2)  # well inside the 20 s long poll
    started = time.monotonic()
    consumer.stop()
    assert time.monotonic() - started < 2.0  # the bug: up to 20 s
    # A message arriving now is not consumed by the stopped consumer's abandoned receive.
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(mr_event("merge")))
    wait_for(lambda: not consumer._thread.is_alive(), timeout=30, message="thread ended")
    with store.sessions() as session:
        assert session.execute(select(func.count()).select_from(PendingEvent)).scalar_one() == 0
    assert queue_depth(sqs, queue) == 1


def test_consumer_stores_then_deletes_and_counts_unmatched(
    store: Store, monkeypatch: pytest.MonkeyPatch, sqs: Any
) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(store, registry)
    queue = make_queue(sqs)
    for body in (
        sns(json.dumps(mr_event("approved"))),
        json.dumps(mr_event("merge", iid=99, branch="nobody")),
    ):
        sqs.send_message(QueueUrl=queue, MessageBody=body)
    consumer = SqsConsumer(store.sessions, registry, queue, wait_seconds=0, client=sqs)
    unmatched = counted("unmatched")
    wait_for(lambda: consumer.poll_once() == 0 and queue_depth(sqs, queue) == 0)
    assert counted("unmatched") - unmatched == 1
    with store.sessions() as session:
        pending = session.execute(select(PendingEvent.work_item_id)).scalars().all()
    assert pending == [item_id]


def test_redelivery_after_a_crash_between_commit_and_delete_changes_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch, sqs: Any
) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(store, registry)
    queue = make_queue(sqs)
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(mr_event("merge")))
    crashing = SqsConsumer(store.sessions, registry, queue, wait_seconds=0, client=sqs)
    message = sqs.receive_message(QueueUrl=queue, VisibilityTimeout=0)["Messages"][0]
    assert crashing.handle(message) is Outcome.DONE  # stored and committed ... then it dies
    deliver(store, registry, mr_event("merge"))  # the stored event is applied meanwhile
    assert item(store, item_id).phase == "completed"
    with store.sessions() as session:
        audits_before = session.execute(select(func.count()).select_from(AuditEntry)).scalar_one()
    survivor = SqsConsumer(store.sessions, registry, queue, wait_seconds=0, client=sqs)
    wait_for(lambda: survivor.poll_once() == 1, message="redelivered message handled")
    with store.sessions.begin() as session:
        drain_events(session, item_id, registry)
    assert item(store, item_id).phase == "completed"
    with store.sessions() as session:
        audits_after = session.execute(select(func.count()).select_from(AuditEntry)).scalar_one()
    assert audits_after == audits_before  # a discarded duplicate writes nothing


def test_nul_in_free_text_is_sanitised_not_lost(
    store: Store, monkeypatch: pytest.MonkeyPatch, sqs: Any
) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(store, registry)
    queue = make_queue(sqs)
    event = mr_event("close")
    event["object_attributes"]["description"] = "broken\u0000text"
    event["object_attributes"]["title\u0000"] = "a key with NUL"
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(event))
    consumer = SqsConsumer(store.sessions, registry, queue, wait_seconds=0, client=sqs)
    wait_for(lambda: consumer.poll_once() == 0 and queue_depth(sqs, queue) == 0)
    with store.sessions() as session:
        stored = session.execute(select(PendingEvent.payload)).scalar_one()
    assert stored["object_attributes"]["description"] == "broken\ufffdtext"
    apply_pending(store, registry)
    assert item(store, item_id).phase == "cancelled"


def test_sigterm_stops_an_idle_daemon_without_waiting_out_the_long_poll(
    tmp_path: Path, sqs: Any, moto_url: str
) -> None:
    queue = make_queue(sqs)
    config = tmp_path / "wq.yml"
    config.write_text(
        f"database_url: sqlite:///{tmp_path / 'wq.db'}\n"
        f"events: {{queue_url: '{queue}', wait_seconds: 20}}\n"
        "processing: {shutdown_grace_seconds: 5}\n",
        encoding="utf-8",
    )
    env = clean_env(
        tmp_path,
        WQ_CONFIG=str(config),
        AWS_ENDPOINT_URL=moto_url,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
    )
    migrated = run_wq("db", "migrate", env=env, cwd=tmp_path)
    assert migrated.returncode == 0, migrated.stderr
    started: list[Daemon] = []
    try:
        daemon = start_daemon(started, tmp_path, env)
        daemon.wait_healthy()
        # One message consumed proves the consumer runs; it then sits in a 20 s poll.
        sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(mr_event("merge")))
        wait_for(lambda: queue_depth(sqs, queue) == 0, timeout=30, message="consumed")
        begun = time.monotonic()
        code = daemon.terminate(signal.SIGTERM, 30)
        elapsed = time.monotonic() - begun
    finally:
        for leftover in started:
            if leftover.proc.poll() is None:
                leftover.proc.kill()
                leftover.proc.wait(timeout=10)
    assert code == 0, daemon.log()
    log = daemon.log()
    # The shutdown itself (consumer, processing, database) takes well under the poll.
    stamps = {
        name: datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f")
        for name, pattern in (("begin", r"shutting down"), ("end", r"wq.daemon: stopped"))
        if (found := re.search(r"^(\S+ \S+) INFO .*" + pattern, log, re.MULTILINE))
    }
    assert (stamps["end"] - stamps["begin"]).total_seconds() < 2.0, log
    # The whole process, interpreter teardown included (slow on a loaded machine), still
    # ends long before the 20 s poll would have.
    assert elapsed < 12.0, f"SIGTERM took {elapsed:.1f}s\n{log}"
    assert "Traceback" not in log
