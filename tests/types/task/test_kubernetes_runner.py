"""The `kubernetes` runner against the fake API server, alone and through the daemon."""

from __future__ import annotations

import threading
import tracemalloc
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Store
from tests.fakes.kubernetes import FakeKubernetes
from tests.types.task.helpers import KINDS, submit, task, task_daemon, wait
from wq.engine.models import utcnow
from wq.types.task import TaskRuntime
from wq.types.task.gc import collect
from wq.types.task.runners import FAILED, MISSING, RUNNING, SUCCEEDED, RunnerUnavailable, RunSpec
from wq.types.task.runners.kubernetes import ITEM_LABEL, RUN_LABEL, KubernetesRunner
from wq.types.task.settings import KubernetesRunnerConfig


@pytest.fixture
def fake() -> Iterator[FakeKubernetes]:
    with FakeKubernetes() as server:
        yield server


def kubeconfig(fake: FakeKubernetes, tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(fake.kubeconfig()))
    return str(path)


def runner_config(fake: FakeKubernetes, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "namespace": "agents",
        "kubeconfig": kubeconfig(fake, tmp_path),
        "image": "registry.example/agent:1",
        "service_account": "agent",
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
        "env": {"AGENT_MODE": "batch"},
        **extra,
    }


def make_runner(fake: FakeKubernetes, tmp_path: Path) -> KubernetesRunner:
    config = KubernetesRunnerConfig.model_validate(runner_config(fake, tmp_path))
    return KubernetesRunner(config, log_tail_bytes=100)


def job_kinds(**fields: Any) -> dict[str, Any]:
    """The test kinds and `issueLifecycle`, a repository-scoped kind run as a Job."""
    job = {"scope": "repository", "runner": "kubernetes", "command": ["agent"], **fields}
    return {**KINDS, "issueLifecycle": job}


def spec(run_id: str = "wq-run-1", **fields: Any) -> RunSpec:
    values: dict[str, Any] = {
        "run_id": run_id,
        "item_id": uuid.uuid4(),
        "project": "shop",
        "kind": "issueLifecycle",
        "repository": "shop/api",
        "payload": {"issue": 7},
        "timeout_seconds": 900,
        "command": ["agent", "lifecycle", "{repository}", "{payload[issue]}"],
    }
    values.update(fields)
    return RunSpec(**values)


def test_a_job_is_created_labelled_from_the_template_and_followed(
    fake: FakeKubernetes, tmp_path: Path
) -> None:
    runner = make_runner(fake, tmp_path)
    run = spec()
    runner.start(run)
    job = fake.job("wq-run-1")
    assert job is not None
    labels = job["metadata"]["labels"]
    assert labels[RUN_LABEL] == "wq-run-1" and labels[ITEM_LABEL] == str(run.item_id)
    assert labels["wq.dev/kind"] == "issueLifecycle"
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "agent" and pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    assert container["image"] == "registry.example/agent:1"
    assert container["command"] == ["agent", "lifecycle", "shop/api", "7"]
    env = {entry["name"]: entry["value"] for entry in container["env"]}
    assert env["AGENT_MODE"] == "batch" and env["WQ_PAYLOAD"] == '{"issue": 7}'
    assert job["spec"]["activeDeadlineSeconds"] == 900

    fake.set_log("wq-run-1", "working\n")
    status = runner.poll("wq-run-1")
    assert status.state == RUNNING and status.log_tail == "working\n"
    fake.finish("wq-run-1", succeeded=True, log="working\nall done\n")
    done = runner.poll("wq-run-1")
    assert done.state == SUCCEEDED and done.exit_code == 0 and "all done" in done.log_tail


