"""`make bench`'s long drain: 1,000,000 no-op jobs queued at once, then drained by `sidequest worker`
with 2 processes, on a private redis-server. It checks two things a short run cannot show:

- no command of the workers takes over 10 ms in Redis (SLOWLOG, which logs from 2 ms here; each
  entry is named by its script, the SHA mapped back to SETTLE, RESERVE... as a worker registers them);
- throughput stays flat while the queue shrinks from 1,000,000 to 0 (jobs/s by decile of the drain,
  timed from the queue's length sampled every 20 ms; the queue is paused until both processes run,
  and 5% more jobs, queued ahead, warm them up untimed).

    .venv/bin/python bench/drain.py [--jobs 1000000] [--processes 2] [--limit-ms 10] [--log-from-ms 2]

Redis' own pauses (a fork, an expiry cycle) are listed apart (LATENCY LATEST, monitored from 2 ms),
so that one is not blamed on a script; the private Redis runs without persistence, as the bench's do.
SLOWLOG times a command by the wall clock: on 2 cores shared by Redis and two busy worker processes,
the kernel takes the CPU from Redis in the middle of a command thousands of times a drain, and a
command so cut shows 10-20 ms (RESERVE, the most frequent, most often; a 3-element RPOP too). So
redis-server runs at a higher priority (`--redis-nice`, -10; 0 keeps it even with the workers), as a
production Redis has a core of its own, and the count of those preemptions is printed.
Exits 1 when a worker's command went over the limit. A few hundred MB of Redis memory at the start.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redis
from common import PrivateRedis

import sidequest
from sidequest import Client
from sidequest.api import Queue
from sidequest.config import Config
from sidequest.store import keys
from sidequest.worker.launcher import Launcher

QUEUE = "drain"
HERE = Path(__file__).resolve().parent


@sidequest.job(name="DrainNoop", queue=QUEUE)
def noop(i: int) -> None:
    """The drained job: nothing, so what is measured is the fetch, the run and the acknowledgement."""


def fill(r: Any, jobs: int, chunk: int = 2000) -> float:
    """LPUSH `jobs` payloads (Sidekiq's format, as a push writes it) in pipelined chunks; seconds taken."""
    began, now = time.monotonic(), time.time()
    r.sadd(keys.QUEUES, QUEUE)
    for start in range(0, jobs, chunk):
        pipe = r.pipeline(transaction=False)
        blobs = [json.dumps({"class": "DrainNoop", "args": [i], "queue": QUEUE, "jid": secrets.token_hex(12),
                             "retry": True, "created_at": now, "enqueued_at": now}, separators=(",", ":"))
                 for i in range(start, min(start + chunk, jobs))]
        pipe.lpush(keys.queue(QUEUE), *blobs)
        pipe.execute()
    return time.monotonic() - began


def script_names(url: str) -> dict[str, str]:
    """{SHA: name} of the scripts a worker registers (the core's, with its features' Lua), so a
    SLOWLOG entry's `EVALSHA <sha>` says which script it was."""
    launcher = Launcher(Config(redis_url=url))
    try:
        return {script.sha: name.upper() for name, script in vars(launcher.scripts).items() if hasattr(script, "sha")}
    finally:
        launcher.executor.close()
        launcher.redis.close()


def preempted(pid: int) -> int:
    """How many times the kernel has taken the CPU from process `pid` (Linux; 0 elsewhere)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return sum(int(line.split()[1]) for line in status.splitlines() if line.startswith("nonvoluntary_ctxt_switches"))


def prioritise(pid: int, nice: int) -> str:
    if nice == 0:
        return "redis-server at the workers' priority"
    try:
        os.setpriority(os.PRIO_PROCESS, pid, nice)
    except OSError as exc:  # not root: a lower value is refused
        return f"redis-server at the workers' priority (nice {nice} refused: {exc.strerror})"
    return f"redis-server at nice {nice}"


def started(r: Any, processes: int, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    """Wait until the worker's processes have all registered (their first heartbeat)."""
    deadline = time.monotonic() + timeout
    while r.scard(keys.PROCESSES) < processes:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"drain: the worker's {processes} processes did not start within {timeout:.0f} s")
        time.sleep(0.05)


def sample(r: Any, key: str, proc: subprocess.Popen[bytes], timeout: float) -> list[tuple[float, int]]:
    """(time, queue length) every 20 ms until the queue is empty."""
    points, deadline = [], time.monotonic() + timeout
    while True:
        n = r.llen(key)
        points.append((time.monotonic(), n))
        if n == 0:
            return points
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"drain: the worker stopped or the drain took over {timeout:.0f} s ({n} left)")
        time.sleep(0.02)


def crossing(points: list[tuple[float, int]], left: float) -> float:
    """When the queue's length went down to `left` (interpolated between samples)."""
    for (t0, n0), (t1, n1) in itertools.pairwise(points):
        if n0 >= left > n1:  # the last sample at `left` or above, and the next
            return t0 + (t1 - t0) * (n0 - left) / (n0 - n1)
    return points[-1][0]


def deciles(points: list[tuple[float, int]], jobs: int) -> list[float]:
    """Jobs/s over each tenth of the drain, the first tenth (1,000,000 to 900,000 queued) first."""
    times = [crossing(points, jobs * (10 - k) / 10) for k in range(11)]
    return [jobs / 10 / max(b - a, 1e-9) for a, b in itertools.pairwise(times)]


