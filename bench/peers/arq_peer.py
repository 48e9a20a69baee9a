# requires: arq>=0.28 redis>=5.0
"""arq as a benchmark peer (see `_peer` for the contract).

Fast configuration, after arq's docs (https://arq-docs.helpmanual.io/, "Simple Usage" and the
`arq.worker.Worker` reference that lists the `WorkerSettings` fields):

- `arq arq_peer.WorkerSettings`: the documented way to run a worker, one asyncio process. arq has
  no multi-process mode and its docs do not tell to run several workers per machine (they only note
  that another running worker may pick up a job), so one process runs, whatever `--processes`
  says; several would also race for the same head of the queue (WATCH/MULTI per job).
- `max_jobs = --concurrency`, 10 from the harness (harness/rows.py): arq's own default, the
  `Worker` reference's "maximum number of jobs to run at a time". 100, the in-flight count of
  sidequest's asyncio runner, measured no faster for no-op jobs on a 2-core VM (AMD EPYC, Redis
  7.0; throughput alone, median of 5 runs of 10,000 jobs: 2,616 jobs/s against 2,582 with 10,
  within the runs' spread; 32: 2,641), so arq's default stays. The harness's row is labelled one
  process (1p), which is what runs.
- `poll_delay = 0.01` s instead of the default 0.5 s. arq does not block on Redis: it polls its
  sorted set every `poll_delay` and starts the due jobs it read (at most `queue_read_limit`, 100)
  as slots free up, so the default caps a worker near 100 jobs / 0.5 s (about 200 jobs/s here) and
  adds up to 0.5 s to each job's start. The docs list `poll_delay` ("duration between polling the
  queue for new jobs") as the knob; 0.01 s measured best (0.05 s: about 20% fewer jobs/s) and costs
  100 small reads a second when idle.
- `keep_result = 0`: results are not stored (as with Celery's `task_ignore_result`).
- logging: `--custom-log-dict arq_peer.LOG_CONFIG` (arq's CLI option to replace its logging
  setup) at WARNING, since arq logs every job start and end at INFO.
- the queue is named `bench` (`queue_name`), so the jobs wait in the sorted set `bench`
  (job bodies stay in `arq:job:<id>` keys).

Bulk enqueue: arq has no batch API; `enqueue_job` calls run concurrently with `asyncio.gather`, 100 at
a time, on one pool (`create_pool`). Single: one awaited `enqueue_job` after another. Scheduling:
`enqueue_job(..., _defer_until=datetime)`.
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import UTC, datetime
from typing import Any, ClassVar

import _peer
import redis.asyncio
from arq import create_pool
from arq.connections import ArqRedis, RedisSettings
from arq.worker import Function, func

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
_redis = redis.asyncio.Redis.from_url(URL)
LIMIT = _peer.total()
CHUNK = 100


async def noop(ctx: dict[str, Any], i: int) -> None:
    await _peer.noop_body_async(_redis, LIMIT)


async def stamp(ctx: dict[str, Any], sent: float) -> None:
    await _peer.stamp_body_async(_redis, sent)


class WorkerSettings:
    functions: ClassVar[list[Function]] = [func(noop, name="noop"), func(stamp, name="stamp")]
    queue_name = _peer.QUEUE
    redis_settings = RedisSettings.from_dsn(URL)
    max_jobs = int(os.environ.get("BENCH_CONCURRENCY", "10"))
    poll_delay = 0.01
    keep_result = 0


LOG_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"level": "WARNING", "class": "logging.StreamHandler"}},
    "loggers": {"arq": {"handlers": ["stderr"], "level": "WARNING"}},
}


def worker(url: str, processes: int, concurrency: int) -> list[str]:
    # `env` sets max_jobs for the settings class and execs arq in place (same pid).
    return ["env", f"BENCH_CONCURRENCY={concurrency}", sys.executable, "-m", "arq",
            "arq_peer.WorkerSettings", "--custom-log-dict", "arq_peer.LOG_CONFIG"]


async def pool(url: str) -> ArqRedis:
    return await create_pool(RedisSettings.from_dsn(url), default_queue_name=_peer.QUEUE)


async def _enqueue(url: str, mode: str, count: int) -> None:
    arq = await pool(url)
    try:
        if mode == "bulk":
            for start in range(0, count, CHUNK):
                await asyncio.gather(*(arq.enqueue_job("noop", i)
                                       for i in range(start, min(start + CHUNK, count))))
        else:
            for i in range(count):
                await arq.enqueue_job("noop", i)
    finally:
        await arq.aclose()


def enqueue(url: str, mode: str, count: int) -> None:
    asyncio.run(_enqueue(url, mode, count))


def push_stamp(url: str):  # type: ignore[no-untyped-def]
    runner = asyncio.Runner()
    arq = runner.run(pool(url))
    return lambda sent: runner.run(arq.enqueue_job("stamp", sent))


async def _schedule(url: str, due: list[float]) -> None:
    arq = await pool(url)
    try:
        for at in due:
            await arq.enqueue_job("stamp", at, _defer_until=datetime.fromtimestamp(at, tz=UTC))
    finally:
        await arq.aclose()


def schedule(url: str, due: list[float]) -> None:
    asyncio.run(_schedule(url, due))


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    _peer.main(worker=worker, staged_keys=lambda url: [_peer.QUEUE], enqueue=enqueue,
               push_stamp=push_stamp, schedule=schedule,
               env=lambda url: {"REDIS_URL": url, "PYTHONPATH": here})
