"""No-op job throughput through ONE worker process: sidequest (reliable fetch, basic fetch) vs
real Ruby Sidekiq, same concurrency, same jobs, same private redis-server, in one run.

    .venv/bin/python bench/throughput.py [JOBS] [-c CONCURRENCY]     (defaults: 20,000 jobs, -c 10)

Method, identical for the three workers:
  1. N payloads for the wire class `BenchNoop` are bulk-pushed (sidequest's client, Sidekiq's
     format) and the list is renamed aside, so no worker can see them yet.
  2. The worker is started (sidequest: `-r` a module written to a temp dir; Ruby: `sidekiq -r`
     a file defining the same class) on queue `bench`, with default logging (one line per job
     start and end, as both log by default) sent to /dev/null. We wait until it has
     registered in `processes` and CONCURRENCY of its connections are blocked in their fetch
     (CLIENT LIST flag `b`): every processor is idle and waiting, so start-up is excluded.
  3. One RENAME makes all N jobs appear at once in `queue:bench` (it wakes the blocked fetches).
  4. The job counts its runs in process memory (a lock in Python, a Mutex in Ruby: the same
     cost) and writes its own wall-clock time to Redis only twice: when the 1st run starts
     (SET `bench:first`) and when the Nth run ends (RPUSH `bench:last`, which this script
     waits for with BLPOP, so it puts no polling load on the machine meanwhile). So the
     per-job work stays a no-op.
  5. Timed interval = from the first job's start to the moment every job is finished AND
     acknowledged. Basic fetch (sidequest's and Sidekiq's) has nothing to acknowledge: the job
     left Redis when it was popped, so the end is `bench:last`. Reliable fetch acknowledges each
     job after it ran (LREM from `sidequest:reserved:<identity>:<slot>`), so once `bench:last` is
     there we poll (every 1 ms) until that list and the queue are empty and take the time the
     poll that saw them empty returned: an upper bound, late by at most the wake-up of the
     BLPOP plus one poll (about a millisecond, against seconds of run). Counters
     (`stat:processed`) are flushed only every 5 s, far too coarse to time with, so they serve
     only as a check after the worker stopped: N processed, 0 failed, queue empty.

All three share the machine with redis-server and this script (the first line printed gives the CPU count);
other load on the machine shows in the figures, so compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

sys.path.insert(0, os.path.dirname(__file__))
from common import PrivateRedis, ruby_sidekiq

import sidequest

QUEUE = "bench"
STAGING = "bench:staging"

PYTHON_JOB = '''
"""The benchmark's no-op job (wire class BenchNoop), written by bench/throughput.py."""
import os
import threading
import time

import redis

import sidequest

TOTAL = int(os.environ["BENCH_JOBS"])
_redis = redis.Redis.from_url(os.environ["REDIS_URL"])
_lock = threading.Lock()
_count = 0


@sidequest.job(name="BenchNoop")
def bench_noop(i):
    global _count
    with _lock:
        _count += 1
        n = _count
    if n == 1:
        _redis.set("bench:first", repr(time.time()))
    if n == TOTAL:
        _redis.rpush("bench:last", repr(time.time()))
'''

RUBY_JOB = '''
# The benchmark's no-op job, written by bench/throughput.py.
require "sidekiq"

class BenchNoop
  include Sidekiq::Worker
  TOTAL = Integer(ENV.fetch("BENCH_JOBS"))
  LOCK = Mutex.new
  @count = 0
  class << self; attr_accessor :count; end

  def perform(i)
    n = LOCK.synchronize { BenchNoop.count += 1 }
    Sidekiq.redis { |c| c.set("bench:first", Time.now.to_f.to_s) } if n == 1
    Sidekiq.redis { |c| c.rpush("bench:last", Time.now.to_f.to_s) } if n == TOTAL
  end
