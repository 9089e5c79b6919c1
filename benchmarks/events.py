"""GitLab events applied per second, end to end: received by a real `wq daemon` through
its webhook or its SQS consumer (moto in server mode on loopback), stored, and applied
to `--items` active `mr` items (`received -> applied`).

Each event is a pipeline event for one of the items (round robin, the pipeline ids
rising per item, so none is stale): applying it records the item's head pipeline. The
daemon logs at INFO as deployed; its pools admit nothing, so that nothing but the
events runs. A run is done when no stored event waits and every item holds its last
pipeline (checked: an event applied twice or lost is an ANOMALY, exit 1).

The SQS path is shown with moto's own cost apart: the time to send the messages to
moto, and a bare boto3 loop (receive 10, delete 10) draining the same number from
moto without wq, the floor any consumer of that queue meets here.

    python benchmarks/events.py                    # 5,000 events into 1,000 items, both paths
    python benchmarks/events.py --events 20000 --senders 16 --paths webhook
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3
from api import Daemon, cpu_seconds
from databases import add_admin_url, bench_database
from loadgen import Pool, closed_loop, encode_request
from sqlalchemy import Engine, text

from wq.engine import schema
from wq.engine.db import make_engine

PROJECT = "bench/events"
SECRET_ENV = "WQ_BENCH_WEBHOOK_SECRET"
SECRET = "bench-webhook-secret"
AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}

SEED = """
WITH new AS (
    INSERT INTO work_items (id, type, project, phase, attempts, admission, lane, autonomous,
                            created_at, updated_at, stamp)
    SELECT gen_random_uuid(), 'mr', :project, 'active', 0, 'idle', 'normal', false,
           now(), now(), 0
      FROM generate_series(1, CAST(:items AS integer)) AS g
    RETURNING id
), numbered AS (SELECT id, row_number() OVER (ORDER BY id) AS n FROM new)
INSERT INTO mr_details (id, source_branch, target_branch, title, description, labels,
                        commit_message, file_actions, content_hash, generation, draft,
                        auto_merge, mr_iid, applied_labels)
SELECT id, 'wq/ev-' || n, 'main', 'bench', '', '[]', 'bench', '[]', md5(id::text), 1,
       false, false, n, '[]'
  FROM numbered
"""


def log(message: str) -> None:
    print(f"... {message}", file=sys.stderr, flush=True)


def pipeline_event(number: int, items: int) -> dict[str, Any]:
    """The `number`th event: item `number % items + 1`'s pipeline, later than the last."""
    item = number % items + 1
    return {
        "object_kind": "pipeline",
        "project": {"path_with_namespace": PROJECT},
        "object_attributes": {
            "id": 1_000_000 + number,
            "ref": f"wq/ev-{item}",
            "tag": False,
            "status": "running",
            "created_at": "2026-01-01 10:00:00 UTC",
        },
        "merge_request": None,
    }


def daemon_document(url: str, queue_url: str | None) -> dict[str, Any]:
    events: dict[str, Any] = {"webhook_secret_env": SECRET_ENV}
    if queue_url:
        events = {"queue_url": queue_url, "wait_seconds": 1}
    return {
        "database_url": url,
        "processing": {"sweep_interval_seconds": 3600},
        "pools": {"default": {"capacity": 0, "alert_capacity": 0}},
        "events": events,
        "handled_types": {
            "mr": {
                "gitlab_url": "http://127.0.0.1:9",  # never called: nothing is admitted
                "projects": {"bench": {"token_env": "WQ_BENCH_GITLAB_TOKEN"}},
            }
        },
    }


def seeded(url: str, items: int) -> Engine:
    engine = make_engine(url, pool_size=2)
    schema.upgrade(engine)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM work_items"))
        conn.execute(text(SEED), {"project": PROJECT, "items": items})
        conn.execute(text("ANALYZE"))
    return engine


