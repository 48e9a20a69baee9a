# requires: taskiq>=0.13 taskiq-redis>=1.2 redis>=8.0
"""taskiq with taskiq-redis as a benchmark peer (see `_peer` for the contract).

Fast configuration, after taskiq's CLI docs (https://taskiq-python.github.io/guide/cli.html) and
taskiq-redis's README (https://github.com/taskiq-python/taskiq-redis#brokers):

- `taskiq worker taskiq_peer:broker --workers P --max-async-tasks C --log-level WARNING`:
  taskiq's own multi-process mode, P worker processes, each running at most C tasks at once on its
  event loop, so `--processes P --concurrency C` map one to one. The harness gives taskiq C = 100
  (harness/rows.py): `--max-async-tasks`'s default, and the in-flight count of sidequest's asyncio
  runner; 10 measured no faster for no-op jobs on a 2-core VM (AMD EPYC, Redis 7.0;
  throughput alone, median of 5 runs of 10,000 jobs: 5,131 jobs/s against 4,997 with 100, within
  the runs' spread, the same CPU per job). `--max-prefetch` stays 0: the CLI docs tie it to brokers
  with acknowledgements, which the list broker has not. WARNING hides the receiver's per-task
  "Executing task ..." line (INFO).
- `ListQueueBroker(queue_name="bench")`: jobs are LPUSHed on the Redis list `bench` and taken with
  BRPOP, no acknowledgements, no result backend (taskiq's default discards results). The README's
  example uses `RedisStreamBroker` (acknowledged, a consumer group); the list broker is the lighter
  one it offers "if you don't want acknowledges", the closest to Celery's default early ack, and a
  stream's consumer group would not survive the harness renaming the key aside and back. Its pool
  gets `socket_timeout=None` (connection keywords go to redis-py, as the README says): with
  redis-py 8 an idle BRPOP otherwise times out after 5 s and the worker process dies and restarts.
- scheduling: `kicker().schedule_by_time(source, datetime, ...)` into taskiq-redis's
  `ListRedisScheduleSource`, sent by `taskiq scheduler taskiq_peer:scheduler --update-interval 1`
  (it reads the source every second, 60 s by default, and checks due tasks once a second), so
  scheduled jobs start up to about 2 s late. The scheduler is a second process: the `worker`
  command runs a small launcher (`python taskiq_peer.py serve ...`) that starts both, passes
  SIGTERM/SIGINT on to both and exits when both have.

Bulk enqueue: taskiq has no batch API; `kiq` calls run concurrently with `asyncio.gather`, 500 at a
time. Single: one awaited `kiq` after another.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime

import _peer
import redis.asyncio
from taskiq import TaskiqEvents, TaskiqScheduler, TaskiqState
from taskiq_redis import ListQueueBroker, ListRedisScheduleSource

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
_redis = redis.asyncio.Redis.from_url(URL)
LIMIT = _peer.total()
CHUNK = 500
SCHEDULE_PREFIX = "taskiq_schedule"  # no ":" in it: the source parses its time keys by splitting on ":"

# socket_timeout=None: the broker's BRPOP waits without a timeout, and redis-py 8 otherwise cuts every
# socket read at 5 s, which kills an idle worker process (taskiq-redis 1.2 does not catch it).
broker = ListQueueBroker(URL, queue_name=_peer.QUEUE, socket_timeout=None)
scheduler = TaskiqScheduler(broker, sources=[ListRedisScheduleSource(URL, prefix=SCHEDULE_PREFIX)])


_tick: asyncio.Task[None] | None = None


async def _wake_every_second() -> None:
    while True:
        await asyncio.sleep(1)


@broker.on_event(TaskiqEvents.WORKER_STARTUP)
async def _start_tick(state: TaskiqState) -> None:
    # taskiq's worker sets its stop event from a plain signal handler, which does not wake an event
    # loop asleep in an endless BRPOP: a one-second timer lets SIGTERM take effect within a second.
    global _tick
    _tick = asyncio.get_running_loop().create_task(_wake_every_second())


@broker.on_event(TaskiqEvents.WORKER_SHUTDOWN)
async def _stop_tick(state: TaskiqState) -> None:
    if _tick is not None:
        _tick.cancel()


@broker.task(task_name="noop")
async def noop(i: int) -> None:
    await _peer.noop_body_async(_redis, LIMIT)


@broker.task(task_name="stamp")
async def stamp(sent: float) -> None:
    await _peer.stamp_body_async(_redis, sent)


def worker(url: str, processes: int, concurrency: int) -> list[str]:
    return [sys.executable, os.path.abspath(__file__), "serve", str(processes), str(concurrency)]


def serve(processes: int, concurrency: int) -> int:
    """The launcher: taskiq's worker and its scheduler, stopped together."""
    taskiq = [sys.executable, "-m", "taskiq"]
    procs = [
        subprocess.Popen([*taskiq, "worker", "taskiq_peer:broker", "--workers", str(processes),
                          "--max-async-tasks", str(concurrency), "--log-level", "WARNING"]),
        subprocess.Popen([*taskiq, "scheduler", "taskiq_peer:scheduler", "--update-interval", "1",
                          "--log-level", "WARNING"]),
    ]
    stopping = False

    def stop(signum: int, frame: object = None) -> None:
        nonlocal stopping
        stopping = True
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while any(proc.poll() is None for proc in procs):
        if not stopping and any(proc.poll() is not None for proc in procs):
            stop(signal.SIGTERM)  # one of the two died: take the other down too
        time.sleep(0.1)
    return procs[0].returncode or 0


async def client(url: str) -> ListQueueBroker:
    b = ListQueueBroker(url, queue_name=_peer.QUEUE)
    await b.startup()
    return b


async def _enqueue(url: str, mode: str, count: int) -> None:
    b = await client(url)
    try:
        if mode == "bulk":
            for start in range(0, count, CHUNK):
                await asyncio.gather(*(noop.kicker().with_broker(b).kiq(i)
                                       for i in range(start, min(start + CHUNK, count))))
        else:
            for i in range(count):
                await noop.kicker().with_broker(b).kiq(i)
    finally:
        await b.shutdown()


def enqueue(url: str, mode: str, count: int) -> None:
    asyncio.run(_enqueue(url, mode, count))


def push_stamp(url: str):  # type: ignore[no-untyped-def]
    runner = asyncio.Runner()
    b = runner.run(client(url))
    return lambda sent: runner.run(stamp.kicker().with_broker(b).kiq(sent))


async def _schedule(url: str, due: list[float]) -> None:
    b = await client(url)
    source = ListRedisScheduleSource(url, prefix=SCHEDULE_PREFIX)
    try:
        for at in due:
            await stamp.kicker().with_broker(b).schedule_by_time(
                source, datetime.fromtimestamp(at, tz=UTC), at)
    finally:
        await source.shutdown()
        await b.shutdown()


def schedule(url: str, due: list[float]) -> None:
    asyncio.run(_schedule(url, due))


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        sys.exit(serve(int(sys.argv[2]), int(sys.argv[3])))
    here = os.path.dirname(os.path.abspath(__file__))
    _peer.main(worker=worker, staged_keys=lambda url: [_peer.QUEUE], enqueue=enqueue,
               push_stamp=push_stamp, schedule=schedule,
               env=lambda url: {"REDIS_URL": url, "PYTHONPATH": here})