def test_a_kinds_job_template_adds_to_the_runs_container_and_keeps_other_containers(
    fake: FakeKubernetes, tmp_path: Path
) -> None:
    """Credentials mounted into the run's container by name (as in a Deployment) reach
    it: the template's containers are merged by name, not replaced."""
    runner = make_runner(fake, tmp_path)
    secret_env = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "t", "key": "k"}}}
    template = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "task",
                            "envFrom": [{"secretRef": {"name": "agent-credentials"}}],
                            "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                            "env": [secret_env],
                        },
                        {"name": "proxy", "image": "registry.example/proxy:2"},
                    ],
                    "volumes": [{"name": "cache", "emptyDir": {}}],
                }
            }
        }
    }
    runner.start(spec(job=template))
    job = fake.job("wq-run-1")
    assert job is not None
    containers = {c["name"]: c for c in job["spec"]["template"]["spec"]["containers"]}
    assert set(containers) == {"task", "proxy"}
    task_container = containers["task"]
    assert task_container["image"] == "registry.example/agent:1"
    assert task_container["envFrom"] == [{"secretRef": {"name": "agent-credentials"}}]
    assert task_container["volumeMounts"] == [{"name": "cache", "mountPath": "/cache"}]
    env = {entry["name"]: entry for entry in task_container["env"]}
    assert env["TOKEN"] == secret_env and env["WQ_RUN_ID"]["value"] == "wq-run-1"
    assert containers["proxy"]["image"] == "registry.example/proxy:2"


def test_the_pods_log_is_followed_through_the_api_until_the_pod_ends(
    fake: FakeKubernetes, tmp_path: Path
) -> None:
    runner = make_runner(fake, tmp_path)
    runner.start(spec())
    fake.set_log("wq-run-1", "one\n")
    received: list[str] = []

    def follow() -> None:
        received.extend(runner.output("wq-run-1", tail_lines=None, follow=True))

    follower = threading.Thread(target=follow)
    follower.start()
    wait(lambda: "".join(received) == "one\n", message="the first line")
    fake.set_log("wq-run-1", "one\ntwo\n")
    wait(lambda: "".join(received) == "one\ntwo\n", message="a line written later")
    assert follower.is_alive()  # the pod still runs: the stream stays open
    fake.finish("wq-run-1", succeeded=True, log="one\ntwo\nthree\n")
    follower.join(timeout=30)
    assert not follower.is_alive() and "".join(received) == "one\ntwo\nthree\n"
    assert any("/log?" in target and "follow=true" in target for _, target in fake.requests)
    last = "".join(runner.output("wq-run-1", tail_lines=1, follow=False))
    assert last == "three\n"


def test_failure_and_deadline_keep_exit_code_reason_and_tail(
    fake: FakeKubernetes, tmp_path: Path
) -> None:
    runner = make_runner(fake, tmp_path)
    runner.start(spec("wq-run-1"))
    runner.start(spec("wq-run-2"))
    fake.finish("wq-run-1", succeeded=False, exit_code=3, log="x\n" * 200 + "boom\n")
    failed = runner.poll("wq-run-1")
    assert failed.state == FAILED and failed.exit_code == 3
    assert failed.log_tail.endswith("boom\n") and len(failed.log_tail) <= 100
    fake.finish("wq-run-2", succeeded=False, reason="DeadlineExceeded")
    assert runner.poll("wq-run-2").reason == "(DeadlineExceeded)"


def test_a_huge_log_line_is_streamed_for_its_tail_not_held_whole(
    fake: FakeKubernetes, tmp_path: Path
) -> None:
    runner = make_runner(fake, tmp_path)
    runner.start(spec("wq-run-1"))
    huge = "é" * 10_000_000 + "the end\n"  # one 20 MB line, as a program may print
    fake.finish("wq-run-1", succeeded=True, log="first\n" + huge)
    runner.poll("wq-run-1")  # the client's first request sets up its connection
    tracemalloc.start()
    try:
        done = runner.poll("wq-run-1")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert done.state == SUCCEEDED and done.log_tail.endswith("éthe end\n")
    assert len(done.log_tail) <= 100 and "\ufffd" not in done.log_tail
    assert peak < 4_000_000  # the whole line read at once takes over 40 MB


