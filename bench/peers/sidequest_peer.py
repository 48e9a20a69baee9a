"""sidequest as a benchmark peer (see `_peer` for the contract).

Fast configuration: reliable fetch (the default), logging at WARNING, `--processes P`,
`-c C` threads per process. The no-op job's commands go through `sidequest.redis()`, the worker's
Redis (as the Ruby job uses Sidekiq.redis); with BENCH_PLAIN_REDIS=1 in the environment, through
a stock `redis.Redis.from_url(REDIS_URL)` instead (the harness's transparency row).
BENCH_SIDEQUEST_ARGS adds worker flags (the harness's `--pin-cpu` row).

Every process that imports this file says on stderr which sidequest it imported (a baseline row,
`--baseline`, puts an older checkout first on PYTHONPATH; harness/phases.py checks the worker's
log). `BenchAckProbe` is the acknowledgement-window phase's job (harness/ackwindow.py).
"""
# python: main

from __future__ import annotations

import os
import sys
import time

import _peer
import redis

import sidequest

LIMIT = _peer.total()
ACK_ENDS = "bench:ack:ends"  # hash: probe job number -> the time its body ended (harness/ackwindow.py)
print(f"sidequest_peer: sidequest {sidequest.__version__} from {os.path.dirname(sidequest.__file__)}",
      file=sys.stderr, flush=True)
PLAIN = redis.Redis.from_url(os.environ["REDIS_URL"]) if os.environ.get("BENCH_PLAIN_REDIS") == "1" else None


@sidequest.job(name="BenchNoop", queue=_peer.QUEUE)
def noop(i: int) -> None:
    _peer.noop_body(PLAIN if PLAIN is not None else sidequest.redis(), LIMIT)


@sidequest.job(name="BenchStamp", queue=_peer.QUEUE)
def stamp(sent: float) -> None:
    _peer.stamp_body(sidequest.redis(), sent)


@sidequest.job(name="BenchAckProbe", queue=_peer.QUEUE)
def ack_probe(i: int, seconds: float) -> None:
    """Sleep `seconds`, then record when the body ended, as its last act."""
    if seconds:
        time.sleep(seconds)
    sidequest.redis().hset(ACK_ENDS, str(i), repr(time.time()))


def worker(url: str, processes: int, concurrency: int) -> list[str]:
    """The worker's command line. BENCH_SIDEQUEST_DEFAULT=1: no flags but the job module, the
    queue and logging off (`sidequest worker` as a user types it: the `sidequest` row). Else
    `processes` of them: one (`--processes 0` where that sidequest runs one per CPU by default)
    or a supervisor of several."""
    argv = [sys.executable, "-m", "sidequest.cli", "worker", "-r", "sidequest_peer", "-q", _peer.QUEUE,
            "--log-level", "WARNING", *os.environ.get("BENCH_SIDEQUEST_ARGS", "").split()]
    if os.environ.get("BENCH_SIDEQUEST_DEFAULT") == "1":
        return argv
    argv += ["-c", str(concurrency)]
    if processes > 1:
        return [*argv, "--processes", str(processes)]
    # a sidequest whose default is a process per CPU (`Config.worker_processes`) is kept to one
    return [*argv, "--processes", "0"] if hasattr(sidequest.Config, "worker_processes") else argv


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


def worker_env(url: str) -> dict[str, str]:
    """This directory on the worker's PYTHONPATH (for `-r sidequest_peer`), after what is there
    already: a baseline row's checkout stays first."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {"REDIS_URL": url, "PYTHONPATH": os.pathsep.join([*path, here])}


if __name__ == "__main__":
    _peer.main(worker=worker, staged_keys=lambda url: [f"queue:{_peer.QUEUE}"], enqueue=enqueue,
               push_stamp=push_stamp, schedule=schedule, env=worker_env)
