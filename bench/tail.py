"""The tail of an idle worker's enqueue -> start latency, and what ran while a slow probe waited:
`sidequest worker` with no flags (and, with --baseline REF, sidequest as of git commit REF) next
to Ruby Sidekiq 6.4 -c 10 (no YJIT, as issue 41 compares), in interleaved rounds on one private
redis-server.

    .venv/bin/python bench/tail.py [--probes 2000] [--rounds 3] [--baseline REF] [--variant NAME=FLAGS]
                                   [--no-sidekiq]

Each worker is started, left until idle and past its poller's first randomised wait, then sent
one stamp job at a time, the same Sidekiq payload for every row (MULTI: SADD queues, LPUSH, as
Sidekiq's client sends it), and the driver waits for the job's stamp before the next. Latency is
the job's `time.time()` at start minus the push's (one machine, one clock). Around each probe
the driver reads every worker thread's run time (/proc/<pid>/task/<tid>/schedstat, nanoseconds),
outside the timed span, so the slowest probes are listed with the threads that ran meanwhile;
sidequest's stamp job (BENCH_TAIL_TRACE=1, bench/peers/sidequest_peer.py) adds the GC passes that
overlapped the wait and the thread that ran it. Prints p50/p90/p99/p99.9 per round and their
medians, the load average at each round's start, and each row's 10 slowest probes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redis
from common import PrivateRedis
from harness import baseline
from harness.peers import Peer
from harness.phases import percentile
from harness.rows import Row
from harness.tree import Tree

T = TypeVar("T")

QUEUE, STAMPS, THREADS = "bench", "bench:stamps", "bench:tail:threads"
WARMUP = 6.0  # s of worker age before probing: the pollers' first, randomised wait is over
SHOWN = 10
IDLE_SPAN = 5.0  # s of an idle worker whose threads' wake-ups are counted before the probes
CPU_SHOWN_US = 50  # a thread that ran less than this (µs) during a probe is not named


@dataclass
class Probe:
    ms: float
    extra: list[str]  # sidequest's: GC ms, GC generations, the job's thread
    ran: list[tuple[int, int, tuple[int, int]]]  # run ns, wait ns, (pid, tid), the most first


def role(name: str) -> str:
    """A thread's name without its number: what kind of thread it is."""
    return name.rstrip("0123456789]").rstrip("-[").removeprefix("sidequest-")


@dataclass
class Result:
    rounds: list[list[float]] = field(default_factory=list)
    slow: list[str] = field(default_factory=list)
    company: list[str] = field(default_factory=list)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--probes", type=int, default=2000, help="probes per row per round (2,000)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    p.add_argument("--baseline", metavar="REF", help="also measure sidequest as of git commit REF")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS",
                   help="also a sidequest row with these worker flags and environment, e.g. 'unpinned=--no-pin-cpu'")
    p.add_argument("--no-sidekiq", action="store_true", help="leave Ruby Sidekiq out")
    return p.parse_args()


def rows(args: argparse.Namespace) -> list[Row]:
    cores = os.cpu_count() or 1
    trace = (("BENCH_SIDEQUEST_DEFAULT", "1"), ("BENCH_TAIL_TRACE", "1"))
    found = [] if args.no_sidekiq else [Row("sidekiq-nojit", "sidekiq", 1, env=(("BENCH_SIDEKIQ_YJIT", "0"),))]
    found.append(Row("sidequest", "sidequest", cores, env=trace))
    for variant in args.variant:
        name, _, flags = variant.partition("=")
        words = flags.split()  # worker flags, and ENV=VALUE pairs for its environment
        extra = [(k, v) for k, _, v in (w.partition("=") for w in words if not w.startswith("-"))]
        flags = " ".join(w for w in words if w.startswith("-"))
        env = (*trace, ("BENCH_SIDEQUEST_ARGS", flags), *extra)
        found.append(Row(f"sidequest-{name}", "sidequest", cores, env=env))
    if args.baseline:
        base = baseline.checkout(args.baseline)
        found.append(Row(f"sidequest@{base.short}", "sidequest", cores, env=trace, src=str(base.src)))
    return found


