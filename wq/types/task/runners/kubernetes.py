"""The `kubernetes` runner: one batch/v1 Job per run, through lightkube.

The Job is named after the run id and labelled with it, the item id and the kind;
a second create of the same run is the API server's 409, taken as "already started".
Polling finds the Job by its run-id label, so a restarted daemon (or another
replica) re-attaches to the same Job. The log tail comes from the Job's newest Pod.
Jobs are deleted (with their Pods) on cancel and when the task is collected; the
Job's own `ttlSecondsAfterFinished` is the cluster-side backstop.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, cast

import httpx
from lightkube import ApiError, Client, KubeConfig
from lightkube.core import generic_client
from lightkube.resources import core_v1
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod
from lightkube.types import CascadeType

from wq.types.task.runners import (
    FAILED,
    MISSING,
    RUNNING,
    SUCCEEDED,
    RunnerUnavailable,
    RunSpec,
    RunStatus,
    tail,
)
from wq.types.task.runners.command import render_argv
from wq.types.task.settings import KubernetesRunnerConfig

# What a request raises when the API cannot be reached: lightkube 1.x talks through
# httpx2, whose errors are not httpx's (earlier releases used httpx itself).
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    httpx.HTTPError,
    generic_client.httpx.HTTPError,  # type: ignore[attr-defined]  # its own httpx
)

ITEM_LABEL = "wq.dev/item-id"
RUN_LABEL = "wq.dev/run-id"
KIND_LABEL = "wq.dev/kind"
MANAGED_BY = {"app.kubernetes.io/managed-by": "wq"}
CONTAINER = "task"
# Lines of a Pod's log read for an item's output tail on each poll; their bytes are
# streamed and only the tail kept, so one huge line costs no more memory than a short one.
TAIL_LINES = 200


def label_value(value: str) -> str:
    """A value made valid as a Kubernetes label value (63 chars, alphanumeric ends)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", value)[:63]
    return cleaned.strip("-_.")


def _named(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(entry, dict) and "name" in entry for entry in value
    )


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`override` over `base`: maps merged key by key, and lists of named entries
    (containers, env, volumes, volumeMounts) entry by entry by name, as Kubernetes'
    strategic merge does; other values replaced."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        elif _named(value) and _named(merged.get(key)):
            entries = {entry["name"]: entry for entry in merged[key]}
            for entry in value:
                old = entries.get(entry["name"])
                # An env entry's value replaces the other's (value and valueFrom clash).
                if old is None or "value" in entry or "valueFrom" in entry:
                    entries[entry["name"]] = entry
                else:
                    entries[entry["name"]] = _merge(old, entry)
            merged[key] = list(entries.values())
        else:
            merged[key] = value
    return merged


def _created_at(pod: Pod) -> datetime:
    """When a pod was created (the oldest possible time when the API did not say)."""
    created = pod.metadata.creationTimestamp if pod.metadata else None
    return created or datetime.min.replace(tzinfo=UTC)


