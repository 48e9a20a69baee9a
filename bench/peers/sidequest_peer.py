"""sidequest as a benchmark peer (see `_peer` for the contract).

Fast configuration: reliable fetch (the default), logging at WARNING, `--processes P`,
`-c C` threads per process. The no-op job's commands go through `sidequest.redis()`, the worker's
Redis (as the Ruby job uses Sidekiq.redis); with BENCH_PLAIN_REDIS=1 in the environment, through
a stock `redis.Redis.from_url(REDIS_URL)` instead (the harness's transparency row).
BENCH_SIDEQUEST_ARGS adds worker flags (the harness's `--pin-cpu` row).

BENCH_QUEUES=N (the harness's `sidequest-6q` and `sidequest-cluster` rows) spreads the no-op jobs
over N queues, `bench` and `bench-<i>` names picked so that each primary of a 3-primary Redis
Cluster split as `redis-cli --cluster create` splits it (harness/cluster.py does) holds as many;
the worker takes them with equal weights (`-q bench,1 -q bench-1,1 ...`: a random order per fetch,
so every primary serves). The stamp and probe jobs stay in `bench`. With a `redis+cluster://`
URL the worker runs in sidequest's Cluster mode, and `sidequest.redis()`, the no-op job's client,
is its cluster client.

BENCH_BARE=1 (`bench/profile.py --bare`, one process) makes the sync no-op job send nothing:
it counts in the process and pushes the end time after the last, so what the worker spends is
sidequest's own work per job, apart from the job's `INCR`.

BENCH_ASYNC=1 (the harness's `sidequest-async` row) registers the three jobs as `async def` jobs
under the same wire names, with the bodies the asyncio peers run (`_peer.noop_body_async`, and
`await asyncio.sleep` in the probe): their commands go through `sidequest.aio.redis()`, the
worker's Redis on the event loop, as the sync jobs' go through `sidequest.redis()` and arq's
through the pool arq hands its jobs. No sync job is registered then, so that `sidequest worker` with no
flags picks its asyncio runner (`--runner auto`: every job of the app is `async def`); a sidequest
without that runner runs them through its threads onto one event loop.

BENCH_GROUPS=N (the harness's `sidequest-groups` row, "fairness: 1,000 groups") pushes no-op job i
with `group=i % N`: the same jobs, each in one of N fairness groups, which wait in the queue's
lanes (`sidequest:lanes:bench...`) and are staged into `queue:bench` as the worker runs them; the
staged keys are then the queue and every key of its lanes. The stamp and probe jobs have no group.
BENCH_OPEN_GROUP=1 (rows `sidequest-open`, `-held`): every no-op job in group `open`; BENCH_HOLDER: sidequest_held.py.

BENCH_TAIL_TRACE=1 (bench/tail.py) makes the sync stamp job also report the GC passes that
overlapped its wait since the push (timed by `gc.callbacks`) and the thread that ran it, and
record the process's thread names (native id -> name) in `bench:tail:threads`.

Every process that imports this file says on stderr which sidequest it imported (a baseline row,
`--baseline`, puts an older checkout first on PYTHONPATH; harness/phases.py checks the worker's
log). `BenchAckProbe` is the acknowledgement-window phase's job (harness/ackwindow.py).
"""
# python: main

from __future__ import annotations

import asyncio
import bisect
import os
import sys
import threading
import time
import weakref
from collections import Counter

import _peer
import redis.asyncio
import sidequest_held
from redis.crc import key_slot

import sidequest

LIMIT = _peer.total()
ACK_ENDS = "bench:ack:ends"  # hash: probe job number -> the time its body ended (harness/ackwindow.py)
print(f"sidequest_peer: sidequest {sidequest.__version__} from {os.path.dirname(sidequest.__file__)}",
      file=sys.stderr, flush=True)
PLAIN = _peer.connect(os.environ["REDIS_URL"]) if os.environ.get("BENCH_PLAIN_REDIS") == "1" else None
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SHARDS = 3
FIRST_SLOTS = (5461, 10923)  # of the 2nd and 3rd primaries: 16384 slots in three (harness/cluster.py)


def queue_key(url: str, queue: str) -> str:
    """The list a queue's jobs wait in: `queue:<q>`, in Cluster mode `queue:{<q>}` (sidequest's keys.py)."""
    return f"queue:{{{queue}}}" if url.partition("://")[0] in CLUSTER_SCHEMES else f"queue:{queue}"