def waiting(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM pending_events")).scalar_one())


def anomalies(engine: Engine, events: int, items: int) -> list[str]:
    """Items whose head pipeline is not their last event's."""
    expected = {
        f"wq/ev-{number % items + 1}": 1_000_000 + number
        for number in range(max(0, events - items), events)
    }
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT source_branch, head_pipeline_id FROM mr_details")).all()
    found = {branch: head for branch, head in rows}
    return [
        f"{branch}: head pipeline {found.get(branch)}, expected {head}"
        for branch, head in expected.items()
        if found.get(branch) != head
    ][:5]


def wait_applied(engine: Engine, timeout: float) -> float:
    """When no stored event waits any more (monotonic time)."""
    deadline = time.monotonic() + timeout
    while waiting(engine):
        if time.monotonic() > deadline:
            raise SystemExit(f"{waiting(engine)} events still waiting after {timeout:.0f} s")
        time.sleep(0.02)
    return time.monotonic()


def through_webhook(args: argparse.Namespace, url: str, root: Path) -> dict[str, Any]:
    engine = seeded(url, args.items)
    daemon = Daemon(url, root / "webhook", {}, daemon_document(url, None), {SECRET_ENV: SECRET})
    try:
        daemon.wait_ready()
        authority = f"127.0.0.1:{daemon.port}"
        headers = {"X-Gitlab-Token": SECRET, "Content-Type": "application/json"}
        requests = [
            encode_request(
                "POST",
                "/api/webhooks/gitlab",
                authority,
                None,
                json.dumps(pipeline_event(n, args.items)).encode(),
                headers,
            )
            for n in range(args.events)
        ]
        pool = Pool("127.0.0.1", daemon.port)
        cpu_before = sum(cpu_seconds(daemon.proc.pid))
        client_before = time.process_time()
        log(f"webhook: {args.events} events from {args.senders} senders")
        started = time.monotonic()
        statuses = asyncio.run(closed_loop(pool, requests, args.senders))
        received = time.monotonic()
        client_cpu = time.process_time() - client_before
        refused = [status for status in statuses if status != 202]
        if refused:
            raise SystemExit(f"webhook: {len(refused)} answers were not 202: {refused[:5]}")
        applied = wait_applied(engine, args.timeout)
        cpu = sum(cpu_seconds(daemon.proc.pid)) - cpu_before
        return {
            "path": "webhook",
            "events": args.events,
            "received_per_second": round(args.events / (received - started)),
            "applied_per_second": round(args.events / (applied - started)),
            "daemon_cpu_ms_per_event": round(cpu * 1000 / args.events, 3),
            "sender_cpu_ms_per_event": round(client_cpu * 1000 / args.events, 3),
            "anomalies": anomalies(engine, args.events, args.items),
        }
    finally:
        daemon.stop()
        engine.dispose()


def moto() -> tuple[Any, str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


def sqs_client(endpoint: str) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name=AWS["AWS_DEFAULT_REGION"],
        aws_access_key_id=AWS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=AWS["AWS_SECRET_ACCESS_KEY"],
    )


def fill_queue(sqs: Any, queue: str, bodies: list[str]) -> float:
    """Send the bodies ten at a time; the seconds it took."""
    started = time.monotonic()
    for first in range(0, len(bodies), 10):
        entries = [
            {"Id": str(index), "MessageBody": body}
            for index, body in enumerate(bodies[first : first + 10])
        ]
        sqs.send_message_batch(QueueUrl=queue, Entries=entries)
    return time.monotonic() - started


def bare_drain(sqs: Any, queue: str, count: int) -> float:
    """Receive and delete `count` messages with boto3 alone; the seconds it took."""
    started, done = time.monotonic(), 0
    while done < count:
        messages = sqs.receive_message(
            QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1
        ).get("Messages", [])
        if messages:
            entries = [
                {"Id": str(index), "ReceiptHandle": message["ReceiptHandle"]}
                for index, message in enumerate(messages)
            ]
            sqs.delete_message_batch(QueueUrl=queue, Entries=entries)
            done += len(messages)
    return time.monotonic() - started


def through_sqs(args: argparse.Namespace, url: str, root: Path) -> dict[str, Any]:
    server, endpoint = moto()
    sqs = sqs_client(endpoint)
    bodies = [json.dumps(pipeline_event(n, args.items)) for n in range(args.events)]
    try:
        floor_queue = sqs.create_queue(QueueName="wq-bench-floor")["QueueUrl"]
        log(f"sqs: moto alone, {args.events} messages sent and drained")
        send_seconds = fill_queue(sqs, floor_queue, bodies)
        drain_seconds = bare_drain(sqs, floor_queue, args.events)
        queue = sqs.create_queue(QueueName="wq-bench-events")["QueueUrl"]
        fill_queue(sqs, queue, bodies)
        engine = seeded(url, args.items)
        env = {**AWS, "AWS_ENDPOINT_URL": endpoint}
        log(f"sqs: the daemon consumes {args.events} messages")
        daemon = Daemon(url, root / "sqs", {}, daemon_document(url, queue), env)
        try:
            started = time.monotonic()
            daemon.wait_ready()
            cpu_before = sum(cpu_seconds(daemon.proc.pid))
            ready = time.monotonic()
            while int(
                sqs.get_queue_attributes(
                    QueueUrl=queue, AttributeNames=["ApproximateNumberOfMessages"]
                )["Attributes"]["ApproximateNumberOfMessages"]
            ):
                if time.monotonic() - ready > args.timeout:
                    raise SystemExit("the daemon did not drain the queue in time")
                time.sleep(0.1)
            applied = wait_applied(engine, args.timeout)
            cpu = sum(cpu_seconds(daemon.proc.pid)) - cpu_before
            result = {
                "path": "sqs",
                "events": args.events,
                "applied_per_second": round(args.events / (applied - ready)),
                "daemon_cpu_ms_per_event": round(cpu * 1000 / args.events, 3),
                "startup_seconds": round(ready - started, 2),
                "moto_send_per_second": round(args.events / send_seconds),
                "moto_bare_drain_per_second": round(args.events / drain_seconds),
                "anomalies": anomalies(engine, args.events, args.items),
            }
        finally:
            daemon.stop()
            engine.dispose()
    finally:
        server.stop()
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=5000, help="events sent (5000)")
    parser.add_argument("--items", type=int, default=1000, help="active mr items (1000)")
    parser.add_argument("--senders", type=int, default=8, help="webhook senders at once (8)")
    parser.add_argument("--paths", default="webhook,sqs", help="webhook, sqs or both")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait at most")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    add_admin_url(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs = {"webhook": through_webhook, "sqs": through_sqs}
    results = []
    load_before = os.getloadavg()[0]
    with (
        bench_database(None, args.admin_url, False, "wq_events") as url,
        tempfile.TemporaryDirectory(prefix="wq-events-") as directory,
    ):
        root = Path(directory)
        for path in args.paths.split(","):
            (root / path).mkdir()
            results.append(runs[path](args, url, root))
    report = {"load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)]}
    if args.json:
        print(json.dumps({**report, "runs": results}, indent=2))
    else:
        print(f"load average {report['load_average']}")
        for result in results:
            shown = {key: value for key, value in result.items() if key != "anomalies"}
            print(json.dumps(shown))
            for anomaly in result["anomalies"]:
                print(f"ANOMALY {result['path']}: {anomaly}")
    return 1 if any(result["anomalies"] for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
