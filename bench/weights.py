"""The weighted run (issue 40): do a queue's groups share its turns by their `group_weight`, and does a
weight an operator sets at run time take effect within the next 64 jobs staged from that queue?

    .venv/bin/python bench/weights.py [--seconds 60] [--skip 10] [--after 10] [--processes 2]
    make bench-weights     (BENCH_ARGS='--seconds 20 --skip 5' for a quick check)

Three tenants, groups `t1`, `t2`, `t3` of one queue with `group_weight` 1, 2 and 4 (the jobs'
option), each with a backlog of 5 ms jobs (a `time.sleep`), no concurrency or rate cap, on one
`sidequest worker --processes 2` (two worker processes under the supervisor, 10 threads each) on
a private redis-server. A feeder thread keeps every backlog above 10,000 jobs (pushes of 5,000),
so no tenant runs dry; the run says so if one did.

Shares: each job RPUSHes "<tenant> <time>" as it ends. Over the `--seconds` (60) from the first
end, the ends of the last `seconds - skip` (50) seconds are counted per tenant; each share is held
against w / 7 (±10%, relative).

The change: then `api.set_group_limits(queue, "t1", weight=4)` (weights 4, 2, 4: shares 0.4, 0.2,
0.4), and how many jobs are staged from the queue after it before t1's new share shows. Each job
RPUSHes its tenant as it starts, so that list holds the jobs in the order they left the queue,
which is the order they were staged in (a list: staged at one end, taken from the other; threads
may swap neighbours). Just before the change one MULTI reads that list's length S and the queue's
Q: the jobs after position S + Q were staged after the change (an upper bound: a job staged before
it but taken after the read, or taken and not yet started, counts as after). Before the change t1
takes 1 turn in 7, so of the first k jobs staged after it at most ceil(k / 7) + 1 are t1's; the
first k where more are shows the weight of 4, and the count is where that run of t1's turns began.
Then the shares of the ends `--after` (10) seconds on, 2 s after the change.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import PrivateRedis

import sidequest
from sidequest.api import groups, set_group_limits

QUEUE = "weighted"
DONE = "bench:weights:done"
ORDER = "bench:weights:order"
WEIGHTS = {"t1": 1, "t2": 2, "t3": 4}
CHANGED, NEW_WEIGHT = "t1", 4
GOAL_TOLERANCE = 0.10
GOAL_STAGED = 64
FLOOR, TOP_UP = 10_000, 5_000
JOB = '''
"""bench/weights.py's job: 5 ms of work, its end recorded."""
import time

import sidequest


@sidequest.job(name="WeightedWork", queue="weighted")
def work(tenant, i):
    sidequest.redis().rpush("bench:weights:order", tenant)
    time.sleep(0.005)
    sidequest.redis().rpush("bench:weights:done", f"{tenant} {time.time()!r}")
