"""A fake Kubernetes API server for batch/v1 Jobs and their Pods' logs, on loopback.

Real clients (lightkube) talk to it unchanged over HTTP with a Bearer token. It is
as strict as the API server where wq could go wrong: names must be DNS-1123 labels,
labels valid, a second create of a name is 409 AlreadyExists, unknown objects are
404 NotFound as a `Status`, and a wrong token is 401. Creating a Job creates one
Pod labelled `job-name`; tests then end it with `finish()` and set its log.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.loopback import Answer, LoopbackListener

NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
JOBS = re.compile(r"^/apis/batch/v1/namespaces/([^/]+)/jobs(?:/([^/]+))?$")
# Kubernetes' pattern of a resource quantity, written out again (not imported from wq).
QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?(/log)?$")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str) -> Answer:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return code, {"Content-Type": "application/json"}, json.dumps(body).encode()


def _json(document: Any, code: int = 200) -> Answer:
    return code, {"Content-Type": "application/json"}, json.dumps(document).encode()


def _selector(query: dict[str, list[str]]) -> dict[str, str] | None:
    raw = query.get("labelSelector", [""])[0]
    if not raw:
        return {}
    wanted = {}
    for term in raw.split(","):
        key, sep, value = term.partition("=")
        if not sep or not key:
            return None  # only equality selectors are supported here
        wanted[key] = value.lstrip("=")
    return wanted


def _matches(obj: dict[str, Any], wanted: dict[str, str]) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return all(labels.get(key) == value for key, value in wanted.items())


@dataclass
class FakeKubernetes:
    """The fake API server: Jobs and Pods per namespace, one token."""

    token: str = "fake-k8s-token"
    jobs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    down: bool = False

    def __post_init__(self) -> None:
        self._lock = threading.RLock()
        self._listener = LoopbackListener(self._serve, name="fake-kubernetes")

    # ----------------------------------------------------------------- lifecycle

    def __enter__(self) -> FakeKubernetes:
        self._listener.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._listener.stop()

    @property
    def url(self) -> str:
        """The API server's base URL."""
        return self._listener.url()

    def kubeconfig(self, namespace: str = "agents") -> dict[str, Any]:
        """A kubeconfig document pointing at this fake."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "wq", "user": {"token": self.token}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "wq", "namespace": namespace},
                }
            ],
            "current-context": "fake",
        }

    # ----------------------------------------------------------------- test controls

    def job(self, name: str, namespace: str = "agents") -> dict[str, Any] | None:
        """A Job as stored, or None."""
        with self._lock:
            return self.jobs.get((namespace, name))

    def finish(
        self,
        name: str,
        *,
        succeeded: bool,
        exit_code: int | None = None,
        log: str = "",
        reason: str = "BackoffLimitExceeded",
        namespace: str = "agents",
    ) -> None:
        """End a Job's pod and mark the Job Complete or Failed (with `reason`)."""
        with self._lock:
            job = self.jobs[(namespace, name)]
            code = exit_code if exit_code is not None else (0 if succeeded else 1)
            for (ns, _), pod in self.pods.items():
                if ns == namespace and pod["metadata"]["labels"].get("job-name") == name:
                    pod["status"] = {
                        "phase": "Succeeded" if succeeded else "Failed",
                        "containerStatuses": [
                            {
                                "name": "task",
                                "ready": False,
                                "restartCount": 0,
                                "image": "x",
                                "imageID": "",
                                "state": {"terminated": {"exitCode": code, "reason": "Completed"}},
                            }
                        ],
                    }
                    self.logs[(namespace, pod["metadata"]["name"])] = log
            condition = {
                "type": "Complete" if succeeded else "Failed",
                "status": "True",
                "lastTransitionTime": _now(),
            }
            if not succeeded:
                condition["reason"] = reason
            job["status"] = {
                "startTime": job["status"].get("startTime"),
                "succeeded" if succeeded else "failed": 1,
                "conditions": [condition],
            }

    def set_log(self, name: str, log: str, namespace: str = "agents") -> None:
        """Set the log of a Job's pod while it runs."""
        with self._lock:
            for (ns, pod_name), pod in self.pods.items():
                if ns == namespace and pod["metadata"]["labels"].get("job-name") == name:
                    self.logs[(ns, pod_name)] = log

    # ----------------------------------------------------------------- serving

    def _serve(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Answer:
        parts = urlsplit(target)
        with self._lock:
            self.requests.append((method, target))
            if self.down:
                return _status(503, "ServiceUnavailable", "the fake API server is down")
        auth = {k.lower(): v for k, v in headers.items()}.get("authorization", "")
        if auth != f"Bearer {self.token}":
            return _status(401, "Unauthorized", "Unauthorized")
        query = parse_qs(parts.query)
        with self._lock:
            jobs = JOBS.match(parts.path)
            if jobs:
                return self._jobs(method, jobs.group(1), jobs.group(2), query, body)
            pods = PODS.match(parts.path)
            if pods and method == "GET":
                return self._pods(pods.group(1), pods.group(2), bool(pods.group(3)), query)
        return _status(404, "NotFound", f"the server could not find {parts.path}")

    def _jobs(
        self,
        method: str,
        namespace: str,
        name: str | None,
        query: dict[str, list[str]],
        body: bytes,
    ) -> Answer:
        if name is None and method == "POST":
            return self._create(namespace, json.loads(body or b"{}"))
        if name is None and method == "GET":
            wanted = _selector(query)
            if wanted is None:
                return _status(400, "BadRequest", "unsupported label selector")
            items = [
                job
                for (ns, _), job in sorted(self.jobs.items())
                if ns == namespace and _matches(job, wanted)
            ]
            return _json(
                {"kind": "JobList", "apiVersion": "batch/v1", "metadata": {}, "items": items}
            )
        if name is not None and method in ("GET", "DELETE"):
            job = self.jobs.get((namespace, name))
            if job is None:
                return _status(404, "NotFound", f'jobs.batch "{name}" not found')
            if method == "GET":
                return _json(job)
            del self.jobs[(namespace, name)]
            self.deleted.append(name)
            for key in [
                k
                for k, pod in self.pods.items()
                if pod["metadata"]["labels"].get("job-name") == name
            ]:
                del self.pods[key]
            return _json({"kind": "Status", "apiVersion": "v1", "status": "Success"})
        return _status(405, "MethodNotAllowed", f"{method} is not supported here")

    def _create(self, namespace: str, job: dict[str, Any]) -> Answer:
        metadata = job.get("metadata") or {}
        name = metadata.get("name", "")
        if job.get("kind") != "Job" or job.get("apiVersion") != "batch/v1":
            return _status(400, "BadRequest", "expected a batch/v1 Job")
        if not name or len(name) > 63 or not NAME.match(name):
            return _status(422, "Invalid", f'Job.batch "{name}" is invalid: metadata.name')
        for key, value in (metadata.get("labels") or {}).items():
            if len(str(value)) > 63 or not LABEL_VALUE.match(str(value)):
                return _status(422, "Invalid", f"metadata.labels: Invalid value: {value!r} ({key})")
        template = (job.get("spec") or {}).get("template") or {}
        containers = (template.get("spec") or {}).get("containers") or []
        if not containers or not all(c.get("image") and c.get("name") for c in containers):
            return _status(422, "Invalid", "spec.template.spec.containers: Required value")
        if (template.get("spec") or {}).get("restartPolicy") not in ("Never", "OnFailure"):
            return _status(422, "Invalid", "spec.template.spec.restartPolicy: Unsupported value")
        if metadata.get("namespace") not in (None, namespace):
            return _status(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the"
                " request",
            )
        for index, container in enumerate(containers):
            for part in ("limits", "requests"):
                for resource, amount in (
                    (container.get("resources") or {}).get(part) or {}
                ).items():
                    if not QUANTITY.match(str(amount)) or str(amount).startswith("-"):
                        return _status(
                            422,
                            "Invalid",
                            f"spec.template.spec.containers[{index}].resources.{part}[{resource}]:"
                            f" Invalid value: {amount!r}: quantities must match the regular"
                            " expression",
                        )
        if (namespace, name) in self.jobs:
            return _status(409, "AlreadyExists", f'jobs.batch "{name}" already exists')
        uid = str(uuid.uuid4())
        stored = json.loads(json.dumps(job))
        stored["metadata"].update(
            namespace=namespace, uid=uid, creationTimestamp=_now(), resourceVersion="1"
        )
        stored["status"] = {"startTime": _now(), "active": 1}
        self.jobs[(namespace, name)] = stored
        pod_name = f"{name}-{uid[:5]}"
        labels = {**(template.get("metadata") or {}).get("labels", {}), "job-name": name}
        self.pods[(namespace, pod_name)] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": namespace,
                "labels": labels,
                "creationTimestamp": _now(),
            },
            "spec": template.get("spec"),
            "status": {"phase": "Running"},
        }
        return _json(stored, 201)

    def _pods(
        self, namespace: str, name: str | None, log: bool, query: dict[str, list[str]]
    ) -> Answer:
        if name is None:
            wanted = _selector(query)
            if wanted is None:
                return _status(400, "BadRequest", "unsupported label selector")
            items = [
                pod
                for (ns, _), pod in sorted(self.pods.items())
                if ns == namespace and _matches(pod, wanted)
            ]
            return _json({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
        if (namespace, name) not in self.pods:
            return _status(404, "NotFound", f'pods "{name}" not found')
        if not log:
            return _json(self.pods[(namespace, name)])
        text = self.logs.get((namespace, name), "")
        tail = query.get("tailLines", [""])[0]
        start = 0
        if tail:  # the start of the last `tail` lines, found without copying the log
            start = len(text)
            for _ in range(int(tail)):
                start = text.rfind("\n", 0, max(start - 1, 0)) + 1
                if start == 0:
                    break
        shown = text[start:] if start else text
        if query.get("follow", [""])[0] == "true":
            return 200, {"Content-Type": "text/plain"}, self._follow(namespace, name, shown, text)
        # Streamed in chunks, as the API server sends a log.
        chunks = (shown[at : at + 65536].encode() for at in range(0, len(shown), 65536))
        return 200, {"Content-Type": "text/plain"}, chunks

    def _follow(self, namespace: str, name: str, shown: str, seen: str) -> Iterator[bytes]:
        """The log as the API server streams it with `follow=true`: what is there, then
        what the container writes, until the pod has ended (or is deleted)."""
        yield shown.encode()
        while True:
            with self._lock:
                pod = self.pods.get((namespace, name))
                text = self.logs.get((namespace, name), "")
            if text.startswith(seen) and len(text) > len(seen):
                yield text[len(seen) :].encode()
                seen = text
            if pod is None or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                return
            time.sleep(0.05)
