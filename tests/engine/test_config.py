"""Config parsing: defaults, pools by prefix, errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from wq.engine.config import ConfigError, load_config, parse_config, read_config_file


def test_defaults_match_the_design() -> None:
    config = parse_config({}, "x")
    assert config.processing.workers == 10
    assert config.processing.deadline_seconds == 60
    assert config.processing.max_attempts == 5
    pool = config.pool_for("any/project")
    assert (pool.capacity, pool.alert_capacity, pool.queued_autonomous_cap) == (10, 1, 6)
    assert config.server.host == "127.0.0.1"
    # A hung database is answered 503 within seconds, not waited on forever.
    assert config.database.connect_timeout_seconds == 5
    assert config.database.statement_timeout_seconds == 10
    # The reference service's metric name convention.
    assert config.metrics.prefix == "hummingbird_"
    assert config.metrics.service_prefix == "hummingbird_workqueue_"


@pytest.mark.parametrize(
    ("project", "expected"),
    [
        ("org/group/project", 1),  # exact match wins
        ("org/group/project/sub", 1),  # longest prefix on a / boundary
        ("org/group/other", 2),
        ("org/groupie/x", 3),  # not a / boundary: falls to the default
        ("elsewhere/x", 3),
    ],
)
def test_pool_lookup_exact_then_longest_prefix(project: str, expected: int) -> None:
    config = parse_config(
        {
            "pools": {
                "default": {"capacity": 3},
                "org/group": {"capacity": 2},
                "org/group/project": {"capacity": 1},
            }
        },
        "x",
    )
    assert config.pool_for(project).capacity == expected


def test_pool_keys_match_projects_however_their_accents_are_spelled() -> None:
    composed, decomposed = "\u00e9quipe", "e\u0301quipe"
    config = parse_config({"pools": {decomposed: {"capacity": 4}}}, "x")
    assert config.pool_for(f"{composed}/app").capacity == 4
    assert config.pool_for(f"{decomposed}/app").capacity == 4
    with pytest.raises(ConfigError, match="name the same project"):
        parse_config({"pools": {decomposed: {"capacity": 4}, composed: {"capacity": 1}}}, "x")


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("../x", "'.' or '..' segments"),
        ("a b", "whitespace"),
        ("group//app", "empty"),
        ("/group", "leading or trailing /"),
        ("group\\app", "backslash"),
        ("", "must not be empty"),
    ],
)
def test_a_pool_key_no_project_can_have_is_refused_naming_it(key: str, why: str) -> None:
    """`pools: {"../x": ...}` (or `a b`) passed `wq config check` and applied to nothing:
    no submission may name such a project."""
    with pytest.raises(ConfigError, match="pools") as raised:
        parse_config({"pools": {key: {"capacity": 1}}}, "x")
    assert f"pool key {key!r} must be 'default' or a project path" in str(raised.value)
    assert why in str(raised.value)
    assert "Value error" not in str(raised.value)  # pydantic's prefix, not ours


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"pools": {"default": {"capacity": -1}}}, "pools.default.capacity"),
        ({"pools": {"a/b": {"alert_capacity": 1.5}}}, "pools.a/b.alert_capacity"),
        ({"pools": {"default": {"capcity": 1}}}, "pools.default.capcity"),
        (
            {"pools": {"default": {"queued_autonomous_cap": "6"}}},
            "pools.default.queued_autonomous_cap",
        ),
        ({"processing": {"workers": 0}}, "processing.workers"),
        ({"server": {"port": 70000}}, "server.port"),
        ({"bogus": 1}, "bogus"),
        ({"database": {"statement_timeout_seconds": 0}}, "database.statement_timeout_seconds"),
        ({"database": {"connect_timeout": 5}}, "database.connect_timeout"),
        ({"audit": {"s3_bucket": "Not_A_Bucket"}}, "audit.s3_bucket"),
        ({"audit": {"s3_prefix": "/audit/"}}, "audit.s3_prefix"),
        ({"audit": {"s3_upload_threads": 0}}, "audit.s3_upload_threads"),
        ({"metrics": {"prefix": "bad-prefix_"}}, "metrics.prefix"),
        ({"metrics": {"service_prefix": "wq"}}, "metrics.service_prefix"),  # no trailing _
        ({"metrics": {"service_prefix": "9wq_"}}, "metrics.service_prefix"),
        ({"metrics": {"prefix": ""}}, "metrics.prefix"),
        ({"metrics": {"cache_seconds": -1}}, "metrics.cache_seconds"),
        ({"metrics": {"budget_seconds": 0}}, "metrics.budget_seconds"),
        ({"metrics": {"prefixes": "wq_"}}, "metrics.prefixes"),
        # Values that would exhaust the host at start or overflow a date later.
        ({"processing": {"workers": 10**23}}, "processing.workers"),
        ({"server": {"request_threads": 10**9}}, "server.request_threads"),
        ({"server": {"max_output_streams": 100_000}}, "server.max_output_streams"),
        ({"processing": {"lease_seconds": 1e308}}, "processing.lease_seconds"),
        ({"processing": {"batch_size": 10**9}}, "processing.batch_size"),
        ({"pools": {"default": {"capacity": 2**31}}}, "pools.default.capacity"),
        ({"audit": {"retention_days": 10**9}}, "audit.retention_days"),
        ({"processing": {"backoff_base_seconds": 100, "backoff_max_seconds": 1}}, "processing"),
    ],
)
def test_invalid_values_name_the_key(data: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(data, "cfg.yml")
    assert f"config cfg.yml: {key}:" in str(err.value)


def test_a_key_given_twice_is_refused_naming_it_and_its_line(tmp_path: Path) -> None:
    # PyYAML keeps the last: a setting repeated further down a file silently won.
    twice = tmp_path / "twice.yml"
    twice.write_text("server: {port: 8080}\npools: {}\nserver: {port: 9090}\n")
    with pytest.raises(
        ConfigError, match=r"twice\.yml: not valid YAML: the key 'server' is given twice \(line 3"
    ):
        read_config_file(twice)
    nested = tmp_path / "nested.yml"
    nested.write_text("pools:\n  default:\n    capacity: 1\n    capacity: 2\n")
    with pytest.raises(ConfigError, match=r"the key 'capacity' is given twice \(line 4"):
        read_config_file(nested)
    # A merge key's values may be overridden: that is what it is for.
    merged = tmp_path / "merged.yml"
    merged.write_text(
        "x-pool: &pool {capacity: 3, alert_capacity: 1}\n"
        "pools:\n  default:\n    <<: *pool\n    capacity: 5\n"
    )
    with pytest.raises(ConfigError, match="x-pool: unknown key"):  # read, then validated
        read_config_file(merged)


def test_missing_and_broken_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yml: cannot read"):
        read_config_file(tmp_path / "nope.yml")
    broken = tmp_path / "broken.yml"
    broken.write_text("pools: [unclosed\n")
    with pytest.raises(ConfigError, match=r"broken\.yml: not valid YAML"):
        read_config_file(broken)
    listy = tmp_path / "list.yml"
    listy.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        read_config_file(listy)


def test_environment_selects_file_and_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "wq.yml"
    path.write_text("database_url: sqlite:///from-file.db\nserver: {port: 9000}\n")
    monkeypatch.setenv("WQ_CONFIG", str(path))
    monkeypatch.delenv("WQ_DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    config = load_config()
    assert (config.source, config.server.port) == (str(path), 9000)
    assert config.database_url == "sqlite:///from-file.db"
    assert not config.embedded
    monkeypatch.setenv("DATABASE_URL", "postgresql://db/x")
    assert load_config().database_url == "postgresql://db/x"
    monkeypatch.setenv("WQ_DATABASE_URL", "postgresql://db/y")
    assert load_config().database_url == "postgresql://db/y"


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("garbage", "cannot be parsed as a database URL"),
        ("mysql://wq:s3cret@db/wq", "mysql:// is not supported"),
        ("postgresql://db:port/wq", "cannot be parsed as a database URL"),
    ],
)
def test_a_database_url_without_a_driver_is_refused_by_key_and_variable(
    url: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLAlchemy would fail on these only when the daemon opens the database.
    with pytest.raises(ConfigError) as err:
        parse_config({"database_url": url}, "cfg.yml")
    assert str(err.value).startswith(f"config cfg.yml: database_url: {said}")
    assert "only postgresql:// and sqlite:// URLs are supported" in str(err.value)
    assert "s3cret" not in str(err.value)
    for var in ("WQ_CONFIG", "WORKQUEUE_SERVICE_CONFIG", "WQ_DATABASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr("wq.engine.config.SYSTEM_CONFIG_PATHS", ())
    monkeypatch.setenv("DATABASE_URL", url)
    with pytest.raises(ConfigError, match=f"^environment variable DATABASE_URL: {said}"):
        load_config()


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///wq.db",
        "postgresql://wq@db/wq",
        "postgres://db/wq",
        "postgresql+psycopg://wq:pw@db:5432/wq",
    ],
)
def test_postgresql_and_sqlite_urls_are_taken(url: str) -> None:
    assert parse_config({"database_url": url}, "cfg.yml").database_url == url


def test_no_config_is_the_embedded_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("WQ_CONFIG", "WORKQUEUE_SERVICE_CONFIG", "WQ_DATABASE_URL", "DATABASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr("wq.engine.config.SYSTEM_CONFIG_PATH", Path("/nonexistent/wq.yml"))
    config = load_config()
    assert config.embedded
    assert config.database_url is None


def test_system_config_paths_wq_first_then_the_seed_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wq.engine import config as config_module

    ours, seeds = tmp_path / "etc-wq.yml", tmp_path / "etc-workqueue.yml"
    monkeypatch.setattr(config_module, "SYSTEM_CONFIG_PATHS", (ours, seeds))
    for var in ("WQ_CONFIG", "WORKQUEUE_SERVICE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    assert config_module.locate_config(None) is None
    seeds.write_text("processing: {workers: 2}\n", encoding="utf-8")
    assert config_module.locate_config(None) == seeds
    ours.write_text("processing: {workers: 3}\n", encoding="utf-8")
    assert config_module.locate_config(None) == ours
    monkeypatch.setenv("WORKQUEUE_SERVICE_CONFIG", str(seeds))
    assert load_config().processing.workers == 2


AUDIT_ENV = (
    "WQ_AUDIT_S3_BUCKET",
    "WORKQUEUE_SERVICE_AUDIT_S3_BUCKET",
    "WQ_AUDIT_S3_PREFIX",
    "WORKQUEUE_SERVICE_AUDIT_S3_PREFIX",
)


def test_audit_archive_bucket_and_prefix_from_file_then_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in AUDIT_ENV:
        monkeypatch.delenv(var, raising=False)
    path = tmp_path / "wq.yml"
    path.write_text("audit: {retention_days: 7, s3_bucket: from-file, s3_prefix: a/b}\n")
    monkeypatch.setenv("WQ_CONFIG", str(path))
    audit = load_config().audit
    assert (audit.s3_bucket, audit.s3_prefix, audit.retention_days) == ("from-file", "a/b", 7)
    assert audit.archiving
    monkeypatch.setenv("WORKQUEUE_SERVICE_AUDIT_S3_BUCKET", "seed-name")
    monkeypatch.setenv("WORKQUEUE_SERVICE_AUDIT_S3_PREFIX", "seed/prefix")
    audit = load_config().audit
    assert (audit.s3_bucket, audit.s3_prefix) == ("seed-name", "seed/prefix")
    monkeypatch.setenv("WQ_AUDIT_S3_BUCKET", "wq-name")
    config = load_config()
    assert config.audit.s3_bucket == "wq-name"
    assert config.audit.retention_days == 7  # the file's other keys stay
    assert config.source == str(path)


def test_audit_archive_is_off_by_default_and_a_bad_bucket_variable_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in (*AUDIT_ENV, "WQ_CONFIG", "WORKQUEUE_SERVICE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr("wq.engine.config.SYSTEM_CONFIG_PATHS", ())
    assert not load_config().audit.archiving
    monkeypatch.setenv("WORKQUEUE_SERVICE_AUDIT_S3_BUCKET", "s3://bucket")
    with pytest.raises(ConfigError, match="WORKQUEUE_SERVICE_AUDIT_S3_BUCKET"):
        load_config()