def per_thread(tree: Tree, name: str, read: Callable[[str], T]) -> dict[tuple[int, int], T]:
    """`read` of /proc/<pid>/task/<tid>/<name> for each thread of the worker's processes, by (pid,
    tid); a thread or process that ended meanwhile is left out."""
    found = {}
    for proc in tree.processes():
        base = f"/proc/{proc.pid}/task"
        try:
            tids = os.listdir(base)
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"{base}/{tid}/{name}") as f:
                    found[(proc.pid, int(tid))] = read(f.read())
            except (OSError, ValueError, StopIteration):
                continue
    return found


def switches(tree: Tree) -> dict[tuple[int, int], int]:
    """Voluntary context switches of each thread of the worker's processes: how often it slept
    and so woke (each wake-up of a Python thread takes the GIL)."""
    return per_thread(tree, "status", lambda text: int(next(
        x for x in text.splitlines() if x.startswith("voluntary_ctxt_switches")).split()[1]))


def run_times(tree: Tree) -> dict[tuple[int, int], tuple[int, int]]:
    """Nanoseconds each thread of the worker's processes has run, and has waited for a CPU while
    runnable: (pid, tid) -> (run ns, wait ns)."""
    return per_thread(tree, "schedstat", lambda text: (int(text.split()[0]), int(text.split()[1])))


def thread_name(r: redis.Redis, pid: int, tid: int, names: dict[bytes, bytes]) -> str:
    if pid == tid:
        return f"main[{pid}]"
    if (name := names.get(str(tid).encode())) is not None:
        return name.decode()
    try:
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return str(tid)


def payload(sent: float, n: int) -> str:
    return json.dumps({"class": "BenchStamp", "args": [sent], "queue": QUEUE, "jid": f"{n:024x}",
                       "retry": True, "created_at": sent, "enqueued_at": sent})


def probe(r: redis.Redis, tree: Tree, count: int) -> list[Probe]:
    r.delete(STAMPS)
    seen: list[Probe] = []
    for n in range(count):
        before = run_times(tree)
        pipe = r.pipeline(transaction=True)
        sent = time.time()
        pipe.sadd("queues", QUEUE).lpush(f"queue:{QUEUE}", payload(sent, n)).execute()
        try:
            got = r.blpop([STAMPS], timeout=30)
        except redis.TimeoutError:
            got = None
        if got is None:
            held = {k.decode(): r.llen(k) for k in r.scan_iter("*") if r.type(k) == b"list"}
            raise SystemExit(f"probe {n}: a stamp job did not run within 30 s; lists: {held}")
        after = run_times(tree)
        fields = got[1].decode().split()
        ms = (float(fields[1]) - float(fields[0])) * 1000
        ran = [(run - before.get(key, (0, 0))[0], wait - before.get(key, (0, 0))[1], key)
               for key, (run, wait) in after.items()]
        seen.append(Probe(ms, fields[2:], sorted(ran, reverse=True)))
    return seen


def describe(slow: Probe, names: dict[tuple[int, int], str]) -> str:
    busy = [f"{names[key]} {run / 1000:.0f}/{wait / 1000:.0f}"
            for run, wait, key in slow.ran if max(run, wait) >= CPU_SHOWN_US * 1000]
    extra = slow.extra
    job = f"gc {extra[0]} ms (gen {extra[1]}), job on {extra[2]}; " if extra else ""
    return f"{slow.ms:7.2f} ms  {job}ran/waited for a CPU (µs): {', '.join(busy) or '-'}"


