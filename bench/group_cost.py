"""What a grouped job costs Redis (issue 40 item 3): the same no-op jobs pushed without a group and
spread over 1,000 groups, then drained by `sidequest worker` (one process), on a private redis-server;
printed as Redis commands per job by command (`INFO commandstats`, reset before each phase, the
commands run inside scripts included) with their µs a job (EVALSHA's µs include those of the
commands its script ran), and redis-server's user + system CPU a job.

    .venv/bin/python bench/group_cost.py [--jobs 5000] [--groups 1000] [--concurrency 10] [--processes 0]

An older commit is measured the same way from its source on PYTHONPATH:

    git archive 39d679b src | tar -x -C /tmp/old-cost
    PYTHONPATH=/tmp/old-cost/src .venv/bin/python bench/group_cost.py

The drain's figures include the worker's start and its graceful stop (a few dozen commands: under
0.02 a job at 5,000 jobs); this harness' own look at the queue while it waits is subtracted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redis
from common import PrivateRedis

import sidequest
from sidequest.store import keys

QUEUE = "cost"
Phase = tuple[Counter[str], Counter[str], float]  # calls by command, µs by command, redis-server CPU s
HERE = Path(__file__).resolve().parent


@sidequest.job(name="CostNoop", queue=QUEUE)
def noop(i: int) -> None:
    """Nothing: what is measured is the push, the staging, the fetch and the job's end."""


class Stats:
    """`INFO commandstats` since the last reset, less the commands this harness sent itself."""

    def __init__(self, r: Any) -> None:
        self.r = r
        self.own: Counter[str] = Counter()

    def reset(self) -> None:
        self.r.config_resetstat()
        self.own = Counter({"config": 0})

    def send(self, name: str, *args: Any) -> Any:
        self.own[name] += 1
        return self.r.execute_command(name.upper(), *args)

    def read(self) -> Phase:
        """(calls by command, µs by command, the server's CPU s) since the reset."""
        stats = self.r.info("commandstats")
        calls: Counter[str] = Counter()
        usec: Counter[str] = Counter()
        for name, entry in stats.items():
            command = name.removeprefix("cmdstat_").split("|")[0]
            calls[command] += int(entry["calls"])
            usec[command] += int(entry["usec"])
        calls.subtract(self.own)
        calls["info"] -= 1  # this read
        cpu = self.r.info("cpu")
        return +calls, usec, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def push(url: str, jobs: int, groups: int) -> None:
    client = sidequest.configure(sidequest.Config(redis_url=url))
    for start in range(0, jobs, 10_000):
        batch = [[i] for i in range(start, min(start + 10_000, jobs))]
        if groups:
            client.push_bulk(noop, batch, group=lambda i: i % groups)
        else:
            client.push_bulk(noop, batch)


def drained(stats: Stats, worker: subprocess.Popen[bytes], groups: int, timeout: float = 300) -> None:
    """Wait (every 20 ms) until the queue and its lanes are empty and no group holds a job."""
    space = keys.space(stats.r)
    base = space.lanes(QUEUE)
    deadline = time.monotonic() + timeout
    while True:
        left = stats.send("llen", space.queue(QUEUE))
        if groups:
            left += stats.send("exists", base) + stats.send("scard", f"{base}:busy")
        if not left:
            return
        if worker.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"group_cost: the worker stopped or the drain took over {timeout:.0f} s")
        time.sleep(0.02)


def measure(jobs: int, groups: int, concurrency: int, processes: int) -> dict[str, Phase]:
    """{"push": ..., "drain": ...}: each phase's (calls, µs, CPU s) on a fresh private Redis."""
    with PrivateRedis() as server:
        stats = Stats(redis.Redis.from_url(server.url))
        stats.reset()
        _, _, cpu0 = stats.read()
        push(server.url, jobs, groups)
        calls, usec, cpu1 = stats.read()
        found = {"push": (calls, usec, cpu1 - cpu0)}
        stats.reset()
        _, _, cpu0 = stats.read()
        env = {**os.environ, "REDIS_URL": server.url,
               "PYTHONPATH": os.pathsep.join(p for p in [os.environ.get("PYTHONPATH", ""), str(HERE)] if p)}
        argv = ["worker", "-r", "group_cost", "-q", QUEUE, "--processes", str(processes), "-c", str(concurrency),
                "--log-level", "warning"]
        worker = subprocess.Popen([sys.executable, "-m", "sidequest.cli", *argv], env=env)
        began = time.monotonic()
        try:
            drained(stats, worker, groups)
            took = time.monotonic() - began
        finally:
            worker.terminate()  # a graceful stop: the last jobs' ends are settled before it exits
            _, _, usage = os.wait4(worker.pid, 0)
            worker.returncode = 0
        calls, usec, cpu1 = stats.read()
        found["drain"] = (calls, usec, cpu1 - cpu0)
        found["worker"] = (Counter(), Counter(), usage.ru_utime + usage.ru_stime)
        found["wall"] = (Counter(), Counter(), took)
        return found


def table(jobs: int, phase: str, plain: Phase, grouped: Phase) -> None:
    print(f"\n{phase}: a job's Redis commands     plain   groups   (µs: plain   groups)")
    names = sorted(set(plain[0]) | set(grouped[0]), key=lambda n: -(grouped[0][n] + plain[0][n]))
    for name in names:
        a, b = plain[0][name] / jobs, grouped[0][name] / jobs
        if max(a, b) >= 0.005:
            us = plain[1][name] / jobs, grouped[1][name] / jobs
            print(f"  {name:<28} {a:7.2f}  {b:7.2f}        {us[0]:7.2f}  {us[1]:7.2f}")
    print(f"  {'all':<28} {sum(plain[0].values()) / jobs:7.2f}  {sum(grouped[0].values()) / jobs:7.2f}")
    print(f"  {'redis-server CPU µs a job':<28} {plain[2] * 1e6 / jobs:7.1f}  {grouped[2] * 1e6 / jobs:7.1f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--groups", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--processes", type=int, default=0, help="the worker's --processes (0: one process, no supervisor)")
    args = p.parse_args(argv)
    print(f"sidequest from {os.path.dirname(sidequest.__file__)}; {args.jobs:,} no-op jobs, plain and in "
          f"{args.groups:,} groups, `sidequest worker --processes {args.processes} -c {args.concurrency}`")
    plain = measure(args.jobs, 0, args.concurrency, args.processes)
    grouped = measure(args.jobs, args.groups, args.concurrency, args.processes)
    for phase in ("push", "drain"):
        table(args.jobs, phase, plain[phase], grouped[phase])
    print(f"  {'worker CPU µs a job':<28} {plain['worker'][2] * 1e6 / args.jobs:7.1f}  "
          f"{grouped['worker'][2] * 1e6 / args.jobs:7.1f}   (its start and stop included)")
    print(f"  {'drain jobs/s':<28} {args.jobs / plain['wall'][2]:7.0f}  {args.jobs / grouped['wall'][2]:7.0f}"
          f"   (from the worker's start)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
