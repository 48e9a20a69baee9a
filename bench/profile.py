"""Where a sidequest worker spends its time: py-spy samples one worker draining no-op jobs.

    .venv/bin/python bench/profile.py [JOBS] [-c CONCURRENCY] [--pin-cpu] [--all-threads] [--baseline REF] [--bare]
                                      [--async] [--calls] [--no-sample]

The same job and method as `make bench` (the jobs are renamed aside while the worker starts,
then appear at once). py-spy samples the worker 250 times a second; by default only the thread
holding the GIL (`--gil`), which is where Python CPU goes. Prints the share of samples by
function (self, then inclusive) and the worker's CPU time per job split into user and system.
With --baseline REF, the worker is sidequest as of git commit REF (see harness/baseline.py).
--async profiles `async def` jobs (the asyncio runner, as `make bench`'s sidequest-async row).
--calls counts instead of sampling: yappi (`pip install yappi`) counts every call of every thread
from the first no-op job to the last, and prints calls a job (machine-independent: two commits
compare on any machine, loaded or not) and the functions called most, with their own CPU a job
(yappi slows the worker several times; its CPU figures are for ranking, not for comparing).
"""

from __future__ import annotations

import argparse
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psutil
import redis

sys.path.insert(0, os.path.dirname(__file__))
from common import PrivateRedis
from harness import baseline

PEERS = Path(__file__).resolve().parent / "peers"


def cpu_times(proc: psutil.Process) -> tuple[float, float]:
    user = system = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        user, system = user + t.user, system + t.system
    return user, system


def wait_idle(proc: psutil.Process) -> None:
    time.sleep(1.0)
    last = sum(cpu_times(proc))
    while True:
        time.sleep(0.5)
        now = sum(cpu_times(proc))
        if now - last < 0.01:
            return
        last = now


def shares(raw: Path, top: int) -> None:
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        total += int(count)
        own[frames[-1]] += int(count)
        for frame in set(frames):
            inclusive[frame] += int(count)
    print(f"\n{total} samples; self time by function:")
    for frame, n in own.most_common(top):
        print(f"  {100 * n / total:5.1f}%  {frame}")
    print("inclusive:")
    for frame, n in inclusive.most_common(top + 6)[6:]:  # past the thread bootstrap frames
        print(f"  {100 * n / total:5.1f}%  {frame}")