def test_a_second_start_and_a_new_runner_attach_by_label(
    fake: FakeKubernetes, tmp_path: Path
) -> None:
    runner = make_runner(fake, tmp_path)
    runner.start(spec())
    runner.start(spec())  # 409 from the API server: already started
    assert sum(1 for method, path in fake.requests if method == "POST") == 2
    assert len(fake.jobs) == 1
    restarted = make_runner(fake, tmp_path)  # knows nothing in memory
    assert restarted.poll("wq-run-1").state == RUNNING
    assert any("labelSelector=wq.dev%2Frun-id%3Dwq-run-1" in path for _, path in fake.requests)
    restarted.cancel("wq-run-1")
    assert fake.job("wq-run-1") is None and fake.pods == {}
    assert restarted.poll("wq-run-1").state == MISSING
    restarted.cancel("wq-run-1")  # a missing Job is fine


def test_an_unreachable_or_refusing_api_is_a_start_failure(
    fake: FakeKubernetes, tmp_path: Path
) -> None:
    runner = make_runner(fake, tmp_path)
    fake.down = True
    with pytest.raises(RunnerUnavailable, match="the fake API server is down"):
        runner.start(spec())
    fake.down = False
    with pytest.raises(RunnerUnavailable, match="is invalid"):
        runner.start(spec("Not_A_Name"))
    config = KubernetesRunnerConfig.model_validate(
        {"kubeconfig": kubeconfig(fake, tmp_path), "namespace": "agents"}
    )
    with pytest.raises(RunnerUnavailable, match="no image"):
        KubernetesRunner(config, 100).start(spec())
    assert fake.jobs == {}
    # What `wq config check` refuses (job_checks), the API server refuses on every start
    # (a template's other namespace lightkube refuses before sending).
    template = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "proxy", "image": "p", "resources": {"limits": {"cpu": "two"}}}
                    ]
                }
            }
        }
    }
    config = KubernetesRunnerConfig.model_validate(runner_config(fake, tmp_path, job=template))
    with pytest.raises(RunnerUnavailable, match="quantities must match"):
        KubernetesRunner(config, 100).start(spec())
    assert fake.jobs == {}


def test_an_api_that_cannot_be_reached_is_a_start_failure_and_a_lost_read(
    fake: FakeKubernetes, tmp_path: Path
) -> None:
    """lightkube 1.x raises httpx2's errors, not httpx's: a refused connection escaped
    as an unexpected error (counted against max_attempts, the slot kept)."""
    runner = make_runner(fake, tmp_path)
    fake.__exit__(None, None, None)  # the API server is gone: connections are refused
    with pytest.raises(RunnerUnavailable, match="the Kubernetes API is unreachable"):
        runner.start(spec())
    with pytest.raises(RunnerUnavailable, match="the Kubernetes API is unreachable"):
        runner.poll("wq-run-1")


def test_tasks_run_as_jobs_through_the_daemon_and_jobs_go_with_gc(
    store: Store, tmp_path: Path, fake: FakeKubernetes
) -> None:
    kinds = job_kinds()
    runners = {"kubernetes": runner_config(fake, tmp_path)}
    with task_daemon(store, tmp_path / "runs", kinds=kinds, runners=runners) as (runtime, client):
        ok = submit(client, "issueLifecycle", repository="shop/api", payload={"issue": 1})
        bad = submit(client, "issueLifecycle", repository="shop/web", payload={"issue": 2})
        ok_run = wait(lambda: task(runtime, ok["id"]).run_id, message="first Job")
        bad_run = wait(lambda: task(runtime, bad["id"]).run_id, message="second Job")
        fake.finish(ok_run, succeeded=True, log="fixed\n")
        fake.finish(bad_run, succeeded=False, exit_code=2, log="cannot\n")
        done = wait(lambda: (t := task(runtime, ok["id"])).phase != "active" and t, message="ok")
        failed = wait(lambda: (t := task(runtime, bad["id"])).phase != "active" and t, message="x")
        assert done.phase == "completed" and done.log_tail == "fixed\n"
        assert failed.phase == "failed" and "exit status 2" in (failed.error or "")
        assert "cannot" in (failed.error or "")
        bundle = runtime.registry.get("task").settings
        assert isinstance(bundle, TaskRuntime)
        later = utcnow() + timedelta(days=2)
        assert collect(runtime.sessions, bundle.runners, ttl=timedelta(days=1), now=later) == 2
        assert fake.jobs == {} and sorted(fake.deleted) == sorted([ok_run, bad_run])


