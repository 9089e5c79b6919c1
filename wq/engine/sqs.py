"""The SQS consumer: GitLab events from an SNS-fed queue into `pending_events`.

One thread long-polls the queue. Each message of a batch is handled on its own:
decoded, resolved to the items it concerns and stored in one transaction; the messages
whose events are stored are then deleted together (`DeleteMessageBatch`).

A failure is permanent or transient. Permanent — the message can never be decoded, is
over the size cap, or its content cannot be stored — is logged with the message id,
counted once and deleted; when the queue has a redrive policy it is left to that
policy instead (counted on its first receipt only), so it ends in the dead-letter
queue. Transient — the database is unavailable — keeps the message and the rest of its
batch for redelivery, and the consumer backs off.

Stopping never waits out a long poll: a receive in flight is abandoned (what it brings
back is released to the queue at once, unhandled).
"""

from __future__ import annotations

import enum
import logging
import os
import re
import threading
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker

from wq.engine.envelope import DEFAULT_MAX_DECODED_BYTES, decode_message
from wq.engine.events import DEFAULT_MAX_FUTURE_SKEW, ingest
from wq.engine.metrics import metrics_of
from wq.engine.models import utcnow
from wq.engine.registry import TypeRegistry

log = logging.getLogger(__name__)
QUEUE_URL_ENV_VARS = ("WQ_EVENTS_QUEUE_URL", "WORKQUEUE_SERVICE_EVENTS_QUEUE_URL")
# How often the queue's redrive policy is looked at again (operators may add one).
REDRIVE_CHECK_SECONDS = 600.0
REDRIVE_RETRY_SECONDS = 60.0  # after the policy could not be read (e.g. not allowed)
MAX_BACKOFF_SECONDS = 60.0
SOURCE = "sqs"  # the `source` label of this intake's event counts
# Errors that say the database cannot be reached or used right now, not that this
# event is bad: the message is kept for redelivery. A missing table is a deployment
# fault, not the message's.
TRANSIENT_DB_ERRORS: tuple[type[BaseException], ...] = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.ProgrammingError,
    sa_exc.TimeoutError,
    sa_exc.DisconnectionError,
    ConnectionError,
    TimeoutError,
)


def queue_url_from_env() -> str | None:
    """The events queue URL, if the environment names one."""
    for var in QUEUE_URL_ENV_VARS:
        if os.environ.get(var):
            return os.environ[var]
    return None


# sqs.<region>.amazonaws.com[.cn], and the legacy <region>.queue.amazonaws.com[.cn]
_AWS_QUEUE_HOST = re.compile(
    r"^(?:sqs\.(?P<a>[a-z0-9-]+)|(?P<b>[a-z0-9-]+)\.queue)\.amazonaws\.com(?:\.cn)?$"
)


class EventsConfigError(ValueError):
    """The events queue cannot be used as configured (the daemon refuses to start)."""


def queue_region(queue_url: str) -> str | None:
    """The AWS region an SQS queue URL names in its host, or None (e.g. a local endpoint)."""
    found = _AWS_QUEUE_HOST.match(urlsplit(queue_url).hostname or "")
    return (found.group("a") or found.group("b")) if found else None


def sqs_client(queue_url: str) -> Any:
    """A boto3 SQS client for the queue: the configured region, else the URL's own.

    Credentials and endpoint come from boto3's usual chain (environment, profile, pod
    identity); only a region that neither the environment nor the URL gives is refused.
    """
    session = boto3.session.Session()
    region = session.region_name or queue_region(queue_url)
    if region is None:
        raise EventsConfigError(
            f"events queue {queue_url}: no AWS region: set AWS_DEFAULT_REGION "
            "(the queue URL's host names none)"
        )
    return session.client("sqs", region_name=region)


class Outcome(enum.Enum):
    """What became of one message."""

    DONE = "done"  # stored, or deliberately ignored (unmatched, future): delete it
    PERMANENT = "permanent"  # can never succeed: delete it, or leave it to the redrive policy
    TRANSIENT = "transient"  # may succeed later: keep it


class EventStoreUnavailable(Exception):
    """The database could not take events; the batch's rest was left on the queue."""


