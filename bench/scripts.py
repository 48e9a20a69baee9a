"""The cost of each script a worker runs per job, against 10,000 / 100,000 / 1,000,000 queued jobs.

    .venv/bin/python bench/scripts.py [--sizes 10000,100000,1000000] [--calls 2000]

On a private redis-server (the bench's: no persistence), the queue is filled with N jobs, and the
retry and schedule sets with N entries each (dead with its cap, 10,000, as it never holds more);
then each case sends `--calls` calls of one script as a worker sends them (the scripts registered
as a worker registers them, its features' Lua included) and reads each call's time in Redis from
SLOWLOG (logging every command). It prints the median and the 99th percentile in µs; a case whose
median at the largest N is over twice its median at the smallest (and 5 µs more) is marked GROWS
and the exit status is 1. What a call costs beside Redis (the round trip) is `round_trip.py`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redis
from common import PrivateRedis

from sidequest.store import keys

QUEUE = "micro"
Q, BATCH, OWN = keys.queue(QUEUE), keys.reserved("bench:1:aa", "batch"), keys.reserved("bench:1:aa", 0)
HELD, DEAD_LIST = keys.reserved("bench:1:aa", 1), keys.reserved("bench:2:bb", 1)
TRACE, GONE = keys.recovered("bench:1:aa"), "bench:2:bb"  # a dead process's heartbeat hash: absent
DEAD_CAP = 10_000
Round = tuple[list[tuple[Any, ...]], tuple[list[str], list[Any]]]  # setup commands, one call's KEYS and ARGV


def job(i: int, tag: str = "j") -> str:
    return json.dumps({"class": "Noop", "args": [i], "queue": QUEUE, "jid": f"{tag}{i:023x}"[:24],
                       "retry": True, "created_at": 1.0, "enqueued_at": 1.0}, separators=(",", ":"))


def fill(r: redis.Redis, n: int) -> None:
    """N jobs queued, N in retry and in schedule, dead at its cap."""
    r.flushall()
    r.sadd(keys.QUEUES, QUEUE)
    for start in range(0, n, 5000):
        chunk = range(start, min(start + 5000, n))
        pipe = r.pipeline(transaction=False)
        pipe.lpush(Q, *(job(i) for i in chunk))
        pipe.zadd(keys.RETRY, {job(i, "r"): 2e9 + i for i in chunk})
        pipe.zadd(keys.SCHEDULE, {job(i, "s"): 2e9 + i for i in chunk})
        if start < DEAD_CAP:
            pipe.zadd(keys.DEAD, {job(i, "d"): 1.9e9 + i for i in chunk if i < DEAD_CAP})
        pipe.execute()


def settle(raw: str, mode: str, dest: str, blob: str, now: float) -> tuple[list[str], list[Any]]:
    """SETTLE's KEYS and ARGV as `unit.Settler` sends them (reliable fetch, no feature's operation)."""
    return [HELD, dest, TRACE], ["1", raw, mode, blob, repr(now + 1000), QUEUE, repr(now - 1e7), DEAD_CAP,
                                 repr(now), "finished", 0]


def cases(now: float) -> dict[str, tuple[str, Callable[[int], Round]]]:
    """{case: (script, round i)}: what a worker sends, with the setup that puts the job where it is then."""
    def reserve(size: int) -> Callable[[int], Round]:
        def one(i: int) -> Round:
            done = [job(i * size + k, "b") for k in range(size)]  # the successes carried, oldest at the tail
            args: list[Any] = [repr(now), size, size]
            for raw in done:
                args += [raw, 0]
            return [("DEL", BATCH), ("RPUSH", BATCH, *done)], ([Q, BATCH, keys.RESERVATIONS, OWN], args)
        return one

    def held(mode: str, dest: str, blob: Callable[[str], str] = lambda raw: raw) -> Callable[[int], Round]:
        def one(i: int) -> Round:
            raw = job(i, "h")
            return [("DEL", HELD), ("RPUSH", HELD, raw)], settle(raw, mode, dest, blob(raw), now)
        return one

    def put_back_again(i: int) -> Round:
        """A put-back whose first reply was lost: it is at the queue's head already, not held."""
        raw = job(i, "p")
        return [("DEL", HELD), ("RPUSH", Q, raw)], settle(raw, "queue", Q, raw, now)

    def put_back_taken(i: int) -> Round:
        """The same, its first write taken by another processor since: the look goes its whole depth."""
        raw = job(i, "t")
        return [("DEL", HELD)], settle(raw, "queue", Q, raw, now)

    def recover(i: int) -> Round:
        raw = job(i, "c")
        return [("DEL", DEAD_LIST), ("RPUSH", DEAD_LIST, raw)], (
            [DEAD_LIST, Q, keys.recovered(GONE), GONE], [raw, raw, "queue", repr(now), QUEUE, repr(now - 1e7),
                                                         DEAD_CAP, repr(now), 60, 0])

    def due(i: int) -> Round:
        entry = job(i, "e")
        return [("ZADD", keys.SCHEDULE, 1, entry)], ([keys.SCHEDULE, Q, keys.QUEUES], [entry, entry, QUEUE])

    return {
        "take 1, ack 1": ("reserve", reserve(1)),
        "take 10, ack 10": ("reserve", reserve(10)),
        "done (ack)": ("settle", held("ack", keys.QUEUES)),
        "retry": ("settle", held("retry", keys.RETRY, lambda raw: raw + " ")),
        "dead": ("settle", held("dead", keys.DEAD, lambda raw: raw + " ")),
        "taken (mark)": ("settle", held("taken", keys.QUEUES)),
        "put back": ("settle", held("queue", Q)),
        "put back, reply lost": ("settle", put_back_again),
        "  ... and taken since": ("settle", put_back_taken),
        "recover one": ("recover", recover),
        "due job to queue": ("enqueue_due", due),
    }