def test_a_replica_without_the_runner_leaves_a_running_job_to_one_that_has_it(
    store: Store, tmp_path: Path, fake: FakeKubernetes
) -> None:
    """A rolling update that adds the `kubernetes` runner: a replica without it that
    comes to follow a Job another started retries later instead of failing the task."""
    kinds = job_kinds()
    runners = {"kubernetes": runner_config(fake, tmp_path)}
    with task_daemon(store, tmp_path / "runs", kinds=kinds, runners=runners) as (first, client):
        item = submit(client, "issueLifecycle", repository="shop/api", payload={"issue": 1})
        run_id = wait(lambda: task(first, item["id"]).run_id, message="the Job")
        assert first.manager is not None
        first.manager.stop(grace=2)
        with task_daemon(store, tmp_path / "runs-b") as (without, _):
            wait(
                lambda: (
                    "runner 'kubernetes' is not configured here"
                    in (task(without, item["id"]).error or "")
                ),
                message="the replica without the runner left it",
            )
            assert task(without, item["id"]).phase == "active"
        fake.finish(run_id, succeeded=True, log="fixed\n")
        with task_daemon(store, tmp_path / "runs", kinds=kinds, runners=runners) as (again, _):
            done = wait(
                lambda: (t := task(again, item["id"])).phase != "active" and t,
                message="followed by a replica with the runner",
            )
        assert done.phase == "completed", done.error
        assert done.run_id == run_id and done.log_tail == "fixed\n"  # the same Job


def test_a_running_job_outlives_an_api_outage(
    store: Store, tmp_path: Path, fake: FakeKubernetes
) -> None:
    """The API answering errors for a while (more checks than `max_attempts`) failed the
    task while its Job ran on; now it is looked at again until the API answers."""
    kinds = job_kinds(timeout_seconds=600)
    runners = {"kubernetes": runner_config(fake, tmp_path)}
    with task_daemon(store, tmp_path / "runs", kinds=kinds, runners=runners) as (runtime, client):
        item = submit(client, "issueLifecycle", repository="shop/api", payload={"issue": 1})
        run_id = wait(lambda: task(runtime, item["id"]).run_id, message="the Job")
        fake.down = True
        polls = len(fake.requests)
        wait(lambda: len(fake.requests) > polls + 12, message="checks during the outage")
        assert task(runtime, item["id"]).phase == "active"
        fake.down = False
        fake.finish(run_id, succeeded=True, log="fixed\n")
        done = wait(lambda: (t := task(runtime, item["id"])).phase != "active" and t, message="x")
    assert done.phase == "completed", done.error


def test_a_cancel_outlasts_an_api_outage(
    store: Store, tmp_path: Path, fake: FakeKubernetes
) -> None:
    """A cancel that cannot reach the API (more tries than `max_attempts`) failed the
    task, freeing its slot while its Job ran on; now it is tried until the API answers."""
    kinds = job_kinds()
    runners = {"kubernetes": runner_config(fake, tmp_path)}
    with task_daemon(store, tmp_path / "runs", kinds=kinds, runners=runners) as (runtime, client):
        item = submit(client, "issueLifecycle", repository="shop/api", payload={"issue": 1})
        run_id = wait(lambda: task(runtime, item["id"]).run_id, message="the Job")
        fake.down = True
        assert client.post(f"/api/work-items/{item['id']}/cancel").status_code == 202
        attempts = runtime.config.processing.max_attempts
        wait(lambda: task(runtime, item["id"]).attempts > attempts + 1, message="tries")
        waiting = task(runtime, item["id"])
        assert waiting.phase == "active", waiting.error
        assert "cannot reach the run to cancel it" in (waiting.error or "")
        fake.down = False
        done = wait(lambda: (t := task(runtime, item["id"])).phase != "active" and t, message="x")
    assert done.phase == "cancelled", done.error
    assert run_id in fake.deleted
