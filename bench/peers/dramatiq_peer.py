# requires: dramatiq[redis]>=1.17 redis>=5
"""Dramatiq as a benchmark peer (see `_peer` for the contract).

Fast configuration: Dramatiq's `RedisBroker` with its default middleware, run by Dramatiq's own
CLI as `dramatiq dramatiq_peer -p P -t C -Q bench --skip-logging`: P worker processes (one per
core) of C worker threads each, which is exactly the harness's processes x concurrency. Dramatiq's
docs present `--processes/-p` and `--threads/-t` as the throughput knobs (its defaults are one
process per CPU and 8 threads each; https://dramatiq.io/guide.html, "Workers", and
`dramatiq --help`). Each process's consumer prefetches 2 x C messages per Redis call (the
default). Dramatiq has no log-level flag: `--skip-logging` stops its CLI from configuring INFO
logging, which leaves Python's last-resort handler, warnings and errors only. (It logs nothing
per message below DEBUG anyway.)

Bulk enqueue: Dramatiq has no batch push; its way to send many messages in one call is a
`group` (https://dramatiq.io/cookbook.html, "Composition"), which runs one `enqueue` script call
per message. Scheduling: Dramatiq takes a delay, not a time, so each stamp is sent with
`send_with_options(delay=<ms until due>)`; it waits in `dramatiq:bench.DQ` until a worker moves
it to `bench` when due.
Where the jobs wait: the list `dramatiq:bench` holds the message ids and the hash
`dramatiq:bench.msgs` their bodies; a worker's fetch pops ids from the list and reads the hash.
Latency: the RedisBroker consumer polls (there is no blocking pop); after each empty fetch it
sleeps an exponentially growing 5 ms-1 s (`worker_timeout`, default 1,000 ms), so a job sent to an
idle worker waits from a few ms up to about a second. The defaults are kept.
"""

from __future__ import annotations

import os
import sys
import time

import _peer
import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker

_redis = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
LIMIT = _peer.total()

broker = RedisBroker(url=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
dramatiq.set_broker(broker)


@dramatiq.actor(actor_name="BenchNoop", queue_name=_peer.QUEUE)
def noop(i: int) -> None:
    _peer.noop_body(_redis, LIMIT)


@dramatiq.actor(actor_name="BenchStamp", queue_name=_peer.QUEUE)
def stamp(sent: float) -> None:
    _peer.stamp_body(_redis, sent)


def worker(url: str, processes: int, concurrency: int) -> list[str]:
    return [sys.executable, "-m", "dramatiq", "dramatiq_peer", "-p", str(processes), "-t", str(concurrency),
            "-Q", _peer.QUEUE, "--skip-logging"]


def staged_keys(url: str) -> list[str]:
    return [f"{broker.namespace}:{_peer.QUEUE}", f"{broker.namespace}:{_peer.QUEUE}.msgs"]


def connect(url: str) -> None:
    """Send through a broker on `url` (the module's broker reads REDIS_URL, which only the worker has)."""
    client_broker = RedisBroker(url=url)
    dramatiq.set_broker(client_broker)
    for actor in (noop, stamp):
        actor.broker = client_broker
        client_broker.declare_actor(actor)


def enqueue(url: str, mode: str, count: int) -> None:
    connect(url)
    if mode == "bulk":
        dramatiq.group(noop.message(i) for i in range(count)).run()
    else:
        for i in range(count):
            noop.send(i)


def push_stamp(url: str):  # type: ignore[no-untyped-def]
    connect(url)
    return lambda sent: stamp.send(sent)


def schedule(url: str, due: list[float]) -> None:
    connect(url)
    for at in due:
        stamp.send_with_options(args=(at,), delay=max(0, round((at - time.time()) * 1000)))


if __name__ == "__main__":
    _peer.main(worker=worker, staged_keys=staged_keys, enqueue=enqueue, push_stamp=push_stamp,
               schedule=schedule,
               env=lambda url: {"REDIS_URL": url, "PYTHONPATH": os.path.dirname(os.path.abspath(__file__))})