def measure(r: redis.Redis, script: Any, make: Callable[[int], Round], calls: int) -> list[float]:
    """Each call's µs in Redis (SLOWLOG at 0 µs logs every command; the setup's are left out)."""
    r.slowlog_reset()
    for start in range(0, calls, 100):
        pipe = r.pipeline(transaction=False)
        for i in range(start, min(start + 100, calls)):
            setup, (script_keys, args) = make(i)
            for command in setup:
                pipe.execute_command(*command)
            pipe.execute_command("EVALSHA", script.sha, len(script_keys), *script_keys, *args)
        pipe.execute()
    return [e["duration"] for e in r.slowlog_get(10 * calls + 1000)
            if e["command"].startswith(b"EVALSHA ")][:calls]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10000,100000,1000000")
    p.add_argument("--calls", type=int, default=2000)
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    from sidequest.config import Config
    from sidequest.worker.launcher import Launcher

    results: dict[str, list[tuple[float, float]]] = {}
    with PrivateRedis() as server:
        r = redis.Redis.from_url(server.url, socket_timeout=300)  # a scan of 1,000,000 jobs: 100 in one pipeline
        launcher = Launcher(Config(redis_url=server.url))
        scripts = launcher.scripts
        r.config_set("slowlog-max-len", 10 * args.calls + 1000)
        for n in sizes:
            began = time.monotonic()
            fill(r, n)  # once per size: the cases move a few thousand jobs at most
            for case, (name, make) in cases(time.time()).items():
                script = getattr(scripts, name)
                r.script_load(script.script)
                r.config_set("slowlog-log-slower-than", 0)
                times = sorted(measure(r, script, make, args.calls))
                r.config_set("slowlog-log-slower-than", 10_000)
                results.setdefault(case, []).append((statistics.median(times), times[int(len(times) * 0.99)]))
            print(f"{n:,} queued: measured in {time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)
        launcher.executor.close()
        launcher.redis.close()
    return report(sizes, results)


def report(sizes: list[int], results: dict[str, list[tuple[float, float]]]) -> int:
    print(f"µs in Redis per call, median (p99), by jobs queued ({len(sizes)} sizes)")
    print(f"{'case':<22}" + "".join(f"{n:>18,}" for n in sizes))
    grows = 0
    for case, figures in results.items():
        cells = "".join(f"{f'{median:.0f} ({p99:.0f})':>18}" for median, p99 in figures)
        flag = figures[-1][0] > 2 * figures[0][0] + 5
        grows += flag
        print(f"{case:<22}{cells}{'  GROWS' if flag else ''}")
    return 1 if grows else 0


if __name__ == "__main__":
    raise SystemExit(main())
