"""A Sentinel failover under load: how long producers and workers are down, and how many jobs
are lost or run twice, with and without `wait_replicas`.

    .venv/bin/python bench/failover.py [--rounds 3] [--server PATH]

Each round starts a real primary, a replica and three Sentinels on loopback ports
(tests/topology.py, the same set-up and scenario the suite's Sentinel test asserts on), a
`sidequest worker -c 5` and a producer pushing a job every 5 ms, both given only the Sentinel
URL; once 100 jobs have run, the primary is SIGKILLed, the Sentinels promote the replica, the
old primary comes back as a replica, and the producer goes on until 100 more pushes are
confirmed. Runs are counted from a file the job appends to (Redis may lose what it held).
"lost" counts confirmed pushes that never ran; "twice" jobs that ran more than once. Prints a
markdown table and writes it to bench/results/failover-<time>.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests"), str(HERE.parent / "src")]
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent / "src"), os.environ.get("PYTHONPATH")]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="failovers per setting (3)")
    p.add_argument("--server", help="redis-server binary (default: the one the suite would use)")
    args = p.parse_args()

    from conftest import _server_version, redis_server_binary
    from topology import FailoverRun, SentinelSet, failover_under_load

    binary = args.server or redis_server_binary()
    version = _server_version(binary)
    runs: dict[int, list[FailoverRun]] = {1: [], 0: []}
    with tempfile.TemporaryDirectory(prefix="sq-failover-") as tmp:
        for round_no in range(1, args.rounds + 1):
            for replicas in (1, 0):  # interleaved
                with SentinelSet(binary) as topology:
                    run = failover_under_load(topology, replicas, Path(tmp))
                runs[replicas].append(run)
                print(f"  round {round_no}/{args.rounds}  {run.summary()}", flush=True)

    lines = [
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {version.split(' sha=')[0]}; a primary, one replica, "
        f"three Sentinels (down-after 1 s); a push every 5 ms; {args.rounds} failover(s) per row. Medians, "
        "max in brackets.",
        "",
        "| producer setting | confirmed pushes | refused during the switch | lost | ran twice | producer back (s) "
        "| worker running jobs (s) |",
        "|:--|--:|--:|--:|--:|--:|--:|",
    ]
    for replicas, done in runs.items():
        def cell(values: list[float], digits: int = 0) -> str:
            return f"{statistics.median(values):.{digits}f} ({max(values):.{digits}f})"
        lines.append(" | ".join([
            f"| `wait_replicas={replicas}`",
            cell([len(r.confirmed) for r in done]), cell([len(r.unconfirmed) for r in done]),
            f"{sum(len(r.lost) for r in done)} in all", f"{sum(len(r.twice) for r in done)} in all",
            cell([r.producer_back for r in done], 1), cell([r.worker_back for r in done], 1) + " |",
        ]))
    lines += ["", f"Command: `bench/failover.py --rounds {args.rounds}`."]
    text = "\n".join(lines) + "\n"
    print()
    print(text)
    out = HERE / "results" / f"failover-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.md"
    out.write_text(text)
    print(f"written to {out.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
