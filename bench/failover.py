"""A failover under load, on Sentinel and on Redis Cluster: how long producers and workers are
down, and how many jobs are lost or run twice, with and without `wait_replicas`.

    .venv/bin/python bench/failover.py [--rounds 3] [--topology sentinel|cluster|both] [--server PATH]

Each round starts a real topology on loopback ports (tests/topology.py, the same set-ups and
scenario the suite's Sentinel and Cluster tests assert on), a `sidequest worker -c 5` and a
producer pushing a job every 5 ms to queue `default`, both given only the topology's URL; once
100 jobs have run, the primary is SIGKILLed, its replica is promoted, the old primary comes back
as a replica, and the producer goes on until 100 more pushes are confirmed.
  sentinel  a primary, a replica and three Sentinels (down-after 1 s); the Sentinels promote.
  cluster   three primaries with a replica each (node timeout 1 s); the primary killed is the
            one owning `queue:{default}`, and the other two primaries' replicas vote its
            replica up. Needs redis-cli (`--cluster create`); skipped without it.
Runs are counted from a file the job appends to (Redis may lose what it held). "lost" counts
confirmed pushes that never ran; "twice" jobs that ran more than once. Prints a markdown table
and writes it to bench/results/failover-<time>.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests"), str(HERE.parent / "src")]
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent / "src"), os.environ.get("PYTHONPATH")]))

SETUPS = {
    "sentinel": "a primary, one replica, three Sentinels (down-after 1 s)",
    "cluster": "three primaries with a replica each (node timeout 1 s), the primary of `queue:{default}` killed",
}


def start(topology: str, binary: str) -> tuple[AbstractContextManager[Any], Any]:
    """(the topology to close, what `failover_under_load` drives) of one round."""
    from topology import ClusterPrimaryOf, ClusterSet, SentinelSet

    from sidequest.store.keys import CLUSTER

    if topology == "sentinel":
        sentinels = SentinelSet(binary)
        return sentinels, sentinels
    cluster = ClusterSet(binary)
    return cluster, ClusterPrimaryOf(cluster, CLUSTER.queue("default"))


def table(runs: dict[tuple[str, int], list[Any]], rounds: int, version: str) -> str:
    def cell(values: list[float], digits: int = 0) -> str:
        return f"{statistics.median(values):.{digits}f} ({max(values):.{digits}f})"

    topologies = list(dict.fromkeys(topology for topology, _ in runs))
    lines = [
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {version.split(' sha=')[0]}; "
        + "; ".join(f"{topology}: {SETUPS[topology]}" for topology in topologies)
        + f"; a push every 5 ms; {rounds} failover(s) per row. Medians, max in brackets.",
        "",
        "| topology | producer setting | confirmed pushes | refused during the switch | lost | ran twice "
        "| producer back (s) | worker running jobs (s) |",
        "|:--|:--|--:|--:|--:|--:|--:|--:|",
    ]
    for (topology, replicas), done in runs.items():
        if not done:
            continue
        lines.append(" | ".join([
            f"| {topology}", f"`wait_replicas={replicas}`",
            cell([len(r.confirmed) for r in done]), cell([len(r.unconfirmed) for r in done]),
            f"{sum(len(r.lost) for r in done)} in all", f"{sum(len(r.twice) for r in done)} in all",
            cell([r.producer_back for r in done], 1), cell([r.worker_back for r in done], 1) + " |",
        ]))
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="failovers per topology and setting (3)")
    p.add_argument("--topology", choices=["sentinel", "cluster", "both"], default="both",
                   help="which set-up fails over (both)")
    p.add_argument("--server", help="redis-server binary (default: the one the suite would use)")
    args = p.parse_args()

    import pytest
    from conftest import _server_version, redis_server_binary
    from topology import failover_under_load

    binary = args.server or redis_server_binary()
    version = _server_version(binary)
    topologies = ["sentinel", "cluster"] if args.topology == "both" else [args.topology]
    runs: dict[tuple[str, int], list[Any]] = {(t, replicas): [] for t in topologies for replicas in (1, 0)}
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="sq-failover-") as tmp:
        for round_no in range(1, args.rounds + 1):
            for topology in [t for t in topologies if t not in skipped]:
                for replicas in (1, 0):  # interleaved
                    try:
                        closing, driven = start(topology, binary)
                    except pytest.skip.Exception as exc:  # ClusterSet without redis-cli or cluster support
                        skipped[topology] = str(exc)
                        print(f"  skipping {topology}: {exc}", flush=True)
                        break
                    with closing:
                        run = failover_under_load(driven, replicas, Path(tmp))
                    runs[topology, replicas].append(run)
                    print(f"  round {round_no}/{args.rounds}  {topology}  {run.summary()}", flush=True)

    command = "bench/failover.py --rounds {}{}".format(
        args.rounds, "" if args.topology == "both" else f" --topology {args.topology}")
    lines = [table(runs, args.rounds, version), ""]
    lines += [f"Skipped {topology}: {why}" for topology, why in skipped.items()]
    lines += [f"Command: `{command}`."]
    text = "\n".join(lines) + "\n"
    print()
    print(text)
    out = HERE / "results" / f"failover-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.md"
    out.write_text(text)
    print(f"written to {out.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
