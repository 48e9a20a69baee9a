"""The acknowledgement window alone: how long a finished job stays in Redis before sidequest
acknowledges it (what a `kill -9` at that moment would run again), for the working tree and,
with --baseline REF, for sidequest as of git commit REF, in alternating rounds on one private
redis-server. The same measurement is a phase of `make bench` (harness/ackwindow.py says how).

    .venv/bin/python bench/ack_window.py [--baseline REF] [--jobs 1000] [--rounds 3] [--pin-cpu]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redis
from common import PrivateRedis
from harness import ackwindow, baseline
from harness.peers import Peer
from harness.phases import percentile
from harness.rows import Row
from harness.tree import Tree


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", metavar="REF", help="also measure sidequest as of git commit REF")
    p.add_argument("--jobs", type=int, default=1000, help="probe jobs per measurement (1,000)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (3)")
    p.add_argument("--concurrency", type=int, default=10, help="worker threads (10)")
    p.add_argument("--interval", type=float, default=0.0005, help="s between snapshots (0.0005)")
    p.add_argument("--pin-cpu", action="store_true", help="run the worker with --pin-cpu")
    return p.parse_args()


def rows(args: argparse.Namespace) -> list[Row]:
    env = (("BENCH_SIDEQUEST_ARGS", "--pin-cpu"),) if args.pin_cpu else ()
    found = [Row("sidequest", "sidequest", 1, args.concurrency, env)]
    if args.baseline:
        base = baseline.checkout(args.baseline)
        found.append(Row(f"sidequest@{base.short}", "sidequest", 1, args.concurrency, env, src=str(base.src)))
    return found


def once(peer: Peer, r: redis.Redis, args: argparse.Namespace, seed: int) -> str:
    tree = Tree(peer.start_worker(0, f"ack-{seed}"))
    try:
        if note := tree.wait_idle(60):
            print(f"  {peer.row.id}: {note}")
        found = ackwindow.measure(r, tree, args.jobs, args.interval, seed)
    finally:
        tree.stop(30)
        r.flushall()
    stays: list[ackwindow.Stay] = found["stays"]
    ms = [stay.seconds * 1000 for stay in stays]
    gaps = [gap * 1000 for gap in found["gaps"]] or [0.0]
    left = sum(not stay.acknowledged for stay in stays)
    batch = [stay.seconds * 1000 for stay in stays if stay.batch] or [0.0]
    alone = [stay.seconds * 1000 for stay in stays if not stay.batch] or [0.0]
    return (f"p50 {percentile(ms, 50):6.2f} ms  p99 {percentile(ms, 99):7.2f} ms  max {max(ms):7.2f} ms;  "
            f"p99 {percentile(batch, 99):7.2f} ms of the {sum(s.batch for s in stays)} via the batch list, "
            f"{percentile(alone, 99):7.2f} ms of those taken alone{f', {left} never acknowledged' if left else ''};  "
            f"resolution p50 {percentile(gaps, 50):.2f} ms, p99 {percentile(gaps, 99):.2f} ms")


def main() -> None:
    args = parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="sq-ack-window-"))
    with PrivateRedis() as server:
        r = redis.Redis.from_url(server.url)
        peers = [Peer(row, sys.executable, server.url, log_dir) for row in rows(args)]
        for peer in peers[1:]:
            found = baseline.imported_from(peer.python, peer.env())
            if not baseline.is_under(found.get("from", ""), peer.row.src):
                raise SystemExit(f"{peer.row.id} imports sidequest from {found}, not {peer.row.src}")
        print(f"{args.jobs} probe jobs (0 or {ackwindow.SLOW * 1000:.0f} ms, bursts of 1-{ackwindow.BURST_MAX}), "
              f"-c {args.concurrency}{' --pin-cpu' if args.pin_cpu else ''}; end -> gone from every reserved list")
        for i in range(args.rounds):
            for peer in peers if i % 2 == 0 else peers[::-1]:
                began = time.monotonic()
                line = once(peer, r, args, seed=i + 1)
                print(f"round {i + 1} {peer.row.id:<18} {line}  ({time.monotonic() - began:.0f} s)", flush=True)
    print(f"worker logs: {log_dir}")


if __name__ == "__main__":
    main()