def slow_commands(r: Any, names: dict[str, str], own: str) -> list[dict[str, Any]]:
    """SLOWLOG's entries from clients other than this harness, each with its script's name."""
    found = []
    for entry in r.slowlog_get(100_000):
        if entry.get("client_name", b"") in (own, own.encode()):
            continue
        words = [w.decode(errors="replace") if isinstance(w, bytes) else str(w) for w in entry["command"].split()] \
            if isinstance(entry["command"], bytes) else str(entry["command"]).split()
        name = names.get(words[1], "?") if len(words) > 1 and words[0].upper() == "EVALSHA" else words[0].upper()
        found.append({"ms": entry["duration"] / 1000, "command": " ".join(words[:3]), "script": name,
                      "keys": words[3:3 + int(words[2])] if name != words[0].upper() and words[2].isdigit() else []})
    return found


def report(jobs: int, points: list[tuple[float, int]], slow: list[dict[str, Any]], latency: list[Any],
           limit_ms: float) -> bool:
    rates = deciles(points, jobs)
    total = points[-1][0] - crossing(points, jobs)
    print(f"drained {jobs:,} jobs in {total:.1f} s: {jobs / total:,.0f} jobs/s")
    print("jobs/s by decile (queued at its start):")
    for k, rate in enumerate(rates):
        print(f"  {jobs * (10 - k) // 10:>10,}  {rate:>9,.0f}")
    spread = (max(rates) - min(rates)) / (sum(rates) / len(rates))
    print(f"spread (max - min) / mean: {spread:.0%}; last decile / first: {rates[-1] / rates[0]:.2f}")
    worst = max((e["ms"] for e in slow), default=0.0)
    print(f"SLOWLOG: {len(slow)} worker command(s) over the logging threshold, slowest {worst:.1f} ms")
    for e in sorted(slow, key=lambda e: -e["ms"])[:10]:
        print(f"  {e['ms']:7.1f} ms  {e['script']:<16} {e['command']}  keys {' '.join(e['keys'])}")
    events = {(e[0].decode() if isinstance(e[0], bytes) else e[0]): int(e[3]) for e in latency}
    print("LATENCY LATEST, worst ms by event:", events or "none")
    ok = worst <= limit_ms
    print(f"{'ok' if ok else 'FAIL'}: slowest worker command {worst:.1f} ms (limit {limit_ms:.0f} ms)")
    if not ok and events.get("fast-command", 0) >= limit_ms:  # an O(1) command as slow: no script's doing
        print(f"  an O(1) command took {events['fast-command']} ms too: the CPU was taken from Redis "
              f"(load average now {os.getloadavg()[0]:.2f}); run it on a quiet machine")
    return ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=1_000_000)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--limit-ms", type=float, default=10.0, help="fail when a worker's command takes longer")
    p.add_argument("--log-from-ms", type=float, default=2.0, help="SLOWLOG's threshold")
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--redis-nice", type=int, default=-10, help="redis-server's niceness (0: as the workers')")
    args = p.parse_args(argv)
    with PrivateRedis() as server:
        r = redis.Redis.from_url(server.url)
        r.client_setname("drain-harness")
        print(f"load average {os.getloadavg()[0]:.2f}; {prioritise(server.proc.pid, args.redis_nice)}", flush=True)
        r.config_set("latency-monitor-threshold", int(args.log_from_ms))
        warm = args.jobs // 20  # taken first (pushed first) and not timed: every processor is busy by then
        print(f"filling {args.jobs:,} jobs after {warm:,} to warm up ... {fill(r, args.jobs + warm):.1f} s, "
              f"Redis used_memory {r.info('memory')['used_memory_human']}", flush=True)
        names = script_names(server.url)
        r.config_set("slowlog-log-slower-than", int(args.log_from_ms * 1000))
        r.config_set("slowlog-max-len", 100_000)
        r.slowlog_reset()
        r.execute_command("LATENCY", "RESET")
        queue = Queue(QUEUE, Client(Config(redis_url=server.url)))
        queue.pause()  # until every process is up
        env = {**os.environ, "REDIS_URL": server.url, "PYTHONPATH": os.pathsep.join(
            [str(HERE), os.environ.get("PYTHONPATH", "")])}
        worker = subprocess.Popen([sys.executable, "-m", "sidequest.cli", "worker", "-r", "drain", "-q", QUEUE,
                                   "--processes", str(args.processes), "--log-level", "warning"], env=env)
        before = preempted(server.proc.pid)
        try:
            started(r, args.processes, worker)
            queue.unpause()  # all at once: the first tenth is not the processes' start-up
            points = sample(r, keys.queue(QUEUE), worker, args.timeout)
            print(f"redis-server preempted {preempted(server.proc.pid) - before:,} times during the drain")
        finally:
            worker.terminate()
            worker.wait(60)
        slow = slow_commands(r, names, "drain-harness")
        latency = r.execute_command("LATENCY", "LATEST")
    return 0 if report(args.jobs, points, slow, latency, args.limit_ms) else 1


if __name__ == "__main__":
    raise SystemExit(main())