'''


class Feeder(threading.Thread):
    """Keeps every tenant's backlog above FLOOR; `hold` set: pushes nothing (around the change)."""

    def __init__(self, client: sidequest.Client) -> None:
        super().__init__(daemon=True)
        self.client, self.hold, self.stop = client, threading.Event(), threading.Event()
        self.pushed = Counter[str]()
        self.lowest: int | None = None  # the fewest jobs a tenant had waiting at a top-up, once running

    def top_up(self) -> None:
        waiting = {g.name: g.waiting for g in groups(QUEUE, client=self.client)}
        if self.is_alive():
            self.lowest = min(self.lowest if self.lowest is not None else FLOOR, *(waiting.get(t, 0) for t in WEIGHTS))
        for tenant, weight in WEIGHTS.items():
            if waiting.get(tenant, 0) < FLOOR:
                args = [[tenant, self.pushed[tenant] + i] for i in range(TOP_UP)]
                self.client.push_bulk("WeightedWork", args, queue=QUEUE, group=tenant, group_weight=weight)
                self.pushed[tenant] += TOP_UP

    def run(self) -> None:
        while not self.stop.wait(0.5):
            if not self.hold.is_set():
                self.top_up()


def shares(client: sidequest.Client, start: float, end: float) -> Counter[str]:
    """Jobs per tenant that ended in [start, end)."""
    found = Counter[str]()
    for entry in client.redis.lrange(DONE, 0, -1):
        tenant, at = entry.decode().split()
        if start <= float(at) < end:
            found[tenant] += 1
    return found


def staged_until_shown(client: sidequest.Client) -> tuple[int, str]:
    """Change t1's weight; (jobs staged after the change before its new share shows, the first 40
    after the change, a letter per job)."""
    pipe = client.redis.pipeline(transaction=True)
    pipe.llen(ORDER)
    pipe.llen(client.keys.queue(QUEUE))
    started, queued = pipe.execute()
    set_group_limits(QUEUE, CHANGED, weight=NEW_WEIGHT, client=client)
    time.sleep(3)  # the order is read once the jobs after the change have run
    after = [t.decode() for t in client.redis.lrange(ORDER, started + queued, started + queued + 2000)]
    share = WEIGHTS[CHANGED] / sum(WEIGHTS.values())
    theirs, run_began = 0, 0
    for k, tenant in enumerate(after, 1):
        if tenant != CHANGED:
            continue
        run_began = k - 1 if k == 1 or after[k - 2] != CHANGED else run_began
        theirs += 1
        if theirs > math.ceil(k * share) + 1:
            return run_began, "".join(t[-1] for t in after[:40])
    raise SystemExit(f"t1's new weight did not show in the {len(after)} jobs staged after the change")


def table(title: str, counted: Counter[str], weights: dict[str, int]) -> list[bool]:
    total, whole = sum(counted.values()), sum(weights.values())
    print(f"\n{title}: {total:,} jobs ended")
    print(f"  {'tenant':<7} {'weight':>6} {'jobs':>8} {'share':>7} {'expected':>9} {'off by':>7}  within ±10%")
    met = []
    for tenant, weight in weights.items():
        share, expected = counted[tenant] / total if total else 0.0, weight / whole
        met.append(abs(share - expected) <= GOAL_TOLERANCE * expected)
        print(f"  {tenant:<7} {weight:>6} {counted[tenant]:>8,} {share:>7.3f} {expected:>9.3f} "
              f"{share / expected - 1:>+7.1%}  {'yes' if met[-1] else 'NO'}")
    return met


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60.0, help="the weighted run, from the first job's end (60)")
    p.add_argument("--skip", type=float, default=10.0, help="its first seconds, not counted (10)")
    p.add_argument("--after", type=float, default=10.0, help="the run after the change (10)")
    p.add_argument("--processes", type=int, default=2, help="worker processes (2)")
    args = p.parse_args(argv)
    print(f"weighted run: 3 tenants, weights 1, 2, 4, 5 ms jobs, {args.processes} worker processes x 10 threads; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    with tempfile.TemporaryDirectory(prefix="sq-bench-weights-") as tmp, PrivateRedis() as server:
        (Path(tmp) / "bench_weights.py").write_text(JOB)
        client = sidequest.Client(sidequest.Config(redis_url=server.url))
        feeder = Feeder(client)
        feeder.top_up()
        feeder.top_up()  # two pushes each: 10,000 waiting
        env = {**os.environ, "REDIS_URL": server.url, "PYTHONPATH": tmp}
        worker = subprocess.Popen([sys.executable, "-m", "sidequest.cli", "worker", "-r", "bench_weights", "-q", QUEUE,
                                   "--processes", str(args.processes), "--log-level", "WARNING"], cwd=tmp, env=env)
        try:
            feeder.start()
            met, after, (staged, seen) = measure(client, feeder, worker, args)
        finally:
            feeder.stop.set()
            worker.terminate()
            worker.wait(60)
    print(f"\nthe new weight showed after {staged} jobs staged from the queue after the change (goal ≤ "
          f"{GOAL_STAGED}: {'met' if staged <= GOAL_STAGED else 'MISSED'}); the first 40 after it, by tenant: {seen}")
    print(f"shares within ±10% over the last {args.seconds - args.skip:.0f} s: {'met' if all(met) else 'MISSED'}; "
          f"after the change: {'met' if all(after) else 'missed'}; fewest waiting in a tenant's backlog: "
          f"{feeder.lowest if feeder.lowest is not None else 'n/a'} (0: it ran dry); "
          f"load average at the end {os.getloadavg()[0]:.2f}")


def measure(client: sidequest.Client, feeder: Feeder, worker: subprocess.Popen[bytes],
            args: argparse.Namespace) -> tuple[list[bool], list[bool], tuple[int, str]]:
    """The weighted run's shares, the change, the shares after it."""
    first = wait_first(client, worker)
    time.sleep(max(0.0, first + args.seconds - time.time()))
    met = table(f"ends from {args.skip:.0f} s to {args.seconds:.0f} s after the first",
                shares(client, first + args.skip, first + args.seconds), WEIGHTS)
    feeder.hold.set()
    time.sleep(0.6)  # a top-up under way is written before the waiting counts are read
    change = staged_until_shown(client)
    changed_at = time.time() - 3
    feeder.hold.clear()
    time.sleep(args.after - 1)
    after = table(f"after set_group_limits({QUEUE!r}, {CHANGED!r}, weight={NEW_WEIGHT}): ends from 2 s to "
                  f"{args.after + 2:.0f} s after it",
                  shares(client, changed_at + 2, changed_at + args.after + 2), {**WEIGHTS, CHANGED: NEW_WEIGHT})
    return met, after, change


def wait_first(client: sidequest.Client, worker: subprocess.Popen[bytes]) -> float:
    """The first job's end (the worker's start-up is not part of the run)."""
    deadline = time.monotonic() + 60
    while (got := client.redis.lindex(DONE, 0)) is None:
        if worker.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the worker ran no job (exit {worker.poll()})")
        time.sleep(0.05)
    return float(got.decode().split()[1])


if __name__ == "__main__":
    main()