def is_transient(err: BaseException) -> bool:
    """True for failures of the database rather than of the message."""
    if isinstance(err, sa_exc.DBAPIError) and err.connection_invalidated:
        return True
    return isinstance(err, TRANSIENT_DB_ERRORS)


def _receive_count(message: dict[str, Any]) -> int:
    try:
        return int(message.get("Attributes", {}).get("ApproximateReceiveCount", 1))
    except (TypeError, ValueError):
        return 1


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
        max_message_bytes: int = DEFAULT_MAX_DECODED_BYTES,
        max_future_skew: timedelta = DEFAULT_MAX_FUTURE_SKEW,
        client: Any = None,
    ) -> None:
        self.sessions = sessions
        self.registry = registry
        self.queue_url = queue_url
        self.max_messages = max_messages
        self.wait_seconds = wait_seconds
        self.max_message_bytes = max_message_bytes
        self.max_future_skew = max_future_skew
        self.client = client or sqs_client(queue_url)
        self.metrics = metrics_of(sessions)
        self._stopping = threading.Event()
        # Held while a batch is handled: stop() waits for it, never for a receive.
        self._busy = threading.Lock()
        self._redrive: bool | None = None
        self._redrive_checked = 0.0
        self._thread = threading.Thread(target=self._run, name="wq-sqs", daemon=True)
        self.last_received_at: datetime | None = None  # when a message last came

    def start(self) -> None:
        """Start polling in the background."""
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop now: finish the batch being handled (up to `timeout`), abandon a receive."""
        self._stopping.set()
        if self._busy.acquire(timeout=timeout):
            # Once stopping is set and the lock was free, no batch starts any more.
            self._busy.release()
        if self._thread.is_alive():
            self._thread.join(timeout=0.2)

    @property
    def redrive_policy(self) -> bool | None:
        """Whether the queue has a redrive policy (None: not known yet)."""
        return self._redrive

    def _run(self) -> None:
        backoff = 1.0
        while not self._stopping.is_set():
            try:
                self.poll_once()
                backoff = 1.0
                continue
            except (BotoCoreError, ClientError) as err:
                log.warning("cannot read the events queue (%s); retrying in %.0fs", err, backoff)
            except EventStoreUnavailable as err:
                log.warning("%s; retrying in %.0fs", err, backoff)
            except Exception:
                log.exception("events consumer pass failed; retrying in %.0fs", backoff)
            self._stopping.wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    def _check_redrive(self) -> None:
        """Look up the queue's redrive policy (again after a while)."""
        now = time.monotonic()
        interval = REDRIVE_CHECK_SECONDS if self._redrive is not None else REDRIVE_RETRY_SECONDS
        if self._redrive_checked and now - self._redrive_checked < interval:
            return
        self._redrive_checked = now
        try:
            attributes = self.client.get_queue_attributes(
                QueueUrl=self.queue_url, AttributeNames=["RedrivePolicy"]
            ).get("Attributes", {})
        except (BotoCoreError, ClientError) as err:
            # Unknown: permanent failures are then kept, which is safe either way.
            log.warning("cannot read the events queue's redrive policy: %s", err)
            return
        redrive = bool(attributes.get("RedrivePolicy"))
        if redrive != self._redrive:
            log.info(
                "events queue: %s",
                "undeliverable messages are left to its redrive policy"
                if redrive
                else "no redrive policy; undeliverable messages are deleted",
            )
        self._redrive = redrive

    def poll_once(self) -> int:
        """Receive one batch and handle it; return how many messages were deleted."""
        self._check_redrive()
        try:
            response = self.client.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=self.max_messages,
                WaitTimeSeconds=self.wait_seconds,
                MessageAttributeNames=["All"],
                MessageSystemAttributeNames=["ApproximateReceiveCount"],
            )
        except (BotoCoreError, ClientError):
            self.metrics.sqs_receive_errors.inc()
            raise
        messages: list[dict[str, Any]] = response.get("Messages", [])
        if messages:
            self.last_received_at = utcnow()
        with self._busy:
            if self._stopping.is_set():
                self._release(messages)
                return 0
            return self._handle_batch(messages)

    def _handle_batch(self, messages: Sequence[dict[str, Any]]) -> int:
        done: list[dict[str, Any]] = []
        unavailable = False
        for message in messages:
            outcome = self.handle(message)
            if outcome is Outcome.TRANSIENT:
                # The database is down: the rest of the batch would fail the same way.
                unavailable = True
                break
            if outcome is Outcome.DONE or self._redrive is False:
                done.append(message)
        deleted = self.delete(done)
        if unavailable:
            raise EventStoreUnavailable(
                "the database cannot store events; messages are kept for redelivery"
            )
        return deleted

    def handle(self, message: dict[str, Any]) -> Outcome:
        """Store one message's event; say whether it may be deleted from the queue."""
        message_id = message.get("MessageId", "?")
        try:
            event = decode_message(message.get("Body", ""), max_bytes=self.max_message_bytes)
        except Exception as err:  # whatever decoding raises is this message's fault
            self._permanent("undecodable", message_id, message, err)
            return Outcome.PERMANENT
        try:
            stored = ingest(
                self.sessions,
                self.registry,
                event,
                source=SOURCE,
                max_future_skew=self.max_future_skew,
            )
        except Exception as err:
            if is_transient(err):
                self.metrics.count_event(SOURCE, "transient")
                log.warning(
                    "events queue message %s not stored, kept for redelivery: %s",
                    message_id,
                    type(err).__name__,
                )
                return Outcome.TRANSIENT
            self._permanent("unstorable", message_id, message, err)
            return Outcome.PERMANENT
        log.debug(
            "events queue message %s (%s) stored for %d item(s)",
            message_id,
            event.event_type,
            stored,
        )
        return Outcome.DONE

    def _permanent(
        self, outcome: str, message_id: str, message: dict[str, Any], err: BaseException
    ) -> None:
        """Log and count a message that can never succeed (once, not per receipt)."""
        receipts = _receive_count(message)
        what = "cannot be decoded" if outcome == "undecodable" else "cannot be stored"
        fate = "left to the redrive policy" if self._redrive is not False else "deleted"
        if receipts > 1 and self._redrive is not False:  # counted on its first receipt
            log.debug("events queue message %s %s again (receipt %d)", message_id, what, receipts)
            return
        self.metrics.count_event(SOURCE, outcome)
        reason = str(err) if outcome == "undecodable" else type(err).__name__
        log.warning("events queue message %s %s (%s); %s", message_id, what, reason, fate)

    def delete(self, messages: Sequence[dict[str, Any]]) -> int:
        """Delete messages in batches of ten; failed entries are logged and counted."""
        deleted = 0
        for start in range(0, len(messages), 10):
            chunk = messages[start : start + 10]
            entries = [
                {"Id": str(index), "ReceiptHandle": message["ReceiptHandle"]}
                for index, message in enumerate(chunk)
            ]
            try:
                response = self.client.delete_message_batch(
                    QueueUrl=self.queue_url, Entries=entries
                )
            except (BotoCoreError, ClientError) as err:
                # The events are stored: redelivery stores them again, which is harmless.
                self.metrics.count_event(SOURCE, "delete_failed", len(chunk))
                log.warning("cannot delete %d events queue message(s): %s", len(chunk), err)
                continue
            deleted += len(response.get("Successful", []))
            for failure in response.get("Failed", []):
                self.metrics.count_event(SOURCE, "delete_failed")
                index = int(failure.get("Id", -1))
                message_id = chunk[index].get("MessageId", "?") if 0 <= index < len(chunk) else "?"
                log.warning(
                    "events queue message %s was not deleted (%s: %s); it will be redelivered",
                    message_id,
                    failure.get("Code"),
                    failure.get("Message"),
                )
        return deleted

    def _release(self, messages: Sequence[dict[str, Any]]) -> None:
        """Hand unhandled messages back to the queue at once (best effort)."""
        if not messages:
            return
        entries = [
            {"Id": str(index), "ReceiptHandle": message["ReceiptHandle"], "VisibilityTimeout": 0}
            for index, message in enumerate(messages[:10])
        ]
        try:
            self.client.change_message_visibility_batch(QueueUrl=self.queue_url, Entries=entries)
        except (BotoCoreError, ClientError) as err:
            log.info("unhandled messages return after their visibility timeout (%s)", err)