def counts(saved: Path, jobs: int, top: int) -> None:
    """Calls a job from yappi's pstats file (the jobs between the first and the last counted)."""
    stats = pstats.Stats(str(saved)).stats  # type: ignore[attr-defined]
    rows = [(calls, own, f"{Path(file).name}:{line}({name})") for (file, line, name), (_, calls, own, _, _)
            in stats.items()]
    total = sum(calls for calls, _, _ in rows)
    print(f"\n{total / jobs:.1f} calls a job ({jobs:,} jobs counted, every thread); most called:")
    for calls, own, where in sorted(rows, reverse=True)[:top]:
        print(f"  {calls / jobs:7.2f}  {1e6 * own / jobs:7.2f} µs own  {where}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("jobs", nargs="?", type=int, default=40_000)
    parser.add_argument("-c", "--concurrency", type=int, default=10)
    parser.add_argument("--all-threads", action="store_true", help="sample every thread, waiting ones too")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--pin-cpu", action="store_true", help="run the worker with --pin-cpu")
    parser.add_argument("--baseline", metavar="REF", help="profile sidequest as of git commit REF instead")
    parser.add_argument("--bare", action="store_true",
                        help="sync jobs that send no Redis command: sidequest's own cost per job, no INCR")
    parser.add_argument("--no-sample", action="store_true",
                        help="no py-spy: only the worker's CPU per job, unperturbed (to compare two commits)")
    parser.add_argument("--async", dest="asyncio", action="store_true",
                        help="async def jobs (BENCH_ASYNC=1: the asyncio runner)")
    parser.add_argument("--calls", action="store_true",
                        help="count calls a job with yappi (every thread) instead of sampling with py-spy")
    parser.add_argument("--keep", metavar="FILE", help="with --calls: keep yappi's pstats file there (callers too)")
    args = parser.parse_args()
    if args.asyncio:
        os.environ["BENCH_ASYNC"] = "1"
    if args.bare and os.environ.get("BENCH_ASYNC") == "1":
        parser.error("--bare is for sync jobs: unset BENCH_ASYNC")
    if args.calls:
        args.no_sample = True
    path = [str(PEERS)]
    if args.baseline:
        path.insert(0, str(baseline.checkout(args.baseline).src))
    spy = shutil.which("py-spy", path=os.path.dirname(sys.executable)) or shutil.which("py-spy")
    if spy is None and not args.no_sample:
        raise SystemExit("py-spy is not installed: .venv/bin/pip install -e '.[bench]'")
    with PrivateRedis() as server, tempfile.TemporaryDirectory() as tmp:
        r = redis.Redis.from_url(server.url)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "BENCH_TOTAL": str(args.jobs),
               "REDIS_URL": server.url, "BENCH_SIDEQUEST_ARGS": "--pin-cpu" if args.pin_cpu else "",
               **({"BENCH_BARE": "1"} if args.bare else {}),
               **({"BENCH_CALLS": str(Path(tmp) / "calls.pstat")} if args.calls else {})}
        peer = [sys.executable, str(PEERS / "sidequest_peer.py")]
        log = Path(tmp) / "worker.log"
        subprocess.run([*peer, "enqueue", "--url", server.url, "--count", str(args.jobs)], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        r.rename("queue:bench", "bench:aside")
        worker = subprocess.Popen([*peer, "worker", "--url", server.url, "--concurrency", str(args.concurrency)],
                                  env=env, stdout=subprocess.DEVNULL, stderr=log.open("w"))
        try:
            proc = psutil.Process(worker.pid)
            wait_idle(proc)
            raw = Path(tmp) / "samples.txt"
            sampler = None if args.no_sample else subprocess.Popen(
                [str(spy), "record", "-p", str(worker.pid), "-o", str(raw), "-f", "raw", "-r", "250", "--nonblocking",
                 *([] if args.all_threads else ["--gil"])], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # py-spy attached
            user0, system0 = cpu_times(proc)
            r.config_resetstat()
            r.rename("bench:aside", "queue:bench")
            while r.blpop(["bench:last"], timeout=1) is None:
                if worker.poll() is not None:
                    raise SystemExit("the worker exited")
            user1, system1 = cpu_times(proc)
            stats = r.info("commandstats")
            if sampler is not None:
                sampler.send_signal(signal.SIGINT)
                sampler.wait(30)
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(60)
            except subprocess.TimeoutExpired:
                print("the worker did not stop within 60 s of its TERM: killed", file=sys.stderr)
                worker.kill()
                worker.wait()
        n = args.jobs
        user, system = 1e6 * (user1 - user0) / n, 1e6 * (system1 - system0) / n
        print("".join(line for line in log.read_text().splitlines(keepends=True) if line.startswith("sidequest_peer:")),
              end="")
        print(f"worker CPU per job: user {user:.1f} µs, system {system:.1f} µs ({n:,} jobs, -c {args.concurrency}"
              + ("; py-spy's sampling adds a little)" if sampler is not None else ")"))
        calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
        calls = {name: count for name, count in calls.items() if name not in ("config|resetstat", "rename")}
        print("Redis commands per job (Lua's inside counted too): "
              + ", ".join(f"{name} {count / n:.3f}" for name, count in sorted(calls.items(), key=lambda kv: -kv[1])))
        if sampler is not None:
            shares(raw, args.top)
        if args.calls:
            counts(Path(tmp) / "calls.pstat", n - 1, args.top)
            if args.keep:
                shutil.copy(Path(tmp) / "calls.pstat", args.keep)


if __name__ == "__main__":
    main()
