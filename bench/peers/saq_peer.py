# requires: saq[redis]>=0.26 redis>=5.0 typing-extensions>=4.0
"""saq (Redis queue) as a benchmark peer (see `_peer` for the contract).

Fast configuration, after saq's README (https://github.com/tobymao/saq#usage: `saq module.settings
--workers N`) and docs (https://saq-py.readthedocs.io/, the `Worker` and `Job` arguments):

- `saq saq_peer.settings --workers P`: P worker processes (saq's own multi-process mode), each an
  asyncio worker running `concurrency = C` jobs at a time, so `--processes P --concurrency C` map
  one to one. The harness gives saq C = 100 (harness/rows.py), the in-flight count of sidequest's
  asyncio runner: saq's default and its README's example are 10, nothing in its docs caps it, and
  100 measured faster for no-op jobs on a 2-core VM (AMD EPYC, Redis 7.0; throughput alone,
  median of 5 runs of 10,000 jobs: 4,110 jobs/s against 3,790 with 10; 32: 4,012). The queue's
  `max_concurrent_ops` (20, a cap on its concurrent Redis calls, the worker's job read included)
  stays at its default: 100 measured the same.
- logging at WARNING: the CLI's default level without `-v` (saq logs each job's "Processing" and
  "Finished" at INFO).
- jobs are enqueued with `ttl=-1` ("-1 means disabled"): the finished job and its result are not
  kept, as with Celery's `task_ignore_result`; the other job defaults are saq's.
- the queue is named `bench`, so waiting jobs are ids in the list `saq:bench:queued` (the worker's
  BLMOVE source; the zset `saq:bench:incomplete` holds them too, at score 0, which the scheduler
  ignores, and job bodies stay in `saq:job:bench:<key>`).

Bulk enqueue: saq has no batch API; `Queue.enqueue` calls run concurrently with `asyncio.gather`
(how saq's own `Queue.map` enqueues many), 500 at a time (the queue itself allows 20 Redis
operations at once). Single: one awaited `enqueue` after another. Scheduling: `scheduled=<epoch
seconds>` (given as a float here); the worker moves due jobs to the queue once a second (its
`schedule` timer, whole seconds only), so scheduled jobs start up to about a second late.

Stopping: `saq --workers P` forks P-1 workers that get no signal when the main one is stopped; the
startup hook below has the main process pass SIGTERM/SIGINT on to them, so one SIGTERM stops all.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import sys
from typing import Any

import _peer
import redis.asyncio
from saq import Queue

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
_redis = redis.asyncio.Redis.from_url(URL)
LIMIT = _peer.total()
CHUNK = 500


async def noop(ctx: dict[str, Any], *, i: int) -> None:
    await _peer.noop_body_async(_redis, LIMIT)


async def stamp(ctx: dict[str, Any], *, sent: float) -> None:
    await _peer.stamp_body_async(_redis, sent)


async def startup(ctx: dict[str, Any]) -> None:
    if multiprocessing.parent_process() is not None:
        return  # a forked worker: the main process stops it
    worker = ctx["worker"]
    loop = asyncio.get_running_loop()

    def stop(signum: int) -> None:
        for child in multiprocessing.active_children():
            try:
                os.kill(child.pid, signum)  # type: ignore[arg-type]
            except ProcessLookupError:
                pass
        worker.event.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop, signum)


settings = {
    "queue": Queue.from_url(URL, name=_peer.QUEUE),
    "functions": [noop, stamp],
    "concurrency": int(os.environ.get("BENCH_CONCURRENCY", "10")),
    "startup": startup,
}


def worker(url: str, processes: int, concurrency: int) -> list[str]:
    # `env` sets the per-process concurrency for `settings` and execs saq in place (same pid).
    return ["env", f"BENCH_CONCURRENCY={concurrency}", sys.executable, "-m", "saq",
            "saq_peer.settings", "--workers", str(processes)]


async def _enqueue(url: str, mode: str, count: int) -> None:
    queue = Queue.from_url(url, name=_peer.QUEUE)
    try:
        if mode == "bulk":
            for start in range(0, count, CHUNK):
                await asyncio.gather(*(queue.enqueue("noop", i=i, ttl=-1)
                                       for i in range(start, min(start + CHUNK, count))))
        else:
            for i in range(count):
                await queue.enqueue("noop", i=i, ttl=-1)
    finally:
        await queue.disconnect()


def enqueue(url: str, mode: str, count: int) -> None:
    asyncio.run(_enqueue(url, mode, count))


def push_stamp(url: str):  # type: ignore[no-untyped-def]
    runner = asyncio.Runner()
    queue = Queue.from_url(url, name=_peer.QUEUE)
    return lambda sent: runner.run(queue.enqueue("stamp", sent=sent, ttl=-1))


async def _schedule(url: str, due: list[float]) -> None:
    queue = Queue.from_url(url, name=_peer.QUEUE)
    try:
        for at in due:
            await queue.enqueue("stamp", sent=at, scheduled=at, ttl=-1)
    finally:
        await queue.disconnect()


def schedule(url: str, due: list[float]) -> None:
    asyncio.run(_schedule(url, due))


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    _peer.main(worker=worker, staged_keys=lambda url: [f"saq:{_peer.QUEUE}:queued"], enqueue=enqueue,
               push_stamp=push_stamp, schedule=schedule,
               env=lambda url: {"REDIS_URL": url, "PYTHONPATH": here})
