"""Typed configuration: the YAML file, the environment, and the embedded default.

Precedence is flags > `WQ_*` environment > config file > defaults. A named config
file that is missing or invalid is an error naming the file and the key at fault;
with no config file at all the daemon runs the embedded default (SQLite under the
XDG data directory, bound to loopback).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from wq.engine.config_yaml import load_yaml, yaml_problem
from wq.engine.project_names import canonical_project, project_problem

SYSTEM_CONFIG_PATH = Path("/etc/wq/config.yml")
# The reference service's default location, looked at after wq's own.
SEED_CONFIG_PATH = Path("/etc/workqueue/config.yml")
SYSTEM_CONFIG_PATHS = (SYSTEM_CONFIG_PATH, SEED_CONFIG_PATH)
CONFIG_ENV_VARS = ("WQ_CONFIG", "WORKQUEUE_SERVICE_CONFIG")
DATABASE_ENV_VARS = ("WQ_DATABASE_URL", "DATABASE_URL")
# The audit archive, wq's own name first, then the reference service's.
AUDIT_BUCKET_ENV_VARS = ("WQ_AUDIT_S3_BUCKET", "WORKQUEUE_SERVICE_AUDIT_S3_BUCKET")
AUDIT_PREFIX_ENV_VARS = ("WQ_AUDIT_S3_PREFIX", "WORKQUEUE_SERVICE_AUDIT_S3_PREFIX")


# Upper bounds: a value past them is a typo, and a huge one would take the host down
# (threads, connections and lists sized by it at start) or overflow a date later on.
MAX_SECONDS = 30 * 24 * 3600  # every duration: 30 days
MAX_THREADS = 256  # a daemon's threads of one kind (each may hold a database connection)
MAX_COUNT = 1_000_000  # capacities, batches and other counts
# A duration in seconds: more than 0, at most `MAX_SECONDS`.
Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS)]
# The same, 0 allowed.
SecondsOrZero = Annotated[float, Field(ge=0, le=MAX_SECONDS)]
# A count of threads: 1 to `MAX_THREADS`.
Threads = Annotated[int, Field(ge=1, le=MAX_THREADS, strict=True)]
# A count: 1 to `MAX_COUNT`; a pool's capacity: 0 (none) to `MAX_COUNT`.
Count = Annotated[int, Field(ge=1, le=MAX_COUNT, strict=True)]
Capacity = Annotated[int, Field(ge=0, le=MAX_COUNT, strict=True)]
# A number of bytes: 1 to 1 GiB.
Bytes = Annotated[int, Field(ge=1, le=1024**3, strict=True)]


class ConfigError(Exception):
    """The configuration cannot be used; the message names the file and the key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerConfig(_Section):
    """Where the HTTP API listens."""

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535, strict=True)] = 8080
    # Request bodies on /api/ beyond this are refused (413) while they are read.
    max_body_bytes: Bytes = 16 * 1024 * 1024
    # A request's head must arrive in full this long after its first byte (after the
    # connection opens, for the first), its body this long after the head (408 after).
    head_timeout_seconds: Seconds = 30.0
    body_timeout_seconds: Seconds = 30.0
    # Each field of a JSON body (a task's payload, a webhook's body) is kept and written
    # back in lists: deeper or larger ones are refused (422) so every list stays readable
    # (at most 128: answers nest a payload a few levels down, the writers stop at 255).
    max_document_depth: Annotated[int, Field(ge=1, le=128, strict=True)] = 32
    max_document_bytes: Bytes = 256 * 1024
    # Threads the API's handlers run in (and, on PostgreSQL, connections of the pool the
    # hot reads await on the event loop). The daemon's Python runs on one core: more
    # threads only help while handlers wait on other services (an identity provider),
    # and each one more takes a share of the GIL from the event loop (wq.daemon.shedding).
    request_threads: Threads = 8
    # A request arriving while this many wait for one of those threads, or while
    # request_threads + this many are in progress, is answered 503 at once.
    max_waiting_requests: Count = 32
    # Output streams (`GET /api/work-items/{id}/logs`) open at once; each holds a
    # thread of its own while it lasts. One more is answered 503.
    max_output_streams: Threads = 64

    @property
    def bodies_per_caller(self) -> int:
        """Request bodies one caller may be sending at once (429 beyond): a quarter of
        the requests let in, so that a caller sending slowly leaves room for others."""
        return max(1, (self.request_threads + self.max_waiting_requests) // 4)


class DatabaseConfig(_Section):
    """How long to wait for PostgreSQL before answering 503 (the URL is `database_url`)."""

    connect_timeout_seconds: Seconds = 5.0
    statement_timeout_seconds: Seconds = 10.0


class ProcessingConfig(_Section):
    """The processing manager: worker pool, leases, retries, sweep."""

    workers: Threads = 10
    # Items of types with cheap actions a batch takes at once (wq.engine.batch). A batch
    # holds their rows (SQLite: the write lock) for its run: a median of 70-80 ms at
    # 200 while draining a backlog on 2 cores, 40-45 ms at 100. Larger batches spread
    # each batch's own statements over more items: a drain of 10,000 went from 3,300 to
    # 3,700-3,950 items/s on PostgreSQL and from 2,000 to 2,600-2,900 on SQLite.
    batch_size: Annotated[int, Field(ge=1, le=10_000, strict=True)] = 200
    lease_seconds: Seconds = 60.0
    deadline_seconds: Seconds = 60.0
    max_attempts: Count = 5
    backoff_base_seconds: Seconds = 5.0
    backoff_max_seconds: Seconds = 600.0
    sweep_interval_seconds: Seconds = 300.0
    poll_interval_seconds: Seconds = 5.0
    shutdown_grace_seconds: Seconds = 30.0
    # How often a daemon writes its row in `replicas` (`wq replicas`); one not written
    # for three of these is shown as lost.
    replica_heartbeat_seconds: Seconds = 10.0

    @model_validator(mode="after")
    def _backoff_within_its_bound(self) -> ProcessingConfig:
        if self.backoff_base_seconds > self.backoff_max_seconds:
            raise ValueError(
                f"backoff_base_seconds ({self.backoff_base_seconds:g}) is more than"
                f" backoff_max_seconds ({self.backoff_max_seconds:g})"
            )
        return self


class PoolConfig(_Section):
    """Capacity of one project's admission pools."""

    capacity: Capacity = 10
    alert_capacity: Capacity = 1
    queued_autonomous_cap: Capacity = 6


# S3's bucket naming rules (lower case, digits, dots and hyphens, 3 to 63 long).
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class AuditConfig(_Section):
    """How long audit rows are kept in the database, and their archive in S3."""

    retention_days: Annotated[int, Field(ge=1, le=36_500, strict=True)] = 30
    # Archival is on when a bucket is named (here or by WQ_AUDIT_S3_BUCKET).
    s3_bucket: str | None = None
    # Keys start with this (no leading or trailing "/"; empty: at the bucket's root).
    s3_prefix: str = "audit"
    # Entries claimed per round, and how many of them are uploaded at once.
    s3_batch_size: Annotated[int, Field(ge=1, le=1000, strict=True)] = 100
    s3_upload_threads: Annotated[int, Field(ge=1, le=64, strict=True)] = 4

    @field_validator("s3_bucket")
    @classmethod
    def _bucket_name(cls, bucket: str | None) -> str | None:
        if bucket is not None and not _BUCKET_NAME.match(bucket):
            raise ValueError(f"{bucket!r} is not an S3 bucket name")
        return bucket

    @field_validator("s3_prefix")
    @classmethod
    def _prefix(cls, prefix: str) -> str:
        if prefix.startswith("/") or prefix.endswith("/") or "//" in prefix:
            raise ValueError("must not start or end with '/' nor hold '//'")
        if len(prefix) > 512:
            raise ValueError("longer than 512 characters (S3 keys end at 1024)")
        return prefix

    @property
    def archiving(self) -> bool:
        """Whether entries are archived to S3."""
        return self.s3_bucket is not None


class AuthConfig(_Section):
    """Authentication settings known to the foundation (rules come later)."""

    # None: only while the daemon listens on a loopback address.
    local_token: bool | None = None


class EventsConfig(_Section):
    """Event intake: the GitLab webhook secret and the SQS consumer."""

    webhook_secret_env: str | None = None
    queue_url: str | None = None
    max_messages: Annotated[int, Field(ge=1, le=10, strict=True)] = 10
    wait_seconds: Annotated[int, Field(ge=0, le=20, strict=True)] = 20
    # A message decoding (decompressing) to more than this is refused, never retried.
    max_message_bytes: Annotated[int, Field(ge=64 * 1024, le=1024**3, strict=True)] = (
        4 * 1024 * 1024
    )
    # Events dated further ahead than this are refused (a bogus date would freeze items).
    max_future_skew_seconds: Annotated[int, Field(ge=0, le=MAX_SECONDS, strict=True)] = 300

    def webhook_secret(self) -> str | None:
        """The webhook secret from its environment variable (None: webhook disabled)."""
        return os.environ.get(self.webhook_secret_env) if self.webhook_secret_env else None


# A metric name prefix: a valid start of a Prometheus name, ending in "_".
MetricPrefix = Annotated[str, Field(pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*_$")]


class MetricsConfig(_Section):
    """Metric name prefixes, and how the scrape-time database gauges are computed."""

    # Generic operational metrics (HTTP) and the service's own, as the seed names them.
    prefix: MetricPrefix = "hummingbird_"
    service_prefix: MetricPrefix = "hummingbird_workqueue_"
    # Database gauges are recomputed at most this often per replica (scrapes in between
    # get the cached values), and their queries get at most this long.
    cache_seconds: Annotated[float, Field(ge=0, le=3600)] = 15.0
    budget_seconds: Annotated[float, Field(gt=0, le=60)] = 2.0


class Config(_Section):
    """The whole daemon configuration."""

    database_url: str | None = None
    database: DatabaseConfig = DatabaseConfig()
    server: ServerConfig = ServerConfig()
    processing: ProcessingConfig = ProcessingConfig()
    pools: dict[str, PoolConfig] = Field(default_factory=dict)
    audit: AuditConfig = AuditConfig()
    auth: AuthConfig = AuthConfig()
    events: EventsConfig = EventsConfig()
    metrics: MetricsConfig = MetricsConfig()
    # Validated by the daemon's authorization layer, which owns its schema.
    authorization: dict[str, Any] | None = None
    # Omitted: every known type in the embedded default, none in a config file.
    handled_types: dict[str, dict[str, Any]] | None = None
    _source: str = PrivateAttr(default="embedded default")

    @field_validator("pools")
    @classmethod
    def _pool_keys_are_paths(cls, pools: dict[str, PoolConfig]) -> dict[str, PoolConfig]:
        keyed: dict[str, PoolConfig] = {}
        for key, pool in pools.items():
            problem = None if key == "default" else project_problem(key)
            if problem is not None:
                # A key no project can have would apply to nothing, without a word.
                raise ValueError(f"pool key {key!r} must be 'default' or a project path: {problem}")
            # Matched against the projects as they are stored (`canonical_project`).
            canonical = canonical_project(key)
            if canonical in keyed:
                raise ValueError(f"pool keys {canonical!r} and {key!r} name the same project")
            keyed[canonical] = pool
        return keyed

    @property
    def source(self) -> str:
        """Where this configuration came from: a file path or "embedded default"."""
        return self._source

    @property
    def embedded(self) -> bool:
        """True when no config file was given (the laptop default)."""
        return self.source == "embedded default"

    def pool_for(self, project: str) -> PoolConfig:
        """The pool settings of a project: exact key, then longest `/` prefix, then default."""
        project = canonical_project(project)
        if project in self.pools:
            return self.pools[project]
        prefixes = [key for key in self.pools if project.startswith(key + "/")]
        if prefixes:
            return self.pools[max(prefixes, key=len)]
        return self.pools.get("default", PoolConfig())


def validation_reason(error: ErrorDetails) -> str:
    """One pydantic error as wq's messages give it: `unknown key` for a key a model
    does not know, else its reason, a validator's without pydantic's `Value error, `."""
    if error["type"] == "extra_forbidden":
        return "unknown key"
    return str(error["msg"]).removeprefix("Value error, ")


def _format_error(path: str, err: ValidationError) -> str:
    first = err.errors()[0]
    key = ".".join(str(part) for part in first["loc"]) or "(top level)"
    return f"config {path}: {key}: {validation_reason(first)}"


def parse_config(data: Any, source: str) -> Config:
    """Validate already-parsed YAML data; raise ConfigError naming the key at fault."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config {source}: (top level): must be a mapping")
    try:
        config = Config.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_error(source, err)) from None
    config._source = source
    if config.database_url:
        _check_database_url(config.database_url, f"config {source}: database_url")
    return config


def secret_problem(variable: str) -> str | None:
    """Why the secret in environment variable `variable` cannot be used, or None.

    Unset or empty; or with a space at either end, or a control character anywhere (such
    as the newline a secret made from a file keeps): sent in a header it is refused by
    the HTTP library, whose error quotes the value, or never matches what a peer sends.
    The value itself is never part of the answer.
    """
    value = os.environ.get(variable)
    if not value:
        return f"environment variable {variable} is not set"
    if value != value.strip() or any(ord(char) < 32 or ord(char) == 127 for char in value):
        return (
            f"environment variable {variable} holds a space or control character"
            " (a trailing newline?)"
        )
    return None


def require_webhook_secret(config: Config) -> None:
    """Raise ConfigError when the config names a webhook secret variable that is not set
    (or holds what `secret_problem` refuses).

    A start (and `wq config check`) asks this; commands that only reach the database
    (`wq db migrate`, `wq db current`) do not need the secret, as they do not need the
    types' tokens.
    """
    secret_env = config.events.webhook_secret_env
    problem = secret_problem(secret_env) if secret_env else None
    if problem:
        raise ConfigError(f"config {config.source}: events.webhook_secret_env: {problem}")


# A config file bigger than this is refused unread (`-c /dev/zero`, a log named by
# mistake); real ones are a few kilobytes.
MAX_CONFIG_BYTES = 16 * 1024 * 1024


def read_config_file(path: Path) -> Config:
    """Read and validate one YAML config file."""
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigError(f"config {path}: larger than {MAX_CONFIG_BYTES // 2**20} MiB")
        text = data.decode("utf-8")
    except OSError as err:
        raise ConfigError(f"config {path}: cannot read: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"config {path}: not UTF-8 text (byte {err.start})") from None
    try:
        document = load_yaml(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"config {path}: not valid YAML: {yaml_problem(err)}") from None
    return parse_config(document, str(path))


def locate_config(explicit: str | None) -> Path | None:
    """The config file to use: the flag, `WQ_CONFIG` (or `WORKQUEUE_SERVICE_CONFIG`),
    then /etc/wq/config.yml, then /etc/workqueue/config.yml."""
    if explicit:
        return Path(explicit)
    for var in CONFIG_ENV_VARS:
        if os.environ.get(var):
            return Path(os.environ[var])
    for path in SYSTEM_CONFIG_PATHS:
        if path.exists():
            return path
    return None


def load_config(explicit: str | None = None) -> Config:
    """Load the effective configuration (file or embedded default), env overrides applied."""
    path = locate_config(explicit)
    config = read_config_file(path) if path else Config()
    for var in DATABASE_ENV_VARS:
        if os.environ.get(var):
            _check_database_url(os.environ[var], f"environment variable {var}")
            config = config.model_copy(update={"database_url": os.environ[var]})
            break
    return _audit_from_env(config)


def _check_database_url(url: str, where: str) -> None:
    """Refuse a database URL wq has no driver for, or no URL at all, naming `where` it
    was given: SQLAlchemy would fail on it only when the database is first opened."""
    # Imported here: SQLAlchemy and psycopg load only once there is a URL to check.
    from wq.engine.db import url_problem

    problem = url_problem(url)
    if problem is not None:
        raise ConfigError(f"{where}: {problem}")


def _first_env(names: tuple[str, ...]) -> tuple[str, str] | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return name, value
    return None


def _audit_from_env(config: Config) -> Config:
    """`WQ_AUDIT_S3_BUCKET` / `_PREFIX` (or the reference service's names) over the file."""
    changes: dict[str, Any] = {}
    bucket = _first_env(AUDIT_BUCKET_ENV_VARS)
    if bucket is not None:
        changes["s3_bucket"] = bucket[1]
    prefix = _first_env(AUDIT_PREFIX_ENV_VARS)
    if prefix is not None:
        changes["s3_prefix"] = prefix[1]
    if not changes:
        return config
    try:
        audit = AuditConfig.model_validate({**config.audit.model_dump(), **changes})
    except ValidationError as err:
        first = err.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        source = bucket if field == "s3_bucket" else prefix
        name = source[0] if source else f"audit.{field}"
        raise ConfigError(f"environment variable {name}: {validation_reason(first)}") from None
    return config.model_copy(update={"audit": audit})


def data_dir() -> Path:
    """The XDG data directory of wq (the embedded SQLite file lives here)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "wq"


def default_database_url() -> str:
    """The embedded default database: a SQLite file under the XDG data directory."""
    return f"sqlite:///{data_dir() / 'wq.db'}"
