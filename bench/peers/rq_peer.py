# requires: rq>=2.0 redis>=5
"""RQ as a benchmark peer (see `_peer` for the contract).

Fast configuration: `rq worker-pool bench -n P -w rq.worker.SimpleWorker -q`. RQ's
default `Worker` forks a work horse for every job, which costs far more than a no-op job; RQ's
own notes on performance (https://python-rq.org/docs/workers/, "Performance Notes", and
docs/benchmark.md in RQ's repository: SimpleWorker ran a hello-world job about 6x faster)
name `SimpleWorker`, which runs jobs in the worker process without forking, as the choice for
"extremely short-lived" jobs, and `rq worker-pool -n N` (RQ >= 1.14, same page, "Worker Pool")
as the way to run N workers from one command, with `-w rq.worker.SimpleWorker` listed as an
option. An RQ worker runs one job at a time and has no threads, so of the harness's
P processes x C concurrency only P is used: one SimpleWorker process per core. Every
worker-pool worker also runs RQ's scheduler (`with_scheduler=True`; one of them holds the
scheduler lock and forks the scheduler process), which `enqueue_at` needs. `-q` ("show less
output") sets RQ's loggers to WARNING from the start, which drops the per-job INFO lines (`-l
WARNING` alone leaves two INFO start-up lines per worker). Measured on 2 cores: `-n 3`/`-n 4` were
not reliably faster than `-n 2`, `-n 10`/`-n 20` were no faster, and the forking `Worker` ran about a
fifth as fast as `SimpleWorker`.

Bulk enqueue: `Queue.enqueue_many` with `Queue.prepare_data` (RQ's documented bulk API,
https://python-rq.org/docs/, "Bulk Job Enqueueing"), which writes the jobs through one Redis
pipeline; done in chunks of 1,000 jobs per pipeline. Scheduling: `Queue.enqueue_at(due, ...)`;
RQ keeps the due time in whole seconds (truncated) and its scheduler moves due jobs to the queue
once a second, so a scheduled job starts anywhere from ~1 s early to ~1 s late.
Where the jobs wait: their ids in the list `rq:queue:bench` (the job hashes `rq:job:<id>` are only
read once an id has been popped, so they stay in place).
"""

from __future__ import annotations

import datetime
import os
import sys

import _peer
import redis
from rq import Queue

_redis = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
LIMIT = _peer.total()
CHUNK = 1_000


def noop(i: int) -> None:
    _peer.noop_body(_redis, LIMIT)


def stamp(sent: float) -> None:
    _peer.stamp_body(_redis, sent)


def worker(url: str, processes: int, concurrency: int) -> list[str]:
    return [sys.executable, "-m", "rq.cli", "worker-pool", _peer.QUEUE, "-n", str(processes),
            "-w", "rq.worker.SimpleWorker", "-q", "-u", url]


def queue(url: str) -> Queue:
    return Queue(_peer.QUEUE, connection=redis.Redis.from_url(url))


def staged_keys(url: str) -> list[str]:
    return [queue(url).key]


def enqueue(url: str, mode: str, count: int) -> None:
    q = queue(url)
    if mode == "bulk":
        for start in range(0, count, CHUNK):
            q.enqueue_many([Queue.prepare_data(noop, (i,)) for i in range(start, min(start + CHUNK, count))])
    else:
        for i in range(count):
            q.enqueue(noop, i)


def push_stamp(url: str):  # type: ignore[no-untyped-def]
    q = queue(url)
    return lambda sent: q.enqueue(stamp, sent)


def schedule(url: str, due: list[float]) -> None:
    q = queue(url)
    for at in due:
        q.enqueue_at(datetime.datetime.fromtimestamp(at, datetime.UTC), stamp, at)


def cli() -> None:
    _peer.main(worker=worker, staged_keys=staged_keys, enqueue=enqueue, push_stamp=push_stamp,
               schedule=schedule,
               env=lambda url: {"REDIS_URL": url, "PYTHONPATH": os.path.dirname(os.path.abspath(__file__))})


if __name__ == "__main__":
    # RQ names a job's function by its module: go through the module the worker imports
    # (`rq_peer`), so that what is enqueued is `rq_peer.noop`, not `__main__.noop`.
    import rq_peer

    rq_peer.cli()
