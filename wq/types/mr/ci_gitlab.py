"""GitLab calls of the CI job retry: a bounded trace tail, a pipeline's jobs, a retry.

Errors are sorted for the caller: `JobGone` (404: the job or pipeline no longer
exists), `Transient` (5xx, 429, timeouts, a cut connection: try again later) and
`Refused` (anything else GitLab answered, with its message). Tokens never appear in
messages.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import requests
from gitlab.exceptions import GitlabError

from wq.types.mr.gitlab import describe, is_transient, retry_after_seen
from wq.types.mr.job_retry import trace_tail as tail_of

# Read in chunks this big; only the last `max_bytes` are kept.
CHUNK_BYTES = 64 * 1024


class CiCallError(Exception):
    """A GitLab call of the CI retry failed; the message is readable."""


class JobGone(CiCallError):
    """GitLab answered 404: the job (or its pipeline) is gone."""


class Transient(CiCallError):
    """Worth trying again later; `retry_after` is what a 429 asked for."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Refused(CiCallError):
    """GitLab refused the call for good (401, 403, 400 ...)."""


@contextmanager
def sorted_errors() -> Iterator[None]:
    """Turn python-gitlab and network errors into JobGone / Transient / Refused."""
    try:
        yield
    except GitlabError as err:
        if err.response_code == 404:
            raise JobGone(describe(err)) from None
        if is_transient(err):
            raise Transient(describe(err), retry_after_seen()) from None
        raise Refused(describe(err)) from None
    except requests.exceptions.RequestException as err:
        # A connection cut while a trace streams is a ChunkedEncodingError: transient too.
        if is_transient(err) or isinstance(err, requests.exceptions.ChunkedEncodingError):
            raise Transient(describe(err)) from None
        raise Refused(describe(err)) from None  # a bad URL and the like: config, not luck


@dataclass(frozen=True)
class PipelineJob:
    """What the safety checks need of one job of a pipeline."""

    id: int
    name: str
    status: str


def trace_tail(project: Any, job_id: int, max_bytes: int) -> str:
    """The end of a job's trace: streamed, at most `max_bytes` kept (the cut first line
    dropped), decoded as UTF-8 with bad bytes replaced."""
    job = project.jobs.get(job_id, lazy=True)
    kept = bytearray()
    with sorted_errors():
        for chunk in job.trace(streamed=True, iterator=True, chunk_size=CHUNK_BYTES):
            kept += chunk
            # One byte more than allowed tells `tail_of` that the first line was cut.
            if len(kept) > max_bytes + 1:
                del kept[: len(kept) - max_bytes - 1]
    return tail_of(bytes(kept), max_bytes)


def pipeline_jobs(project: Any, pipeline_id: int) -> list[PipelineJob]:
    """Every job of a pipeline, retried ones included (newest first, as GitLab lists)."""
    pipeline = project.pipelines.get(pipeline_id, lazy=True)
    with sorted_errors():
        return [
            PipelineJob(int(job.id), str(job.name), str(job.status))
            for job in pipeline.jobs.list(include_retried=True, iterator=True, per_page=100)
        ]


def retry_job(project: Any, job_id: int) -> PipelineJob:
    """Retry a job through the Jobs API; the new job."""
    job = project.jobs.get(job_id, lazy=True)
    with sorted_errors():
        created = cast(dict[str, Any], job.retry())
    return PipelineJob(int(created["id"]), str(created["name"]), str(created["status"]))
