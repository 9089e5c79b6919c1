"""What a start refuses or warns about, decided without opening the database or a port.

`wq daemon` and `wq config check` both run these, so that a config the check passes is
one the daemon takes on the same host, and the check prints the warnings a start logs.
"""

from __future__ import annotations

import ipaddress
import os
from typing import TYPE_CHECKING

from wq.daemon.auth import build_authenticator, parse_authorization
from wq.daemon.auth.setup import in_cluster_api_url
from wq.engine.archive import missing_credentials
from wq.engine.config import ConfigError
from wq.engine.sqs import EventsConfigError, queue_url_from_env, sqs_client
from wq.types import KNOWN_TYPES

if TYPE_CHECKING:
    from wq.engine.config import Config
    from wq.engine.registry import TypeRegistry


def check_startable(config: Config, registry: TypeRegistry, *, this_host: bool = True) -> None:
    """Raise ConfigError for what a start on this host would refuse, naming the key.

    The authenticator is built and dropped (no request is sent): its tiers need what
    this environment has (a cluster, CA files, an issuer). Not `this_host`: only what
    holds anywhere (the rules themselves), for a config meant for another place.
    """
    known_types = set(KNOWN_TYPES) | set(registry.names)
    if not this_host:
        parse_authorization(config, known_types)
        return
    build_authenticator(config, known_types=known_types, quiet=True).close()
    queue_url = queue_url_from_env() or config.events.queue_url
    if queue_url is not None:
        try:
            sqs_client(queue_url)
        except EventsConfigError as err:
            raise ConfigError(str(err)) from None
    problem = missing_credentials(config.audit)
    if problem:
        raise ConfigError(problem)


def is_loopback(host: str) -> bool:
    """Whether an address to listen on serves this machine only."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def start_warnings(
    config: Config, registry: TypeRegistry, *, host: str | None = None, this_host: bool = True
) -> list[str]:
    """What a start on this host would warn about: it runs, but not as meant.

    `host`: the address the daemon listens on (default: the config's). Not `this_host`:
    only what the file itself says, whatever the environment.
    """
    warnings = []
    if not config.embedded and config.handled_types is None:
        warnings.append(
            f"config {config.source} has no handled_types: this daemon handles no work-item type"
        )
    if not this_host:
        return warnings
    # Serving the network or in a cluster, a daemon is one of several replicas, which
    # share nothing through a SQLite file of their own.
    deployed = (
        not is_loopback(host or config.server.host) or in_cluster_api_url(os.environ) is not None
    )
    if not config.embedded and config.database_url is None and deployed:
        warnings.append(
            f"config {config.source} has no database_url (nor WQ_DATABASE_URL): this daemon "
            "uses a SQLite file of its own, which no other replica shares"
        )
    if "task" in registry.names:
        from wq.types.task import TaskRuntime
        from wq.types.task.settings import missing_on_this_host

        task = registry.get("task").settings
        assert isinstance(task, TaskRuntime)
        warnings += [f"handled_types.task.{found}" for found in missing_on_this_host(task.settings)]
    return warnings
