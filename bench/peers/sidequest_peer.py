"""sidequest as a benchmark peer (see `_peer` for the contract).

Fast configuration: reliable fetch (the default), logging at WARNING, `--processes P`,
`-c C` threads per process. The no-op job's commands go through `sidequest.redis()`, the worker's
Redis (as the Ruby job uses Sidekiq.redis); with BENCH_PLAIN_REDIS=1 in the environment, through
a stock `redis.Redis.from_url(REDIS_URL)` instead (the harness's transparency row).
BENCH_SIDEQUEST_ARGS adds worker flags (the harness's `--pin-cpu` row).
"""
# python: main

from __future__ import annotations

import os
import sys

import _peer
import redis

import sidequest

LIMIT = _peer.total()
PLAIN = redis.Redis.from_url(os.environ["REDIS_URL"]) if os.environ.get("BENCH_PLAIN_REDIS") == "1" else None


@sidequest.job(name="BenchNoop", queue=_peer.QUEUE)
def noop(i: int) -> None:
    _peer.noop_body(PLAIN if PLAIN is not None else sidequest.redis(), LIMIT)


@sidequest.job(name="BenchStamp", queue=_peer.QUEUE)
def stamp(sent: float) -> None:
    _peer.stamp_body(sidequest.redis(), sent)


def worker(url: str, processes: int, concurrency: int) -> list[str]:
    argv = [sys.executable, "-m", "sidequest.cli", "worker", "-r", "sidequest_peer", "-q", _peer.QUEUE,
            "-c", str(concurrency), "--log-level", "WARNING", *os.environ.get("BENCH_SIDEQUEST_ARGS", "").split()]
    return [*argv, "--processes", str(processes)] if processes > 1 else argv


def client(url: str) -> sidequest.Client:
    return sidequest.configure(sidequest.Config(redis_url=url))


def enqueue(url: str, mode: str, count: int) -> None:
    c = client(url)
    if mode == "bulk":
        for start in range(0, count, 10_000):
            c.push_bulk(noop, [[i] for i in range(start, min(start + 10_000, count))])
    else:
        for i in range(count):
            noop.perform_async(i)


def push_stamp(url: str):  # type: ignore[no-untyped-def]
    client(url)
    return lambda sent: stamp.perform_async(sent)


def schedule(url: str, due: list[float]) -> None:
    client(url)
    for at in due:
        stamp.perform_at(at, at)


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    _peer.main(worker=worker, staged_keys=lambda url: [f"queue:{_peer.QUEUE}"], enqueue=enqueue,
               push_stamp=push_stamp, schedule=schedule, env=lambda url: {"REDIS_URL": url, "PYTHONPATH": here})