class KubernetesRunner:
    """Runs tasks as Kubernetes Jobs."""

    name = "kubernetes"

    def __init__(
        self,
        config: KubernetesRunnerConfig,
        log_tail_bytes: int,
        client: Client | None = None,
    ) -> None:
        self.config = config
        self.log_tail_bytes = log_tail_bytes
        self._client = client

    @property
    def client(self) -> Client:
        """The API client: the configured kubeconfig, else in-cluster, else ~/.kube/config."""
        if self._client is None:
            try:
                if self.config.kubeconfig:
                    kubeconfig = KubeConfig.from_file(self.config.kubeconfig)
                else:
                    kubeconfig = KubeConfig.from_env()
            except Exception as err:  # lightkube raises several types for a bad config
                raise RunnerUnavailable(f"no Kubernetes configuration: {err}") from None
            self._client = Client(
                config=kubeconfig, namespace=self.config.namespace, field_manager="wq"
            )
        return self._client

    # ----------------------------------------------------------------- the Job

    def job_document(self, spec: RunSpec) -> dict[str, Any]:
        """The Job for one run: the runner's template, the kind's, then wq's own fields."""
        template = _merge(self.config.job or {}, spec.job or {})
        labels = {
            **MANAGED_BY,
            ITEM_LABEL: str(spec.item_id),
            RUN_LABEL: spec.run_id,
            KIND_LABEL: label_value(spec.kind),
        }
        values = {
            "id": str(spec.item_id),
            "project": spec.project,
            "kind": spec.kind,
            "repository": spec.repository or "",
            "payload": spec.payload,
        }
        image = template.pop("image", None) or self.config.image
        command = template.pop("command", None) or self.config.command or spec.command
        if not image:
            raise RunnerUnavailable(f"no image configured for kind {spec.kind!r}")
        env = {
            **self.config.env,
            **spec.env,
            "WQ_TASK_ID": str(spec.item_id),
            "WQ_RUN_ID": spec.run_id,
            "WQ_PROJECT": spec.project,
            "WQ_KIND": spec.kind,
            "WQ_REPOSITORY": spec.repository or "",
            "WQ_PAYLOAD": json.dumps(spec.payload, sort_keys=True),
        }
        container: dict[str, Any] = {
            "name": CONTAINER,
            "image": image,
            "env": [{"name": key, "value": value} for key, value in sorted(env.items())],
        }
        if command:
            container["command"] = render_argv(list(command), values)
        if self.config.resources:
            container["resources"] = self.config.resources
        pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
        if self.config.service_account:
            pod_spec["serviceAccountName"] = self.config.service_account
        document = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": spec.run_id, "labels": labels},
            "spec": {
                "backoffLimit": 0,
                "activeDeadlineSeconds": max(1, int(spec.timeout_seconds)),
                "ttlSecondsAfterFinished": self.config.ttl_seconds_after_finished,
                "template": {"metadata": {"labels": labels}, "spec": pod_spec},
            },
        }
        return _merge(template, document)

    # ----------------------------------------------------------------- the interface

    def start(self, spec: RunSpec) -> None:
        """Create the Job; an existing Job of that name is this run (attach)."""
        job = cast(Job, Job.from_dict(self.job_document(spec)))
        try:
            self.client.create(job, namespace=self.config.namespace)
        except ApiError as err:
            if err.status.code == 409:
                return
            raise RunnerUnavailable(f"creating Job {spec.run_id}: {err.status.message}") from None
        except TRANSPORT_ERRORS as err:
            raise RunnerUnavailable(f"the Kubernetes API is unreachable: {err}") from None

    def _find(self, run_id: str) -> Any | None:
        jobs = list(
            self.client.list(Job, namespace=self.config.namespace, labels={RUN_LABEL: run_id})
        )
        return jobs[0] if jobs else None

    def _newest_pod(self, run_id: str) -> Pod | None:
        pods = list(
            self.client.list(Pod, namespace=self.config.namespace, labels={"job-name": run_id})
        )
        return max(pods, key=_created_at) if pods else None

    def _log_tail(self, run_id: str) -> tuple[str, int | None]:
        pod = self._newest_pod(run_id)
        if pod is None:
            return "", None
        exit_code = None
        for status in (pod.status.containerStatuses or []) if pod.status else []:
            if status.state and status.state.terminated:
                exit_code = status.state.terminated.exitCode
        try:
            name = pod.metadata.name if pod.metadata else None
            if name is None:
                return "", exit_code
            text = self._streamed_tail(name)
        except ApiError:
            text = ""  # not started yet, or already gone
        return tail(text, self.log_tail_bytes), exit_code

    def _streamed_tail(self, pod_name: str) -> str:
        """The end of a Pod's log, its last lines streamed keeping only the tail's bytes.

        lightkube's `Client.log` reads a whole response before it yields a line, and the
        API's `limitBytes` counts from the start of the lines selected, not their end.
        """
        api = self.client._client  # lightkube's own request path, as its log() uses it
        request = api.prepare_request(
            "get",
            core_v1.PodLog,
            name=pod_name,
            namespace=self.config.namespace,
            params={"tailLines": TAIL_LINES},
        )
        response = api.send(api.build_adapter_request(request), stream=True)
        try:
            if response.is_error:
                response.read()  # the error's body names the reason
                api.raise_for_status(response)  # type: ignore[no-untyped-call]
            # Four bytes a character at most: the tail's characters are within these bytes.
            keep = 4 * self.log_tail_bytes
            kept = bytearray()
            for chunk in response.iter_bytes():
                kept += chunk
                if len(kept) > 2 * keep:
                    del kept[:-keep]
        finally:
            response.close()
        if len(kept) > keep:
            del kept[:-keep]
            # The rest of a character cut in two (at most three bytes in UTF-8).
            cut = next((i for i, byte in enumerate(kept[:3]) if not 0x80 <= byte < 0xC0), 3)
            del kept[:cut]
        return kept.decode("utf-8", errors="replace")

    def poll(self, run_id: str) -> RunStatus:
        """The Job's state, found by its run-id label."""
        try:
            job = self._find(run_id)
            if job is None:
                return RunStatus(MISSING, reason=f"no Job labelled {RUN_LABEL}={run_id}")
            conditions = (
                {c.type: c for c in (job.status.conditions or []) if c.status == "True"}
                if job.status
                else {}
            )
            log_tail, exit_code = self._log_tail(run_id)
        except ApiError as err:
            raise RunnerUnavailable(f"reading Job {run_id}: {err.status.message}") from None
        except TRANSPORT_ERRORS as err:
            raise RunnerUnavailable(f"the Kubernetes API is unreachable: {err}") from None
        if "Complete" in conditions:
            return RunStatus(SUCCEEDED, exit_code=exit_code or 0, log_tail=log_tail)
        if "Failed" in conditions:
            reason = conditions["Failed"].reason or "failed"
            code = exit_code if exit_code is not None else 1
            return RunStatus(FAILED, exit_code=code, log_tail=log_tail, reason=f"({reason})")
        return RunStatus(RUNNING, log_tail=log_tail)

    def output(self, run_id: str, *, tail_lines: int | None, follow: bool) -> Iterator[str]:
        """The log of the run's newest Pod; when following, the API server's own log
        stream (`follow=true`), after waiting for the Pod to start if it has not yet."""
        try:
            yield from self._pod_log(run_id, tail_lines, follow)
        except ApiError as err:
            raise RunnerUnavailable(f"reading the log of {run_id}: {err.status.message}") from None
        except TRANSPORT_ERRORS as err:
            raise RunnerUnavailable(f"the Kubernetes API is unreachable: {err}") from None

    def _pod_log(self, run_id: str, tail_lines: int | None, follow: bool) -> Iterator[str]:
        while True:
            pod = self._newest_pod(run_id)
            name = pod.metadata.name if pod is not None and pod.metadata else None
            if name is not None:
                try:
                    lines = self.client.log(
                        name, namespace=self.config.namespace, follow=follow, tail_lines=tail_lines
                    )
                except ApiError as err:
                    if err.status.code not in (400, 404):  # 400: its container is not started
                        raise
                else:
                    yield from lines
                    return
            if not follow or self.poll(run_id).state != RUNNING:
                return
            yield ""
            time.sleep(1.0)

    def _delete(self, run_id: str) -> None:
        try:
            self.client.delete(
                Job, run_id, namespace=self.config.namespace, cascade=CascadeType.BACKGROUND
            )
        except ApiError as err:
            if err.status.code != 404:
                raise RunnerUnavailable(f"deleting Job {run_id}: {err.status.message}") from None
        except TRANSPORT_ERRORS as err:
            raise RunnerUnavailable(f"the Kubernetes API is unreachable: {err}") from None

    def cancel(self, run_id: str) -> None:
        """Delete the Job and its Pods (the run stops; a missing Job is fine)."""
        self._delete(run_id)

    def remove(self, run_id: str) -> None:
        """Delete what is left of the run."""
        self._delete(run_id)