def company(probes: list[Probe], names: dict[tuple[int, int], str]) -> list[str]:
    """For each kind of thread, the share of probes during which one of them (not the job's
    thread: the one that ran most, for Sidekiq) ran 20 µs or more: of all probes, and of the
    slowest 1%; and the job's thread's run and wait (median, p99 of the slowest 1%)."""
    cut = percentile([p.ms for p in probes], 99)
    seen: dict[str, list[int]] = {}
    job_run, job_wait = [], []
    for p in probes:
        job = p.ran[0][2] if not p.extra else max(
            (r for r in p.ran if names[r[2]] == p.extra[2]), default=p.ran[0])[2]
        kinds = set()
        for run, wait, key in p.ran:
            if key == job:
                job_run.append(run / 1000)
                job_wait.append(wait / 1000)
            elif run >= 20_000:
                kinds.add(role(names[key]))
        for kind in kinds:
            counts = seen.setdefault(kind, [0, 0])
            counts[0] += 1
            counts[1] += p.ms >= cut
    slow_n = sum(p.ms >= cut for p in probes)
    lines = [f"job's thread: ran {percentile(job_run, 50):.0f} µs (p50), waited for a CPU "
             f"{percentile(job_wait, 50):.0f} µs (p50) {percentile(job_wait, 99):.0f} µs (p99)"]
    lines += [f"{name:24} ran in {all_ / len(probes):6.1%} of probes, {slow / slow_n:6.1%} of the slowest 1%"
              for name, (all_, slow) in sorted(seen.items(), key=lambda kv: -kv[1][1])]
    return lines


def once(peer: Peer, r: redis.Redis, count: int, name: str) -> tuple[list[float], list[str], list[str]]:
    tree = Tree(peer.start_worker(0, name))
    try:
        if note := tree.wait_idle(60):
            print(f"  {peer.row.id}: {note}")
        tree.wait_age(WARMUP)
        idle0, began = switches(tree), time.monotonic()
        time.sleep(IDLE_SPAN)
        idle1, spent = switches(tree), time.monotonic() - began
        probes = probe(r, tree, count)
        named = r.hgetall(THREADS)
        names = {key: thread_name(r, *key, named) for p in probes for _, _, key in p.ran}
        wakes: dict[str, float] = {}
        for key, n in idle1.items():
            kind = role(thread_name(r, *key, named))
            wakes[kind] = wakes.get(kind, 0) + (n - idle0.get(key, n)) / spent
        idle = "idle wake-ups/s, all processes: " + ", ".join(
            f"{kind} {rate:.1f}" for kind, rate in sorted(wakes.items(), key=lambda kv: -kv[1]))
        slow = sorted(probes, key=lambda p: -p.ms)[:SHOWN]
        return [p.ms for p in probes], [describe(p, names) for p in slow], [idle, *company(probes, names)]
    finally:
        tree.stop(30)
        r.flushall()


def figures(ms: list[float]) -> str:
    return "  ".join(f"p{p:g} {percentile(ms, p):6.2f}" for p in (50, 90, 99, 99.9)) + f"  max {max(ms):6.2f}"


def main() -> None:
    args = parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="sq-tail-"))
    with PrivateRedis() as server:
        r = redis.Redis.from_url(server.url)
        peers = [Peer(row, sys.executable, server.url, log_dir) for row in rows(args)]
        print(f"{args.probes} idle probes a row a round, {args.rounds} round(s); ms; worker logs in {log_dir}")
        results = {peer.row.id: Result() for peer in peers}
        for k in range(args.rounds):
            order = peers if k % 2 == 0 else peers[::-1]
            for peer in order:
                load = os.getloadavg()[0]
                latencies, slow, with_whom = once(peer, r, args.probes, f"r{k}")
                results[peer.row.id].rounds.append(latencies)
                results[peer.row.id].company = with_whom
                print(f"round {k + 1} {peer.row.id:18} load {load:4.2f}  {figures(latencies)}", flush=True)
                results[peer.row.id].slow = slow
        print("\nmedian over rounds (ms):")
        for row_id, result in results.items():
            cols = [statistics.median(percentile(ms, p) for ms in result.rounds) for p in (50, 90, 99, 99.9)]
            print(f"  {row_id:18} p50 {cols[0]:6.2f}  p90 {cols[1]:6.2f}  p99 {cols[2]:6.2f}  p99.9 {cols[3]:6.2f}")
        for row_id, result in results.items():
            print(f"\n{row_id}: the {SHOWN} slowest probes of the last round")
            for line in result.slow:
                print(f"  {line}")
            for line in result.company:
                print(f"  {line}")


if __name__ == "__main__":
    main()
