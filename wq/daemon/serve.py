"""`wq daemon`: the API, the processing manager, the sweep and LISTEN in one process.

Start-up logs one line per fact (config, database, bind address, types). Shutdown on
SIGTERM/SIGINT stops claiming at once and lets running actions finish within the grace
period; actions still running then are logged and their leases left to run out (never
handed to another replica early), and the process exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator
from types import FrameType

import uvicorn
from fastapi import FastAPI

from wq.client.token_cache import TokenCache
from wq.daemon.app import create_app
from wq.daemon.heap import freeze_startup_heap
from wq.daemon.http_protocol import bounded_protocol
from wq.daemon.preflight import check_startable, is_loopback, start_warnings
from wq.daemon.runtime import Runtime, build_registry, build_runtime, unhandled_by_default
from wq.engine import schema
from wq.engine.config import Config, require_webhook_secret
from wq.engine.db import DatabaseUncreatable, is_sqlite, missing_database, shown_url
from wq.engine.listener import NotifyListener
from wq.engine.outage import describe
from wq.engine.sqs import EventsConfigError

log = logging.getLogger("wq.daemon")


class StartupError(RuntimeError):
    """The daemon cannot start; the message says why and what fixes it."""


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # Naming the protocol matters: asyncio sets TCP_NODELAY only on accepted sockets
    # whose protocol is TCP (they inherit the listener's), and without it Nagle's
    # algorithm meets the client's delayed ACK and every kept-alive request waits ~40 ms.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise StartupError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _url_for(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def prepare_database(runtime: Runtime) -> None:
    """Check the schema; the embedded default migrates itself, anything else refuses."""
    try:
        if runtime.config.embedded and is_sqlite(runtime.engine):
            before = schema.current_revision(runtime.engine)
            schema.upgrade(runtime.engine)
            after = schema.current_revision(runtime.engine)
            if before != after:
                log.info("database schema migrated from %s to %s", before or "empty", after)
        schema.check_current(runtime.engine)
    except schema.SchemaOutdated as err:
        raise StartupError(str(err)) from None
    except Exception as err:
        missing = missing_database(err)
        if missing is not None:  # a config file's SQLite database, not made yet
            raise StartupError(f"{missing}: run `{schema.FIX_COMMAND}` to create it") from None
        shown = shown_url(runtime.engine.url)
        raise StartupError(f"cannot use the database {shown}: {describe(err)}") from None


class _Server(uvicorn.Server):
    """uvicorn whose stop signal also starts the engine's shutdown grace.

    The grace is one bound for the whole process: it starts at the signal, not after
    HTTP connections have drained, so the exit comes within the grace plus a step.
    """

    def __init__(self, runtime: Runtime, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.runtime = runtime

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.runtime.manager is not None:
            self.runtime.manager.begin_stop()
        # Followed outputs end now: uvicorn waits for open answers before it stops.
        self.runtime.output_streams.close()
        super().handle_exit(sig, frame)


def refuse_embedded_default(config: Config, host: str) -> None:
    """The embedded default is for one machine: refuse it on the network or in a cluster."""
    if not config.embedded:
        return
    where = "--config, $WQ_CONFIG or /etc/wq/config.yml"
    if not is_loopback(host):
        raise StartupError(
            f"no config file, and {host} is not a loopback address: the embedded default "
            f"serves this machine only; give a config file ({where})"
        )
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise StartupError(
            "no config file, and this runs in a Kubernetes cluster (KUBERNETES_SERVICE_HOST "
            f"is set): give a config file ({where})"
        )


def run_daemon(config: Config, *, host: str | None = None, port: int | None = None) -> None:
    """Run until SIGTERM/SIGINT."""
    host = host or config.server.host
    port = config.server.port if port is None else port
    refuse_embedded_default(config, host)
    loopback = is_loopback(host)
    require_webhook_secret(config)
    registry = build_registry(config)
    check_startable(config, registry)
    try:
        runtime = build_runtime(config, registry, loopback=loopback)
    except DatabaseUncreatable as err:  # the embedded default's file or its directory
        raise StartupError(str(err)) from None
    log.info("config: %s", config.source)
    for warning in start_warnings(config, registry, host=host):
        log.warning("%s", warning)
    try:
        runtime.prepare_consumer()
    except EventsConfigError as err:
        raise StartupError(str(err)) from None
    log.info("database: %s", shown_url(runtime.engine.url))
    prepare_database(runtime)
    if runtime.local_tier is None and config.auth.local_token is None:
        log.info("local token: off (listening beyond loopback; set auth.local_token to force)")
    cache = TokenCache()
    if runtime.local_tier is not None:  # its token is written there once the API is up
        try:
            cache.prepare()
        except OSError as err:
            raise StartupError(
                f"cannot write the local token under {cache.directory}: "
                f"{err.strerror or err} (set XDG_CACHE_HOME, or auth.local_token: false)"
            ) from None
    sock = _bind(host, port)
    url = _url_for(host, sock.getsockname()[1])
    log.info("listening on %s", url)
    log.info("handled types: %s", ", ".join(runtime.registry.names) or "none")
    for name, reason in unhandled_by_default(config).items():
        log.info("not handled without a config file: %s (%s)", name, reason)

    app = create_app(runtime)
    app_lifespan = app.router.lifespan_context  # the app's own resources, inside

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        manager = runtime.start_processing()
        listener = None
        if runtime.engine.dialect.name == "postgresql":
            listener = NotifyListener(runtime.engine, runtime.wakeup, runtime.timeouts)
            listener.start()
        consumer = runtime.start_consumer()
        archiver = runtime.start_archiver()
        heartbeat = runtime.start_heartbeat()
        if archiver is not None:
            log.info("audit archive: %s", archiver.archive.location)
        if consumer is not None:
            log.info("events: consuming %s", consumer.queue_url)
        if runtime.webhook_secret is not None:
            log.info("events: GitLab webhook enabled at /api/webhooks/gitlab")
        if runtime.local_tier is not None:
            path = cache.store(url, runtime.local_tier.token, ttl_seconds=None)
            log.info("local token for %s written to %s", url, path)
        log.info(
            "workers: %d, lease %.0fs", config.processing.workers, config.processing.lease_seconds
        )
        # Last: everything start-up made is alive by now (see `wq.daemon.heap`).
        log.info("heap: %d objects frozen, skipped by the cyclic collector", freeze_startup_heap())
        try:
            async with app_lifespan(app):
                yield
        finally:
            log.info("shutting down: no new claims, waiting for running actions")
            if consumer is not None:
                consumer.stop()
            manager.stop()  # bounded by the grace that began with the signal
            heartbeat.stop()
            if listener is not None:
                listener.stop()
            if archiver is not None:
                # Within the grace: what it has not uploaded is left for the next start.
                archiver.stop(timeout=1.0)
            if runtime.local_tier is not None:
                cache.forget(url, token=runtime.local_tier.token)
            runtime.authenticator.close()
            runtime.engine.dispose()
            log.info("stopped")

    app.router.lifespan_context = lifespan
    server = _Server(
        runtime,
        uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            lifespan="on",
            # Client addresses are never taken from X-Forwarded-For.
            proxy_headers=False,
            # The C event loop and HTTP parser: less CPU per request than asyncio's loop
            # and h11 (benchmarks/events.py), the parser with a bound of our own.
            loop="uvloop",
            http=bounded_protocol(config.server.head_timeout_seconds),
            timeout_graceful_shutdown=int(config.processing.shutdown_grace_seconds),
        ),
    )
    # uvicorn re-raises the stop signal once it has shut down; a handler of our own
    # makes that a no-op, so a clean shutdown exits 0.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: None)
    # A closed terminal or SSH session hangs up: shut down as on SIGTERM (leases given
    # back, the local token removed), not killed by the signal's default.
    signal.signal(signal.SIGHUP, lambda _, frame: server.handle_exit(signal.SIGTERM, frame))
    server.run(sockets=[sock])
