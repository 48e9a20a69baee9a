# requires: celery[redis]>=5.7 kombu>=5.7 redis>=6.4
"""Celery (Redis broker) as a benchmark peer (see `_peer` for the contract).

Fast configuration, after Celery's "Optimizing" guide and worker docs
(https://docs.celeryq.dev/en/stable/userguide/optimizing.html,
https://docs.celeryq.dev/en/stable/userguide/workers.html#concurrency,
https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/redis.html):

- `celery -A celery_peer worker -Q bench -P prefork -c P`: the prefork pool with one child process
  per core (the worker docs: "-c defaults to the number of CPUs available"); `--processes P` maps
  to `-c P`. `--concurrency C` has no counterpart in a prefork child (one task at a time each) and
  is not used; the threads pool (`-P threads -c C`, one process) measured no faster here.
- `--prefetch-multiplier 64`: the optimizing guide, for "many short-running tasks, and throughput/
  round trip latency is important to you, this number should be large ... Say 64, or 128."
- `-O fair` is not used: it suits long tasks; with tasks this short it measured slower.
- `--without-gossip --without-mingle --without-heartbeat`: no broadcast traffic between workers
  (the worker docs' advice when nodes do not need to know about each other).
- `--loglevel WARNING` (and `--quiet`, no banner): no "Task ... received/succeeded" lines per job.
- results ignored (`task_ignore_result`, no result backend), events off, rate limits off
  (`worker_disable_rate_limits`), acks on receipt (Celery's default `acks_late=False`).

Bulk enqueue: `apply_async` for each job through one producer inside kombu's `Producer.batch()`
(kombu >= 5.7: the Redis transport buffers the LPUSHes in a pipeline, flushed every 1000), measured
2-3x faster than `group(...).apply_async()` or a plain loop on one producer. Single: one
`apply_async` after another. Scheduling: `apply_async(eta=...)`.
Jobs wait in the Redis list named after the queue, `bench` (kombu's priority steps 3/6/9 would go to
`bench\\x06\\x163`... but these jobs carry no priority, so only `bench` holds them).
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime

import _peer
import redis
from celery import Celery

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
_redis = redis.Redis.from_url(URL)
LIMIT = _peer.total()
PREFETCH_MULTIPLIER = 64

app = Celery("celery_peer", broker=URL)
app.conf.update(
    task_default_queue=_peer.QUEUE,
    task_ignore_result=True,
    result_backend=None,
    task_serializer="json",
    accept_content=["json"],
    worker_disable_rate_limits=True,
    worker_send_task_events=False,
    task_send_sent_event=False,
    worker_hijack_root_logger=True,
    broker_connection_retry_on_startup=True,
)


@app.task(name="bench.noop")
def noop(i: int) -> None:
    _peer.noop_body(_redis, LIMIT)


@app.task(name="bench.stamp")
def stamp(sent: float) -> None:
    _peer.stamp_body(_redis, sent)


def worker(url: str, processes: int, concurrency: int) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "celery_peer", "--quiet", "worker", "-Q", _peer.QUEUE,
            "-n", "bench@%h", "-P", "prefork", "-c", str(processes),
            "--prefetch-multiplier", str(PREFETCH_MULTIPLIER),
            "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "WARNING"]


def use(url: str) -> None:
    app.conf.broker_url = url


def enqueue(url: str, mode: str, count: int) -> None:
    use(url)
    if mode == "single":
        for i in range(count):
            noop.apply_async((i,))
        return
    with app.producer_or_acquire() as producer, producer.batch(max_size=1000):
        for i in range(count):
            noop.apply_async((i,), producer=producer)


def push_stamp(url: str):  # type: ignore[no-untyped-def]
    use(url)
    return lambda sent: stamp.apply_async((sent,))


def schedule(url: str, due: list[float]) -> None:
    use(url)
    with app.producer_or_acquire() as producer:
        for at in due:
            stamp.apply_async((at,), eta=datetime.fromtimestamp(at, tz=UTC), producer=producer)


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    _peer.main(worker=worker, staged_keys=lambda url: [_peer.QUEUE], enqueue=enqueue,
               push_stamp=push_stamp, schedule=schedule,
               env=lambda url: {"REDIS_URL": url, "PYTHONPATH": here})
