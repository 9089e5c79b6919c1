"""The command line of throughput.py."""

from __future__ import annotations

import argparse

from databases import add_admin_url
from peers import PEERS


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options, checked; `peer_list` holds the peers to run."""
    parser = argparse.ArgumentParser(
        description="wq end-to-end no-op throughput on PostgreSQL (a measurement, not a test)"
    )
    parser.add_argument("--items", type=int, default=10_000, help="no-op items (default 10000)")
    parser.add_argument("--projects", type=int, default=100, help="projects (default 100)")
    parser.add_argument("--workers", type=int, default=10, help="processing workers (10)")
    parser.add_argument(
        "--phase",
        choices=("overlap", "submit-first"),
        default="overlap",
        help="overlap: submit while processing (default); submit-first: drain a backlog",
    )
    parser.add_argument("--batch", type=int, default=500, help="items per submit transaction")
    parser.add_argument(
        "--rate", type=float, default=None, help="pace submissions to this many items/s"
    )
    parser.add_argument(
        "--poll-interval", type=float, default=0.2, help="processing.poll_interval_seconds"
    )
    parser.add_argument("--no-listen", action="store_true", help="do not run LISTEN/NOTIFY")
    parser.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="processing managers on the database, each with its own engine and LISTEN (1)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="also run N-1 managers in child processes (several daemons on one database)",
    )
    parser.add_argument(
        "--no-cheap",
        action="store_true",
        help="do not mark the no-op action cheap: every item runs on a worker thread",
    )
    parser.add_argument(
        "--switch-interval",
        type=float,
        default=None,
        help="sys.setswitchinterval for the run (Python's default is 0.005 s)",
    )
    parser.add_argument(
        "--quiet-logging",
        action="store_true",
        help="log nothing (by default the run logs as `wq daemon` does, into /dev/null:"
        " every audit row a line)",
    )
    parser.add_argument(
        "--database-url",
        default=None,
        help="measure in this (PostgreSQL) database; default: a throwaway wq_bench_<pid>",
    )
    add_admin_url(parser)
    parser.add_argument("--keep-database", action="store_true", help="do not drop it afterwards")
    parser.add_argument(
        "--peers",
        default="raw,pgqueuer,pgqueuer-psycopg,procrastinate",
        help="comparison queues, comma-separated, or none (default: all of them)",
    )
    parser.add_argument(
        "--peer-threads", type=int, default=10, help="threads/concurrency of the peers (10)"
    )
    parser.add_argument(
        "--peer-rounds",
        type=int,
        default=1,
        help="run each peer N times and compare with its fastest round (1)",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="give up after N s")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead")
    parser.add_argument(
        "--statements", action="store_true", help="list the round trips per item by statement"
    )
    parser.add_argument(
        "--profile",
        metavar="PATH",
        default=None,
        help="cProfile every thread of the wq phase into PATH (pstats format); slows it down",
    )
    args = parser.parse_args(argv)
    if min(args.items, args.projects, args.workers, args.batch, args.peer_rounds) <= 0:
        parser.error("--items, --projects, --workers, --batch and --peer-rounds must be positive")
    peers = [] if args.peers in ("", "none") else args.peers.split(",")
    unknown = [peer for peer in peers if peer not in PEERS]
    if unknown:
        parser.error(f"unknown peer(s) {', '.join(unknown)}; known: {', '.join(PEERS)}")
    args.peer_list = peers
    return args
