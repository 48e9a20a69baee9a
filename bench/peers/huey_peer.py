# requires: huey>=2.5 redis>=5
"""huey as a benchmark peer (see `_peer` for the contract).

Fast configuration: `RedisHuey` (workers block on BRPOP of the list `huey.redis.bench`, no polling)
with `results=False` (nothing here reads a result), run by huey's own consumer as
`huey_consumer huey_peer.huey -k process -w P -n -q`. huey's consumer docs
(https://huey.readthedocs.io/en/latest/consumer.html, "Options for the consumer") give
`-w/--workers` as the number to raise "for greater throughput", `-k process` as the worker type
that uses several cores (threads share one GIL; greenlets need gevent and suit I/O-heavy tasks),
and `-n/--no-periodic` to "save a few CPU cycles" when there are no periodic tasks. A huey worker
runs one task at a time, so of the harness's P processes x C concurrency only P is used: one
worker process per core (plus the consumer's master and scheduler processes). Measured on 2
shared cores with this no-op job (10,000 jobs): `-k process -w 2` about 2,300-2,500 jobs/s,
`-k process -w 4` 1,800-2,700, `-k process -w 20` 1,650-2,750, `-k thread -w 10` 1,300-2,350:
none reliably beat one process per core. `-q` sets the consumer's log level to WARNING (no
per-task INFO lines).

Bulk enqueue: huey has no batch API; its documented way to enqueue one task over many arguments is
`TaskWrapper.map([(args), ...])` (https://huey.readthedocs.io/en/latest/api.html), which is one
LPUSH per task, so `bulk` and `single` differ only in that the loop lives inside huey.
Scheduling: `stamp.schedule(args, eta=due)`; the consumer's scheduler moves due tasks to the
queue once a second (its finest `--scheduler-interval`), so a scheduled task starts up to ~1 s
late.
"""

from __future__ import annotations

import datetime
import os
import sys

import _peer
import redis
from huey import RedisHuey

_redis = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
LIMIT = _peer.total()

# The huey name is the queue name: its pending tasks live in the Redis list `huey.redis.bench`.
huey = RedisHuey(_peer.QUEUE, url=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), results=False)


@huey.task(name="BenchNoop")
def noop(i: int) -> None:
    _peer.noop_body(_redis, LIMIT)


@huey.task(name="BenchStamp")
def stamp(sent: float) -> None:
    _peer.stamp_body(_redis, sent)


def worker(url: str, processes: int, concurrency: int) -> list[str]:
    return [sys.executable, "-m", "huey.bin.huey_consumer", f"{__name__}.huey",
            "-k", "process", "-w", str(processes), "-n", "-q"]


def staged_keys(url: str) -> list[str]:
    return [huey.storage.queue_key]


def connect(url: str) -> None:
    huey.storage = huey.get_storage(url=url)


def enqueue(url: str, mode: str, count: int) -> None:
    connect(url)
    if mode == "bulk":
        noop.map([(i,) for i in range(count)])
    else:
        for i in range(count):
            noop(i)


def push_stamp(url: str):  # type: ignore[no-untyped-def]
    connect(url)
    return lambda sent: stamp(sent)


def schedule(url: str, due: list[float]) -> None:
    connect(url)
    for at in due:
        stamp.schedule(args=(at,), eta=datetime.datetime.fromtimestamp(at, datetime.UTC))


def cli() -> None:
    _peer.main(worker=worker, staged_keys=staged_keys, enqueue=enqueue, push_stamp=push_stamp,
               schedule=schedule,
               env=lambda url: {"REDIS_URL": url, "PYTHONPATH": os.path.dirname(os.path.abspath(__file__))})


if __name__ == "__main__":
    # huey names a task after its module: go through the module the worker imports (`huey_peer`),
    # so that what is enqueued is `huey_peer.BenchNoop`, not `__main__.BenchNoop`.
    import huey_peer

    huey_peer.cli()
