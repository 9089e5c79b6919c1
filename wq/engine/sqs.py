"""The SQS consumer: GitLab events from an SNS-fed queue into `pending_events`.

One thread long-polls the queue. Each message is decoded, resolved to the items it
concerns and stored in one transaction; only after that commit is it deleted from
the queue. A message that cannot be decoded or stored is logged (with its id),
counted and left on the queue, so its redrive policy decides its fate; an event that
concerns no item is acknowledged and counted.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from sqlalchemy.orm import Session, sessionmaker

from wq.engine.envelope import UndecodableMessage, decode_message
from wq.engine.events import ingest
from wq.engine.metrics import count_event
from wq.engine.registry import TypeRegistry

log = logging.getLogger(__name__)
QUEUE_URL_ENV_VARS = ("WQ_EVENTS_QUEUE_URL", "WORKQUEUE_SERVICE_EVENTS_QUEUE_URL")


def queue_url_from_env() -> str | None:
    """The events queue URL, if the environment names one."""
    for var in QUEUE_URL_ENV_VARS:
        if os.environ.get(var):
            return os.environ[var]
    return None


class SqsConsumer:
    """Long-polls one queue on a daemon thread until stopped."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        registry: TypeRegistry,
        queue_url: str,
        *,
        max_messages: int = 10,
        wait_seconds: int = 20,
        client: Any = None,
    ) -> None:
        self.sessions = sessions
        self.registry = registry
        self.queue_url = queue_url
        self.max_messages = max_messages
        self.wait_seconds = wait_seconds
        self.client = client or boto3.client("sqs")
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wq-sqs", daemon=True)

    def start(self) -> None:
        """Start polling in the background."""
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop after the current poll (at most `wait_seconds`)."""
        self._stopping.set()
        self._thread.join(timeout=self.wait_seconds + 5 if timeout is None else timeout)

    def _run(self) -> None:
        backoff = 1.0
        while not self._stopping.is_set():
            try:
                self.poll_once()
                backoff = 1.0
            except (BotoCoreError, ClientError) as err:
                log.warning("cannot read the events queue (%s); retrying in %.0fs", err, backoff)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 60.0)
            except Exception:
                log.exception("events consumer pass failed")
                self._stopping.wait(backoff)

    def poll_once(self) -> int:
        """Receive one batch and handle it; return how many messages were deleted."""
        response = self.client.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=self.max_messages,
            WaitTimeSeconds=self.wait_seconds,
            MessageAttributeNames=["All"],
        )
        deleted = 0
        for message in response.get("Messages", []):
            if self.handle(message):
                self.client.delete_message(
                    QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"]
                )
                deleted += 1
        return deleted

    def handle(self, message: dict[str, Any]) -> bool:
        """Store one message's event; True when it may be deleted from the queue."""
        message_id = message.get("MessageId", "?")
        try:
            event = decode_message(message.get("Body", ""))
        except UndecodableMessage as err:
            count_event("undecodable")
            log.warning("events queue message %s cannot be decoded: %s", message_id, err)
            return False
        try:
            stored = ingest(self.sessions, self.registry, event)
        except Exception:
            count_event("unstored")
            log.exception("events queue message %s could not be stored", message_id)
            return False
        log.debug(
            "events queue message %s (%s) stored for %d item(s)",
            message_id,
            event.event_type,
            stored,
        )
        return True