end
'''



def stop_worker(proc: subprocess.Popen) -> int:
    """TERM a worker and return its exit code; kill it (and fail) if it does not stop in 30 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


def worker_command(kind: str, workdir: Path, concurrency: int) -> list[str]:
    if kind == "ruby":
        return ["sidekiq", "-r", str(workdir / "bench_noop.rb"), "-c", str(concurrency), "-q", QUEUE, "-t", "10"]
    fetch = "reliable" if kind == "sidequest-reliable" else "basic"
    return [sys.executable, "-m", "sidequest.cli", "worker", "-r", str(workdir / "bench_noop.py"),
            "-c", str(concurrency), "-q", QUEUE, "--fetch", fetch, "-t", "10", "--processes", "0"]


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited ({proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def blocked_fetches(r: redis.Redis) -> int:
    return sum(1 for c in r.client_list() if "b" in c["flags"] and c.get("cmd") in ("brpop", "blmove"))


def measure(kind: str, url: str, workdir: Path, jobs: int, concurrency: int) -> dict[str, float]:
    r = redis.Redis.from_url(url)
    r.flushall()
    client = sidequest.Client(sidequest.Config(redis_url=url))
    for start in range(0, jobs, 10_000):
        client.push_bulk("BenchNoop", [[i] for i in range(start, min(start + 10_000, jobs))], queue=QUEUE)
    assert r.llen(f"queue:{QUEUE}") == jobs
    r.rename(f"queue:{QUEUE}", STAGING)

    env = {**os.environ, "REDIS_URL": url, "BENCH_JOBS": str(jobs)}
    proc = subprocess.Popen(worker_command(kind, workdir, concurrency), cwd=workdir, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        identity = wait_for(lambda: next(iter(r.smembers("processes")), None), 30, "the worker to register", proc)
        identity = identity.decode()
        wait_for(lambda: blocked_fetches(r) >= concurrency, 30, "every processor to wait on its fetch", proc)
        reserved = [f"sidequest:reserved:{identity}:{slot}" for slot in range(concurrency)]  # one per processor

        renamed_at = time.time()
        r.rename(STAGING, f"queue:{QUEUE}")
        got = None
        while got is None:  # a blocking pop: no polling load on the machine while the jobs run
            got = r.blpop(["bench:last"], timeout=1)
            if got is None and proc.poll() is not None:
                raise RuntimeError(f"the worker exited ({proc.returncode}) before the last job")
        end = float(got[1])
        if kind == "sidequest-reliable":  # done only once the last acknowledgement is in
            pipe = r.pipeline(transaction=False)
            pipe.llen(f"queue:{QUEUE}")
            for key in reserved:
                pipe.llen(key)
            while any(pipe.execute()):
                pipe.llen(f"queue:{QUEUE}")
                for key in reserved:
                    pipe.llen(key)
                time.sleep(0.001)
            end = max(end, time.time())
        first = float(r.get("bench:first"))
    finally:
        code = stop_worker(proc)
    assert code == 0, f"{kind} exited with {code}"
    processed, failed = int(r.get("stat:processed") or 0), int(r.get("stat:failed") or 0)
    assert processed == jobs and failed == 0, f"{kind}: stat:processed={processed} stat:failed={failed}"
    assert r.llen(f"queue:{QUEUE}") == 0 and not r.keys("sidequest:reserved:*")
    seconds = end - first
    return {"seconds": seconds, "rate": jobs / seconds, "latency_first": first - renamed_at}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("jobs", nargs="?", type=int, default=20_000, help="no-op jobs per worker (20,000)")
    parser.add_argument("-c", "--concurrency", type=int, default=10, help="threads per worker (10)")
    args = parser.parse_args(argv)
    kinds = ["sidequest-reliable", "sidequest-basic"]
    if ruby_sidekiq():
        kinds.append("ruby")
    else:
        print("Ruby Sidekiq not installed (apt-get install ruby-sidekiq): measuring sidequest only")
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="sq-bench-jobs-") as tmp, PrivateRedis() as server:
        workdir = Path(tmp)
        (workdir / "bench_noop.py").write_text(PYTHON_JOB)
        (workdir / "bench_noop.rb").write_text(RUBY_JOB)
        for kind in kinds:
            results[kind] = measure(kind, server.url, workdir, args.jobs, args.concurrency)

    labels = {"sidequest-reliable": "sidequest, reliable fetch", "sidequest-basic": "sidequest, basic fetch",
              "ruby": "Ruby Sidekiq 6 (basic fetch)"}
    print(f"throughput of {args.jobs:,} no-op jobs through one worker process, concurrency {args.concurrency}"
          f" ({os.cpu_count()} CPUs, shared with redis-server)")
    for kind, res in results.items():
        print(f"  {labels[kind]:<30} {res['seconds']:7.3f} s  {res['rate']:9,.0f} jobs/s"
              f"  (first job {res['latency_first'] * 1000:.1f} ms after the jobs appeared)")
    reliable, basic = results["sidequest-reliable"]["rate"], results["sidequest-basic"]["rate"]
    print(f"  reliable / basic (sidequest):      {reliable / basic:.2f}")
    if "ruby" in results:
        ruby = results["ruby"]["rate"]
        print(f"  sidequest reliable / Ruby Sidekiq: {reliable / ruby:.2f}")
        print(f"  sidequest basic / Ruby Sidekiq:    {basic / ruby:.2f}")
    return results


if __name__ == "__main__":
    main()
