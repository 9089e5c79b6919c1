"""Everything one daemon process holds: config, database, types, auth, the manager."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from wq.daemon.auth import Authenticator, LocalTokenTier, build_authenticator
from wq.daemon.streams import StreamSlots
from wq.engine.archive import AuditArchiver, S3Archive
from wq.engine.config import Config, ConfigError, default_database_url
from wq.engine.db import (
    DEFAULT_TIMEOUTS,
    PROBE_TIMEOUTS,
    Timeouts,
    autocommit_reads,
    make_engine,
    make_sessionmaker,
    read_only,
)
from wq.engine.metrics import METRICS_KEY, Metrics
from wq.engine.metrics_db import DatabaseCollector
from wq.engine.processing import ProcessingManager, default_owner
from wq.engine.registry import TypeRegistry
from wq.engine.replicas import ReplicaHeartbeat, ReplicaReport
from wq.engine.sqs import SqsConsumer, queue_url_from_env
from wq.engine.wakeup import WAKEUP_KEY, Wakeup
from wq.types import KNOWN_TYPES, load_all_models


@dataclass
class Runtime:
    """The shared state of the API and the engine threads of one daemon."""

    config: Config
    engine: Engine
    sessions: sessionmaker[Session]
    read_sessions: sessionmaker[Session]
    registry: TypeRegistry
    authenticator: Authenticator
    metrics: Metrics = field(default_factory=Metrics)
    wakeup: Wakeup = field(default_factory=Wakeup)
    local_tier: LocalTokenTier | None = None
    manager: ProcessingManager | None = None
    webhook_secret: str | None = None
    consumer: SqsConsumer | None = None
    archiver: AuditArchiver | None = None
    timeouts: Timeouts = DEFAULT_TIMEOUTS
    # The API's reads: no BEGIN/ROLLBACK round trips on PostgreSQL (see `autocommit_reads`).
    api_read_sessions: sessionmaker[Session] | None = None
    heartbeat: ReplicaHeartbeat | None = None
    # Task outputs streamed now (`GET .../logs`); sized from the config at build.
    output_streams: StreamSlots = field(default_factory=lambda: StreamSlots(64))
    # When the GitLab webhook last received an event (the SQS consumer keeps its own).
    webhook_received_at: datetime | None = None
    # `/readyz`'s (PostgreSQL): a connection per probe, bounded by `PROBE_TIMEOUTS`, so
    # that a hung server is said within the probe's time (the API's waits are longer).
    probe_engine: Engine | None = None

    def start_heartbeat(self) -> ReplicaHeartbeat:
        """Start writing this daemon's row in `replicas` (`wq replicas`)."""
        owner = self.manager.owner if self.manager is not None else default_owner()
        self.heartbeat = ReplicaHeartbeat(
            self.sessions,
            owner,
            self.report,
            interval=self.config.processing.replica_heartbeat_seconds,
            probe_sessions=self.read_sessions,
        )
        self.heartbeat.start()
        return self.heartbeat

    def report(self) -> ReplicaReport:
        """What this daemon's heartbeat says of it."""
        received = [
            moment
            for moment in (
                self.webhook_received_at,
                self.consumer.last_received_at if self.consumer is not None else None,
            )
            if moment is not None
        ]
        return ReplicaReport(
            workers_busy=self.manager.busy if self.manager is not None else 0,
            workers_total=self.config.processing.workers if self.manager is not None else 0,
            consumes_events=self.consumer is not None or self.webhook_secret is not None,
            last_event_at=max(received) if received else None,
        )

    def start_processing(self) -> ProcessingManager:
        """Create and start the processing manager (scheduler, workers, sweep)."""
        self.manager = ProcessingManager(
            self.sessions, self.registry, self.config, wakeup=self.wakeup
        )
        self.manager.start()
        return self.manager

    def start_archiver(self) -> AuditArchiver | None:
        """Start the audit archiver when an S3 bucket is configured (config or env)."""
        audit = self.config.audit
        if not audit.archiving:
            return None
        self.archiver = AuditArchiver(
            self.sessions,
            S3Archive.from_config(audit),
            batch_size=audit.s3_batch_size,
            threads=audit.s3_upload_threads,
        )
        self.archiver.start()
        return self.archiver

    def prepare_consumer(self) -> SqsConsumer | None:
        """Build the SQS consumer when a queue URL is configured (env, then config).

        The environment wins over the file, as for the database URL and the audit bucket.

        Raises `EventsConfigError` when the queue cannot be used (before the daemon binds).
        """
        events = self.config.events
        queue_url = queue_url_from_env() or events.queue_url
        if queue_url is None:
            return None
        self.consumer = SqsConsumer(
            self.sessions,
            self.registry,
            queue_url,
            max_messages=events.max_messages,
            wait_seconds=events.wait_seconds,
            max_message_bytes=events.max_message_bytes,
            max_future_skew=timedelta(seconds=events.max_future_skew_seconds),
        )
        return self.consumer

    def start_consumer(self) -> SqsConsumer | None:
        """Start the consumer `prepare_consumer` built, if any."""
        if self.consumer is not None:
            self.consumer.start()
        return self.consumer


