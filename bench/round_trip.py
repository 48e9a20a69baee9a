"""What one Redis command costs the process that sends it: the floor under a job's own `INCR`.

    .venv/bin/python bench/round_trip.py [COMMANDS] [--pin-cpu]

On a private redis-server, COMMANDS (30,000) `INCR`s, after a warm-up, each way a job can send
one, and the CPU time (user and system, `getrusage`) of this process per command:

- a stock redis-py client, from one thread and from ten;
- `sidequest.redis()`'s client (`wire.DirectRedis`), from one thread and from ten: each command
  a blocking round trip, so its thread sleeps in the read and is woken by the reply;
- `sidequest.aio.redis()`'s client (`aio.AsyncDirectRedis`), 100 tasks on one event loop: the
  commands of every task sent in one write per turn of the loop (`mux.Multiplexed`).

With --pin-cpu this process runs on one CPU and redis-server on another (as a pinned worker
does on a machine of two); without, the kernel places both. Prints one line a way.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis

sys.path.insert(0, os.path.dirname(__file__))
from common import PrivateRedis

WARM = 500


def cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def report(way: str, n: int, before: tuple[float, float], began: float) -> None:
    user, system = (b - a for a, b in zip(before, cpu(), strict=True))
    wall = time.perf_counter() - began
    print(f"{way:<44} user {user / n * 1e6:5.1f} µs  system {system / n * 1e6:5.1f} µs  "
          f"wall {wall / n * 1e6:5.1f} µs a command")


def threads(way: str, call: Callable[[], Any], n: int, count: int) -> None:
    for _ in range(WARM):
        call()

    def loop() -> None:
        for _ in range(n // count):
            call()

    workers = [threading.Thread(target=loop) for _ in range(count)]
    before, began = cpu(), time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    report(way, n, before, began)


async def tasks(way: str, call: Callable[[], Awaitable[Any]], n: int, count: int) -> None:
    async def loop(times: int) -> None:
        for _ in range(times):
            await call()

    await asyncio.gather(*[loop(WARM // count) for _ in range(count)])
    before, began = cpu(), time.perf_counter()
    await asyncio.gather(*[loop(n // count) for _ in range(count)])
    report(way, n, before, began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commands", nargs="?", type=int, default=30_000)
    parser.add_argument("--pin-cpu", action="store_true", help="this process on one CPU, Redis on another")
    args = parser.parse_args()
    from sidequest.client.async_client import AsyncDirectRedis
    from sidequest.store.direct import DirectRedis

    with PrivateRedis() as server:
        cpus = sorted(os.sched_getaffinity(0))
        if args.pin_cpu and len(cpus) >= 2:
            os.sched_setaffinity(server.proc.pid, {cpus[1]})
            os.sched_setaffinity(0, {cpus[0]})
        stock = redis.Redis.from_url(server.url)
        direct = DirectRedis.from_url(server.url)
        for count in (1, 10):
            threads(f"redis-py, {count} thread(s)", lambda: stock.incr("n"), args.commands, count)
            threads(f"sidequest.redis(), {count} thread(s)", lambda: direct.incr("n"), args.commands, count)

        async def on_the_loop() -> None:
            client = AsyncDirectRedis.from_url(server.url)
            await tasks("sidequest.aio.redis(), 100 tasks", lambda: client.incr("n"), args.commands, 100)
            await client.aclose()

        asyncio.run(on_the_loop())


if __name__ == "__main__":
    main()
