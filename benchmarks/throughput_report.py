"""How throughput.py shows its result: a table on stdout, or one JSON document."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any

from peers import PeerResult
from wq_result import WqResult


def fmt(value: float | None, digits: int = 0) -> str:
    """A number with thousands separators and `digits` decimals; `-` for none or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def render(
    report: dict[str, Any], result: WqResult, peers: list[PeerResult], *, verbose: bool
) -> None:
    """A small table on stdout (rich when available)."""
    rows: list[tuple[str, str]] = [
        ("machine", f"{report['cpus']} cores, PostgreSQL {report['postgres']}"),
        ("wq measured", report["wq_source"]),
        ("load average", f"{report['load_before']:.2f} before, {report['load_after']:.2f} after"),
        ("logging", report["logging"]),
        (
            "wq run",
            f"{result.items:,} items, {result.projects} projects, {result.workers} workers, "
            f"phase {result.phase}, batch {result.batch}"
            + (f", rate {result.rate:g}/s" if result.rate else "")
            + (f", {result.replicas} replicas" if result.replicas > 1 else "")
            + (f", {result.processes} processes" if result.processes > 1 else "")
            + ("" if result.cheap else ", no-op not cheap (worker threads)"),
        ),
        (
            "submit",
            f"{fmt(result.submit_seconds, 2)} s ({fmt(result.submit_per_second)} items/s)",
        ),
        (
            "wq throughput",
            f"{fmt(result.items_per_second)} items/s ({fmt(result.process_seconds, 2)} s)",
        ),
        (
            "wq process CPU",
            f"{fmt(result.cpu_seconds, 2)} s over {fmt(result.wall_seconds, 2)} s wall, "
            f"{fmt(result.cpu_ms_per_item, 2)} ms/item",
        ),
        (
            "PostgreSQL CPU",
            f"{fmt(result.database_cpu_ms_per_item, 2)} ms/item (its backends for this database)"
            if not str(report["postgres"]).startswith("none")
            else "-",
        ),
        (
            "machine CPU",
            f"{fmt(result.machine_cores_busy, 2)} of {report['cpus']} cores busy "
            f"(wq process {fmt(result.cpu_seconds / result.wall_seconds, 2)}, "
            "the rest is PostgreSQL and anything else running)",
        ),
    ]
    for key, lat in result.latency.items():
        rows.append(
            (
                key.replace("_", " "),
                f"p50 {fmt(lat.p50_ms, 1)} ms  p90 {fmt(lat.p90_ms, 1)} ms  "
                f"p99 {fmt(lat.p99_ms, 1)} ms  max {fmt(lat.max_ms, 1)} ms",
            )
        )
    for peer in peers:
        if peer.skipped:
            rows.append((peer.name, f"skipped: {peer.skipped}"))
        else:
            ratio = result.items_per_second / peer.jobs_per_second if peer.jobs_per_second else 0
            rows.append(
                (
                    peer.name,
                    f"{fmt(peer.jobs_per_second)} jobs/s ({fmt(peer.seconds, 2)} s); "
                    f"wq = {ratio:.2f}x"
                    + (
                        f" (the fastest of {len(peer.rounds)} rounds: "
                        + ", ".join(fmt(rate) for rate in peer.rounds)
                        + " jobs/s)"
                        if peer.rounds
                        else ""
                    ),
                )
            )
    for section, counts in result.statements_per_item.items():
        rows.append((f"round trips/item ({section})", fmt(counts.get("TOTAL round trips"), 1)))
        if verbose:
            rows.extend(
                (f"  {key}", fmt(value, 2))
                for key, value in counts.items()
                if key != "TOTAL round trips"
            )
    for anomaly in result.anomalies:
        rows.append(("ANOMALY", anomaly))
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        width = max(len(name) for name, _ in rows)
        for name, value in rows:
            print(f"{name:<{width}}  {value}")
        return
    table = Table(title="wq no-op throughput", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_jsonable(item) for item in value]
    return value


def json_document(report: dict[str, Any], result: WqResult, peers: list[PeerResult]) -> str:
    """The report, wq's result and each peer's (with wq's ratio to it) as indented JSON."""
    document = {
        **report,
        "wq": asdict(result),
        "peers": [
            {
                **asdict(peer),
                "wq_ratio": (
                    result.items_per_second / peer.jobs_per_second if peer.jobs_per_second else None
                ),
            }
            for peer in peers
        ],
    }
    return json.dumps(_jsonable(document), indent=2, default=str)
