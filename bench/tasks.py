"""The cost of tasks: 10,000 no-op jobs of one task (tracked) vs 10,000 plain no-op jobs
(untracked), through ONE `sidequest worker` process (reliable fetch), same private redis-server.

    .venv/bin/python bench/tasks.py [JOBS] [-c CONCURRENCY]     (defaults: 10,000 jobs, -c 10)

Tracked jobs are added with `Task.add_bulk` (one event record each) and the task is sealed; the
worker's TaskTracker then records each job twice (working, before it runs; finished, in the
MULTI that acknowledges it), and the last one completes the task. Untracked jobs are pushed with
`push_bulk` and carry no `task_id`, so the tracker passes them straight through.

The method is throughput.py's, the same for both (and it uses throughput.py's job, worker
command and readiness checks): the jobs are pushed, then renamed aside; the worker is started
and we wait until it is registered in `processes` and all its processors are blocked in their
fetch (start-up excluded); one RENAME makes every job appear at once. The job writes the time
its 1st run starts and its Nth run ends; after the Nth, we poll every millisecond until the
queue and the worker's reserved list are empty (every job acknowledged) and, for the task,
until it is marked complete, and take the time of that poll. Timed interval = first job start
to that poll. Afterwards we check: N processed, none failed, and (task) N events finished.

The push itself is timed too and shown apart (add_bulk writes the events as well); it is not
part of the worker's jobs/s. The goal is tracked/untracked >= 0.5.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

sys.path.insert(0, os.path.dirname(__file__))
from common import PrivateRedis
from throughput import PYTHON_JOB, QUEUE, STAGING, blocked_fetches, stop_worker, wait_for, worker_command

import sidequest
from sidequest.store import keys


def measure(tracked: bool, url: str, workdir: Path, jobs: int, concurrency: int) -> dict[str, float]:
    r = redis.Redis.from_url(url)
    r.flushall()
    client = sidequest.Client(sidequest.Config(redis_url=url))
    args = [[i] for i in range(jobs)]
    task = None
    started = time.perf_counter()
    if tracked:
        task = sidequest.Task.create("bench", client=client)
        task.add_bulk("BenchNoop", args, queue=QUEUE)
        task.seal()
    else:
        client.push_bulk("BenchNoop", args, queue=QUEUE)
    push_seconds = time.perf_counter() - started
    assert r.llen(keys.queue(QUEUE)) == jobs
    r.rename(keys.queue(QUEUE), STAGING)

    env = {**os.environ, "REDIS_URL": url, "BENCH_JOBS": str(jobs)}
    proc = subprocess.Popen(worker_command("sidequest-reliable", workdir, concurrency), cwd=workdir, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        identity = wait_for(lambda: next(iter(r.smembers(keys.PROCESSES)), None), 30,
                            "the worker to register", proc).decode()
        wait_for(lambda: blocked_fetches(r) >= concurrency, 30, "every processor to wait on its fetch", proc)

        r.rename(STAGING, keys.queue(QUEUE))
        got = None
        while got is None:  # a blocking pop: no polling load while the jobs run
            got = r.blpop(["bench:last"], timeout=1)
            if got is None and proc.poll() is not None:
                raise RuntimeError(f"the worker exited ({proc.returncode}) before the last job")
        pipe = r.pipeline(transaction=False)
        while True:
            pipe.llen(keys.queue(QUEUE))
            for slot in range(concurrency):
                pipe.llen(keys.reserved(identity, slot))
            if task is not None:
                pipe.hexists(keys.task(task.id), "completed_at")
            counts = pipe.execute()
            if not any(counts[:concurrency + 1]) and all(counts[concurrency + 1:]):
                end = time.time()
                break
            time.sleep(0.001)
        first = float(r.get("bench:first"))
    finally:
        code = stop_worker(proc)
    kind = "tracked" if tracked else "untracked"
    assert code == 0, f"{kind}: the worker exited with {code}"
    processed, failed = int(r.get(keys.STAT_PROCESSED) or 0), int(r.get(keys.STAT_FAILED) or 0)
    assert processed == jobs and failed == 0, f"{kind}: stat:processed={processed} stat:failed={failed}"
    if task is not None:
        status = task.status()
        assert status["done"] and status["counts"]["finished"] == jobs, f"tracked: {status}"
    seconds = end - first
    return {"seconds": seconds, "rate": jobs / seconds, "push": push_seconds}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("jobs", nargs="?", type=int, default=10_000, help="no-op jobs per run (10,000)")
    parser.add_argument("-c", "--concurrency", type=int, default=10, help="threads of the worker (10)")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="sq-bench-tasks-") as tmp, PrivateRedis() as server:
        workdir = Path(tmp)
        (workdir / "bench_noop.py").write_text(PYTHON_JOB)
        for kind in ("untracked", "tracked"):
            results[kind] = measure(kind == "tracked", server.url, workdir, args.jobs, args.concurrency)

    print(f"task tracking: {args.jobs:,} no-op jobs through one worker process, concurrency {args.concurrency},"
          f" reliable fetch ({os.cpu_count()} CPUs, shared with redis-server)")
    labels = {"untracked": "untracked (push_bulk)", "tracked": "tracked (Task.add_bulk)"}
    for kind, res in results.items():
        print(f"  {labels[kind]:<25} {res['seconds']:7.3f} s  {res['rate']:9,.0f} jobs/s"
              f"  (push {res['push']:.3f} s, not counted)")
    ratio = results["tracked"]["rate"] / results["untracked"]["rate"]
    print(f"  tracked / untracked: {ratio:.2f}  (goal >= 0.5)")
    return results


if __name__ == "__main__":
    main()
