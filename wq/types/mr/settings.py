"""`handled_types.mr`: GitLab instances, per-project tokens, dashboard, cycles."""

from __future__ import annotations

import os
from functools import cached_property
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from wq.engine.config import (
    Bytes,
    Capacity,
    ConfigError,
    Count,
    Seconds,
    secret_problem,
    validation_reason,
)
from wq.types.mr.job_retry import DEFAULT_TRACE_MAX_BYTES, JobRetryConfig
from wq.types.mr.job_retry_parse import JobRetryConfigError, parse_job_retry

MANAGED_LABEL = "managed-by::workqueue"


class ProjectEntry(BaseModel):
    """A project path or group prefix and the token used for it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    token_env: Annotated[str, Field(min_length=1)]
    gitlab_url: str | None = None


class MrSettings(BaseModel):
    """Settings of the `mr` type."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gitlab_url: str = "https://gitlab.com"
    projects: dict[str, ProjectEntry] = Field(default_factory=dict)
    dashboard_base_url: str | None = None
    empty_check_interval_seconds: Seconds = 1800.0
    reconcile_interval_seconds: Seconds = 1800.0
    request_timeout_seconds: Seconds = 30.0
    job_retry: dict[str, Any] | None = None
    # Only this much of a job trace's end is kept for the retry matchers.
    job_trace_max_bytes: Bytes = DEFAULT_TRACE_MAX_BYTES
    # Per-item bounds on a submission (422 beyond them): a work item lives in one row
    # and is pushed as one GitLab commit, so neither may grow without bound.
    max_file_actions: Count = 1000
    max_file_bytes: Bytes = 10 * 1024 * 1024
    max_labels: Capacity = 50

    @cached_property
    def job_retry_config(self) -> JobRetryConfig | None:
        """The typed CI job retry config (None: no job is ever retried)."""
        return None if self.job_retry is None else parse_job_retry(self.job_retry)

    def entry_for(self, project: str) -> tuple[str, ProjectEntry] | None:
        """The project's entry: exact path first, then the longest `/`-prefix."""
        if project in self.projects:
            return project, self.projects[project]
        prefixes = [key for key in self.projects if project.startswith(key + "/")]
        if not prefixes:
            return None
        key = max(prefixes, key=len)
        return key, self.projects[key]

    def gitlab_for(self, project: str) -> tuple[str, str]:
        """The GitLab URL and token for a project; LookupError when none is configured."""
        found = self.entry_for(project)
        if found is None:
            raise LookupError(f"no GitLab token is configured for project {project}")
        _, entry = found
        token = os.environ.get(entry.token_env)
        if not token:
            raise LookupError(f"the token variable {entry.token_env} is not set")
        return (entry.gitlab_url or self.gitlab_url).rstrip("/"), token


def parse_settings(data: dict[str, Any], *, source: str = "") -> MrSettings:
    """Validate the settings; every referenced token variable must be set (fail closed)."""
    prefix = f"config {source}: handled_types.mr"
    try:
        settings = MrSettings.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        raise ConfigError(f"{prefix}.{key}: {validation_reason(first)}") from None
    try:
        settings.job_retry_config  # noqa: B018 - parse now so bad matchers refuse to start
    except JobRetryConfigError as err:
        raise ConfigError(f"{prefix}.{err}") from None
    for key, entry in settings.projects.items():
        problem = secret_problem(entry.token_env)
        if problem:
            raise ConfigError(f"{prefix}.projects.{key}.token_env: {problem}")
    return settings