def spread(count: int) -> list[str]:
    """`bench` and the first `bench-<i>` names keeping every primary at most ceil(count / 3)."""
    def shard(queue: str) -> int:
        return bisect.bisect_right(FIRST_SLOTS, key_slot(f"queue:{{{queue}}}".encode()))

    names, held, cap, i = [_peer.QUEUE], Counter([shard(_peer.QUEUE)]), -(-count // SHARDS), 0
    while len(names) < count:
        i += 1
        name = f"{_peer.QUEUE}-{i}"
        if held[shard(name)] < cap:
            names.append(name)
            held[shard(name)] += 1
    return names


QUEUES = spread(int(os.environ.get("BENCH_QUEUES") or 1))
GROUPS = int(os.environ.get("BENCH_GROUPS") or 0)
OPEN_GROUP = "open" if os.environ.get("BENCH_OPEN_GROUP") == "1" else None
HOLDER_JOBS = 4096  # the holder's jobs in flight: a slot each for up to that many held groups


ASYNC = os.environ.get("BENCH_ASYNC") == "1"
TRACE = os.environ.get("BENCH_TAIL_TRACE") == "1"  # bench/tail.py: which GC passes, which thread


if TRACE:
    import gc
    from collections import deque

    _gc_pauses: deque[tuple[float, float, int]] = deque(maxlen=64)  # (began, ended, generation), time.time()
    _gc_began = [0.0]

    def _gc_timer(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            _gc_began[0] = time.time()
        else:
            _gc_pauses.append((_gc_began[0], time.time(), info["generation"]))

    gc.callbacks.append(_gc_timer)
    TAIL_THREADS = "bench:tail:threads"  # hash: native thread id -> name (bench/tail.py)
    _named = [0]


# BENCH_CALLS=<file> (`bench/profile.py --calls`): yappi counts every thread's calls, C builtins too,
# from the no-op job whose INCR reads 1 to the one that reads BENCH_TOTAL, saved at <file> (pstats):
# calls a job, machine-independent, to compare two commits.
CALLS = os.environ.get("BENCH_CALLS")


def counted(n: int) -> None:
    """With BENCH_CALLS: count calls from the first no-op job to the last (see the module)."""
    if CALLS is None:
        return
    import yappi

    if n == 1:
        yappi.set_clock_type("cpu")
        yappi.start(builtins=True, profile_threads=True)
    elif n == LIMIT:
        yappi.stop()
        yappi.get_func_stats().save(CALLS, type="pstat")


if ASYNC:
    _loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, redis.asyncio.Redis] = weakref.WeakKeyDictionary()

    def aio_redis() -> redis.asyncio.Redis:
        """The worker's Redis on the running loop, `sidequest.aio.redis()` (the asyncio twin of
        `sidequest.redis()`, which the sync jobs use); with BENCH_PLAIN_REDIS=1, or on a
        sidequest without it (a --baseline row), a stock redis.asyncio client for REDIS_URL,
        one per loop, its pool uncapped (redis-py 8 caps one at 100 connections)."""
        own = getattr(sidequest.aio, "redis", None)
        if own is not None and PLAIN is None:
            return own()  # type: ignore[no-any-return]
        loop = asyncio.get_running_loop()
        found = _loops.get(loop)
        if found is None:
            found = _loops[loop] = redis.asyncio.Redis.from_url(os.environ["REDIS_URL"], max_connections=2 ** 31)
        return found

    @sidequest.job(name="BenchNoop", queue=_peer.QUEUE)
    async def noop(i: int) -> None:
        counted(await _peer.noop_body_async(aio_redis(), LIMIT))

    @sidequest.job(name="BenchStamp", queue=_peer.QUEUE)
    async def stamp(sent: float) -> None:
        await _peer.stamp_body_async(aio_redis(), sent)

    @sidequest.job(name="BenchAckProbe", queue=_peer.QUEUE)
    async def ack_probe(i: int, seconds: float) -> None:
        """Sleep `seconds`, then record when the body ended, as its last act."""
        if seconds:
            await asyncio.sleep(seconds)
        await aio_redis().hset(ACK_ENDS, str(i), repr(time.time()))

    @sidequest.job(name="BenchHold", queue=_peer.QUEUE)
    async def hold_slot(group: str) -> None:
        """The held row's holder: keep this group's one slot for the rest of the row."""
        await aio_redis().incr("bench:holding")
        await asyncio.sleep(3600)

elif os.environ.get("BENCH_BARE") == "1":
    _bare = [0]
    _bare_lock = threading.Lock()

    @sidequest.job(name="BenchNoop", queue=_peer.QUEUE)
    def noop(i: int) -> None:
        """No Redis command: counted in the process (one process), the end pushed at the last."""
        with _bare_lock:
            _bare[0] += 1
            n = _bare[0]
        if n == LIMIT:
            sidequest.redis().rpush(_peer.LAST, repr(time.time()))

else:
    @sidequest.job(name="BenchNoop", queue=_peer.QUEUE)
    def noop(i: int) -> None:
        counted(_peer.noop_body(PLAIN if PLAIN is not None else sidequest.redis(), LIMIT))

if not ASYNC and TRACE:  # bench/tail.py's traced stamp job: the stamp plus what ran meanwhile
    @sidequest.job(name="BenchStamp", queue=_peer.QUEUE)
    def stamp(sent: float) -> None:
        started = time.time()
        pauses = [(a, b, gen) for a, b, gen in list(_gc_pauses) if b > sent]
        gc_ms = sum(b - max(a, sent) for a, b, _ in pauses) * 1000
        gens = ",".join(str(gen) for _, _, gen in pauses) or "-"
        r = sidequest.redis()
        r.rpush(_peer.STAMPS, f"{sent!r} {started!r} {gc_ms:.3f} {gens} {threading.current_thread().name}")
        if len(threads := threading.enumerate()) != _named[0]:  # the thread names, for its per-thread CPU
            _named[0] = len(threads)
            r.hset(TAIL_THREADS, mapping={str(t.native_id): t.name for t in threads})
elif not ASYNC:  # the sync stamp and probe jobs, beside either sync no-op
    @sidequest.job(name="BenchStamp", queue=_peer.QUEUE)
    def stamp(sent: float) -> None:
        _peer.stamp_body(sidequest.redis(), sent)

if not ASYNC:

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
    queues = ["-q", _peer.QUEUE] if len(QUEUES) == 1 else [arg for q in QUEUES for arg in ("-q", f"{q},1")]
    argv = [sys.executable, "-m", "sidequest.cli", "worker", "-r", "sidequest_peer", *queues,
            "--log-level", "WARNING", *os.environ.get("BENCH_SIDEQUEST_ARGS", "").split()]
    if os.environ.get("BENCH_HOLDER") == "1":
        one = ["--processes", "0"] if hasattr(sidequest.Config, "worker_processes") else []
        return [*argv, "--runner", "asyncio", "--async-jobs", str(HOLDER_JOBS), *one]
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
    """Job i in queue i mod len(QUEUES) (one queue: the job's own, named by no option)."""
    c = client(url)
    if len(QUEUES) > 1:
        for k, queue in enumerate(QUEUES):
            mine = range(k, count, len(QUEUES))
            if mode == "bulk":
                for start in range(0, len(mine), 10_000):
                    c.push_bulk(noop, [[i] for i in mine[start:start + 10_000]], queue=queue)
            else:
                for i in mine:
                    c.push(noop, [i], queue=queue)
    elif GROUPS:  # the fairness row: job i in group i mod GROUPS
        if mode == "bulk":
            for start in range(0, count, 10_000):
                c.push_bulk(noop, [[i] for i in range(start, min(start + 10_000, count))], group=in_group)
        else:
            for i in range(count):
                noop.set(group=in_group(i)).perform_async(i)
    elif mode == "bulk":
        for start in range(0, count, 10_000):
            c.push_bulk(noop, [[i] for i in range(start, min(start + 10_000, count))], group=OPEN_GROUP)
    elif OPEN_GROUP:
        for i in range(count):
            noop.set(group=OPEN_GROUP).perform_async(i)
    else:
        for i in range(count):
            noop.perform_async(i)


def in_group(i: int) -> int:
    """The fairness row's group of no-op job i."""
    return i % GROUPS


def staged_keys(url: str) -> list[str]:
    """The lists the no-op jobs wait in; with BENCH_GROUPS, every key of the queue's lanes too
    (lists, sets and hashes: renamed aside and back together, as they were after the push)."""
    found = [queue_key(url, q) for q in QUEUES]
    if GROUPS or OPEN_GROUP:
        from sidequest.store.connection import connect
        from sidequest.store.keys import space

        r = connect(url)
        base = space(r).lanes(_peer.QUEUE)
        found += sorted({base, *(k.decode() for k in r.scan_iter(match=f"{base}:*", count=1000))})
    return found


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
    _peer.main(worker=worker, staged_keys=staged_keys, enqueue=enqueue,
               push_stamp=push_stamp, schedule=schedule, env=worker_env, hold=sidequest_held.hold)