def build_registry(config: Config) -> TypeRegistry:
    """Register the types the config handles.

    `handled_types` omitted means, in the embedded default, every known type that can
    take a submission without settings (`unhandled_by_default` says why the others are
    left out) and none in a config file (the reference service's rule; the daemon warns
    at start).
    """
    registry = TypeRegistry()
    load_all_models()
    handled = config.handled_types
    # Omitted: the embedded default handles what works unconfigured, a file nothing.
    left_out = unhandled_by_default(config)
    everything = [name for name in KNOWN_TYPES if name not in left_out]
    names = (everything if config.embedded else []) if handled is None else list(handled)
    for name in names:
        if name not in KNOWN_TYPES:
            known = ", ".join(sorted(KNOWN_TYPES)) or "none"
            raise ConfigError(
                f"config {config.source}: handled_types.{name}: unknown work-item type "
                f"(known: {known})"
            )
        module = importlib.import_module(KNOWN_TYPES[name])
        module.register(registry, (handled or {}).get(name) or {}, source=config.source)
    return registry


def unhandled_by_default(config: Config) -> dict[str, str]:
    """The known types the embedded default leaves out, with why (empty otherwise)."""
    if not config.embedded or config.handled_types is not None:
        return {}
    reasons = {}
    for name, package in KNOWN_TYPES.items():
        reason = getattr(importlib.import_module(package), "NEEDS_CONFIG", None)
        if reason:
            reasons[name] = str(reason)
    return reasons


def wants_local_token(config: Config, *, loopback: bool) -> bool:
    """`auth.local_token`: true forces the local token on, false off, null (the
    default) on only while the daemon listens on loopback: the all-permissions token
    is for the machine itself, not the network."""
    if config.auth.local_token is None:
        return loopback
    return config.auth.local_token


def build_runtime(
    config: Config, registry: TypeRegistry | None = None, *, loopback: bool = True
) -> Runtime:
    """Connect to the database and assemble the runtime (does not migrate or start).

    `loopback` says whether the daemon listens on loopback only (the local token's rule).
    """
    registry = registry if registry is not None else build_registry(config)
    local_tier = LocalTokenTier() if wants_local_token(config, loopback=loopback) else None
    authenticator = build_authenticator(
        config, known_types=set(KNOWN_TYPES) | set(registry.names), local_tier=local_tier
    )
    url = config.database_url or default_database_url()
    workers = config.processing.workers
    timeouts = Timeouts(
        connect_seconds=config.database.connect_timeout_seconds,
        statement_seconds=config.database.statement_timeout_seconds,
    )
    # Only the embedded default makes (and migrates) its database; a config file's
    # daemon needs `wq db migrate` first and must not leave an empty file behind.
    engine = make_engine(url, pool_size=workers + 5, timeouts=timeouts, create=config.embedded)
    probe_engine = gauge_engine = None
    if engine.dialect.name == "postgresql":
        probe_engine = make_engine(url, timeouts=PROBE_TIMEOUTS, pooled=False)
        # A connection per reading (every `metrics.cache_seconds`), its statements within
        # the budget: a scrape against a hung database waits for the connect timeout at
        # most, not for a pooled connection's ping as well (17 s by default).
        gauge_timeouts = Timeouts(
            connect_seconds=config.database.connect_timeout_seconds,
            statement_seconds=config.metrics.budget_seconds,
        )
        gauge_engine = make_engine(url, timeouts=gauge_timeouts, pooled=False)
    wakeup = Wakeup()
    metrics = Metrics(config.metrics.prefix, config.metrics.service_prefix)
    sessions = make_sessionmaker(engine)
    sessions.configure(info={WAKEUP_KEY: wakeup, METRICS_KEY: metrics})
    read_sessions = make_sessionmaker(read_only(engine))
    read_sessions.configure(info={METRICS_KEY: metrics})
    api_read_sessions = make_sessionmaker(autocommit_reads(engine))
    api_read_sessions.configure(info={METRICS_KEY: metrics})
    metrics.registry.register(
        DatabaseCollector(
            read_sessions if gauge_engine is None else make_sessionmaker(read_only(gauge_engine)),
            config,
            lambda: registry.names,
            prefix=config.metrics.service_prefix,
        )
    )
    return Runtime(
        config=config,
        engine=engine,
        sessions=sessions,
        read_sessions=read_sessions,
        registry=registry,
        authenticator=authenticator,
        metrics=metrics,
        wakeup=wakeup,
        local_tier=local_tier,
        webhook_secret=config.events.webhook_secret(),
        timeouts=timeouts,
        api_read_sessions=api_read_sessions,
        output_streams=StreamSlots(config.server.max_output_streams),
        probe_engine=probe_engine,
    )
