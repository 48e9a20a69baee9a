"""What every benchmark peer shares: the jobs' bodies and the command line the harness drives.

Each peer is one file `bench/peers/<name>.py`, run with the Python of the peer's own virtualenv
(`bench/.venvs/<name>/bin/python`); it imports only this module, the standard library, redis-py
and the peer's own library. A comment line `# requires: pkg>=x other>=y` at its top lists what its
virtualenv needs; `# python: main` instead means it runs in sidequest's own `.venv`.

The jobs, identical in every peer (the peer's job wraps these bodies):
  noop(i)     one INCR of `bench:count`; the job whose INCR returns 1 writes its start time to
              `bench:first`, the one that returns BENCH_TOTAL pushes its end time on `bench:last`.
  stamp(sent) one RPUSH of "<sent> <now>" on `bench:stamps` (latency: `sent` is when it was
              enqueued; scheduled lateness: `sent` is when it was due).

A peer's queue is named `bench`. Its command line (`python <peer>.py COMMAND ...`):
  worker --url URL --processes P --concurrency C
          exec the worker in the peer's documented fast configuration, logging off (warnings
          only). BENCH_TOTAL is in the environment.
  staged-keys --url URL
          print a JSON list of the Redis keys that hold the jobs waiting in queue `bench`
          (after `enqueue`): the harness renames them aside before the worker starts and
          back once it is idle, so every job appears at once.
  enqueue --url URL --mode bulk|single --count N
          push N noop jobs (i = 0..N-1) from this one process: `bulk` with the peer's batch
          API (or its documented fastest way to push many), `single` one call per job;
          print {"seconds": <time spent pushing>}.
  latency --url URL --count N
          with the worker idle, N times: enqueue one stamp(time.time()) and wait for its stamp
          (BLPOP bench:stamps); print {"latencies": [seconds, ...]}.
  schedule --url URL --count N --over S
          schedule N stamp jobs, due at even steps over the next S seconds, each with
          `sent` = its due time; print {"scheduled": N}.
  hold --url URL --count PAST --held H
          (sidequest only, the held-groups row) with a holder worker running on `bench`: PAST
          groups of one no-op job each, run through; then H groups held back, a third each at
          their concurrency, out of their rate, paused; the holder made quiet; print what was set up.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import redis

COUNT, FIRST, LAST, STAMPS = "bench:count", "bench:first", "bench:last", "bench:stamps"
QUEUE = "bench"


def total() -> int:
    return int(os.environ.get("BENCH_TOTAL", "0"))


def noop_body(client: redis.Redis, limit: int) -> int:
    """The no-op job with a synchronous Redis client: one INCR (two more writes, twice per run).
    Returns the count its INCR read (bench/profile.py --calls starts and stops counting on it)."""
    started = time.time()
    n = client.incr(COUNT)
    if n == 1:
        client.set(FIRST, repr(started))
    if n == limit:
        client.rpush(LAST, repr(time.time()))
    return int(n)


async def noop_body_async(client: Any, limit: int) -> int:
    """The same with an asyncio Redis client (redis.asyncio)."""
    started = time.time()
    n = await client.incr(COUNT)
    if n == 1:
        await client.set(FIRST, repr(started))
    if n == limit:
        await client.rpush(LAST, repr(time.time()))
    return int(n)


def stamp_body(client: redis.Redis, sent: float) -> None:
    client.rpush(STAMPS, f"{sent!r} {time.time()!r}")


async def stamp_body_async(client: Any, sent: float) -> None:
    await client.rpush(STAMPS, f"{sent!r} {time.time()!r}")


def connect(url: str) -> Any:
    """A redis-py client for `url`. A `redis+cluster://host:port,...` URL (sidequest's Cluster
    mode: the harness's Cluster rows) gets a cluster client, which finds the other nodes from
    the first; the jobs' keys above are one key per command, so any node's slot will do."""
    scheme, _, rest = url.partition("://")
    if scheme == "redis+cluster":
        from redis.cluster import RedisCluster  # here: an old redis-py in another peer's virtualenv has none

        host, _, port = rest.split(",")[0].rpartition(":")
        return RedisCluster(host=host, port=int(port))
    return redis.Redis.from_url(url)


def measure_latency(url: str, count: int, push_one: Callable[[float], None]) -> list[float]:
    """Enqueue one stamp job at a time (through `push_one(sent)`) and wait for it to start."""
    client = connect(url)
    client.delete(STAMPS)
    seen: list[float] = []
    for _ in range(count):
        sent = time.time()
        push_one(sent)
        got = client.blpop([STAMPS], timeout=30)
        if got is None:
            raise SystemExit("latency: a stamp job did not run within 30 s")
        was_sent, started = (float(x) for x in got[1].split())
        seen.append(started - was_sent)
    return seen


def due_times(count: int, over: float, start: float | None = None) -> list[float]:
    start = time.time() + 1.0 if start is None else start
    return [start + over * i / count for i in range(count)]


def arguments() -> argparse.Namespace:
    """The command line above, parsed (also for peers whose commands are not Python: Sidekiq)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["worker", "staged-keys", "enqueue", "latency", "schedule", "hold"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--mode", choices=["bulk", "single"], default="bulk")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--over", type=float, default=30.0)
    parser.add_argument("--held", type=int, default=0)
    return parser.parse_args()


def main(
    *,
    worker: Callable[[str, int, int], list[str]],
    staged_keys: Callable[[str], list[str]],
    enqueue: Callable[[str, str, int], None],
    push_stamp: Callable[[str], Callable[[float], None]],
    schedule: Callable[[str, list[float]], None],
    env: Callable[[str], dict[str, str]] | None = None,
    hold: Callable[[str, int, int], dict[str, Any]] | None = None,
) -> None:
    """The command line above. `worker` returns the argv to exec; `push_stamp(url)` returns a
    function enqueueing one stamp job now; `schedule(url, due)` schedules one stamp per due time;
    `env(url)` adds environment variables for the worker."""
    args = arguments()
    if args.command == "worker":
        argv = worker(args.url, args.processes, args.concurrency)
        environ = {**os.environ, **(env(args.url) if env else {})}
        sys.stdout.flush()
        os.execvpe(argv[0], argv, environ)
    elif args.command == "staged-keys":
        print(json.dumps(staged_keys(args.url)))
    elif args.command == "enqueue":
        began = time.perf_counter()
        enqueue(args.url, args.mode, args.count)
        print(json.dumps({"seconds": time.perf_counter() - began}))
    elif args.command == "latency":
        print(json.dumps({"latencies": measure_latency(args.url, args.count, push_stamp(args.url))}))
    elif args.command == "schedule":
        schedule(args.url, due_times(args.count, args.over))
        print(json.dumps({"scheduled": args.count}))
    elif args.command == "hold":
        if hold is None:
            raise SystemExit("hold: this peer has no held groups")
        print(json.dumps(hold(args.url, args.count, args.held)))
