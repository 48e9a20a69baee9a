"""Reliability with real worker processes and a real Redis: kills, pauses, crashes, time limits.

Every test starts `sidequest worker` subprocesses with short knobs (heartbeat every 0.5 s,
TTL 2 s, recovery every 0.5 s), logs each to a file (a pipe could fill and block a worker that
runs thousands of jobs), and kills whatever is still running in the `procs` fixture's
teardown. Jobs are `Work(n, ...)` from jobs_for_tests, which records ("work-start", n, pid)
and ("work-done", n, pid), so runs are counted per job and per process.
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import random
import signal
import subprocess
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from conftest import PYTHON, STARTUP, RedisServer, python_env, wait_until
from helpers import fetches_blocked, ran, reserved, zset_items
from jobs_for_tests import async_timed, exit_hard, spin, timed, work

from sidequest import Client, Config
from sidequest.store.dev_server import server_binary

KNOBS = ["--heartbeat-interval", "0.5", "--heartbeat-ttl", "2", "--recovery-interval", "0.5",
         "--poll-interval", "0.2"]
# An idle processor blocks in a fetch this long (default 2 s); a stop waits for those fetches.
FETCH_TIMEOUT = "0.5"
TIMEOUT_ERROR = "sidequest.errors.JobTimeoutError"


# -- processes -------------------------------------------------------------------------------

def process_state(pid: int) -> str | None:
    """`pid`'s state letter in /proc (R, S, T for stopped, Z...), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting to be reaped counts as gone)."""
    return process_state(pid) not in (None, "Z", "X")


def tcp_ports(pid: int) -> set[int]:
    """The local ports of `pid`'s TCP sockets: its fds' socket inodes, found in /proc/net/tcp*."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as f:
            for line in list(f)[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def children(pid: int) -> list[int]:
    """Live child processes of `pid` (read from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if len(fields) > 1 and int(fields[1]) == pid and fields[0] not in ("Z", "X"):
            found.append(int(entry))
    return found


class Worker:
    """`sidequest worker -r jobs_for_tests ...` as a subprocess, its output in a log file."""

    def __init__(self, redis_url: str, log_dir: Path, *args: str, knobs: bool = True,
                 env: dict[str, str] | None = None) -> None:
        self.log_path = log_dir / f"worker-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115  (open while the process runs)
        command = [PYTHON, "-m", "sidequest.cli", "worker", "-r", "jobs_for_tests",
                   *(KNOBS if knobs else []), *args]
        self.proc = subprocess.Popen(command, env=python_env(REDIS_URL=redis_url, SQ_TEST_REDIS_URL=redis_url,
                                                    SIDEQUEST_FETCH_TIMEOUT=FETCH_TIMEOUT, **(env or {})),
                                     stdout=self._log, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid
        self.termed = False

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_registered(self, r, timeout: float = STARTUP) -> str:
        """This process's identity, once its heartbeat hash is in Redis."""
        def find():
            assert self.proc.poll() is None, f"worker exited early:\n{self.output()}"
            for raw in r.smembers("processes"):
                ident = raw.decode()
                if f":{self.pid}:" in ident and r.exists(ident):
                    return ident
            return None
        return wait_until(find, timeout, 0.05, "the worker to register")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def sigkill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def sigkill_settled(self, r) -> None:
        """kill -9, then wait until Redis has run every command the process sent before it died,
        so what a test reads next is final. A dead process's last commands (an item's write, a
        checkpoint) can still be in the loopback or Redis's input when `wait` returns; Redis
        frees a connection only after reading all it carried, so once the process's connections
        are gone from CLIENT LIST, nothing of it is in flight. The process is stopped (and the
        stop seen in /proc) first, so its set of connections is final when it is read."""
        self.proc.send_signal(signal.SIGSTOP)
        wait_until(lambda: process_state(self.pid) in ("T", "t"), 10, 0.005, f"worker {self.pid} to stop")
        ports = tcp_ports(self.pid)  # a port is not reused while the dead side's TIME_WAIT lasts
        self.sigkill()
        wait_until(lambda: not any(int(c["addr"].rsplit(":", 1)[1]) in ports for c in r.client_list()),
                   STARTUP, 0.01, f"Redis to close the connections of killed worker {self.pid}")

    def stop(self, timeout: float = 20.0) -> int:
        """TERM (once) and wait; the exit code (a worker that hangs fails the test)."""
        self.term()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker {self.pid} did not exit {timeout} s after TERM:\n{self.output()}") from None

    def term(self) -> None:
        # Only once: a second TERM that lands after the worker has finished its shutdown, while
        # the interpreter is exiting (handlers gone), ends it with -SIGTERM instead of 0.
        if not self.termed and self.proc.poll() is None:
            self.termed = True
            self.proc.send_signal(signal.SIGTERM)

    def cleanup(self) -> None:
        """Whatever state it is in (stopped, hung, supervising children): make it and its children go."""
        descendants = children(self.pid) if self.proc.poll() is None else []
        if self.proc.poll() is None:
            for sig in (signal.SIGCONT, signal.SIGTERM):
                self.proc.send_signal(sig)
            try:
                self.proc.wait(8)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in descendants:
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self._log.close()


def worker_factory(redis_url: str, log_dir: Path):
    """Generator behind the `procs` fixtures (here and in worker/test_supervisor): yields the starter."""
    started: list[Worker] = []

    def start(*args: str, url: str | None = None, knobs: bool = True, env: dict[str, str] | None = None) -> Worker:
        worker = Worker(url or redis_url, log_dir, *args, knobs=knobs, env=env)
        started.append(worker)
        return worker

    try:
        yield start
    finally:
        for worker in started:
            worker.cleanup()


@pytest.fixture
def procs(redis_url, tmp_path):
    """Start workers with `procs(*args)`; every one (and any child of it) is gone after the test."""
    yield from worker_factory(redis_url, tmp_path)


def stop_all(*workers: Worker) -> list[int]:
    """TERM them all at once, then collect their exit codes."""
    for worker in workers:
        worker.term()
    return [worker.stop() for worker in workers]


# -- what ran ----------------------------------------------------------------------------------

def runs(r) -> dict[int, dict[str, list[int]]]:
    """n -> {"start": [pid, ...], "done": [pid, ...]} from the Work job's records."""
    out: dict[int, dict[str, list[int]]] = defaultdict(lambda: {"start": [], "done": []})
    for n, pid in ran(r, "work-start"):
        out[n]["start"].append(pid)
    for n, pid in ran(r, "work-done"):
        out[n]["done"].append(pid)
    return out


def done_set(r) -> set[int]:
    return {n for n, _ in ran(r, "work-done")}


def reserved_keys(r) -> list[str]:
    return [k.decode() for k in r.scan_iter("sidequest:reserved:*")]


def no_reserved_left(r) -> bool:
    return not any(r.llen(k) for k in reserved_keys(r))


def live_processes(r) -> dict[str, int]:
    """identity -> pid of every process whose heartbeat hash is in Redis."""
    out = {}
    for raw in r.smembers("processes"):
        info = r.hget(raw.decode(), "info")
        if info:
            out[raw.decode()] = json.loads(info)["pid"]
    return out


def wait_children(r, supervisor: Worker, count: int, timeout: float = STARTUP) -> dict[str, int]:
    """identity -> pid of `count` registered, live children of `supervisor`."""
    def ready():
        assert supervisor.proc.poll() is None, f"supervisor exited:\n{supervisor.output()}"
        mine = set(children(supervisor.pid))
        found = {i: p for i, p in live_processes(r).items() if p in mine}
        return found if len(found) == count and len(mine) == count else None
    return wait_until(ready, timeout, 0.05, f"{count} registered children")


# -- 1. kill -9 with jobs in flight --------------------------------------------------------------

def test_sigkill_with_jobs_in_flight_loses_nothing_and_reruns_only_those(procs, r, client):
    gate = "gate:after-kill"
    first = list(range(20))  # quick jobs that finish before the kill
    held = list(range(20, 25))  # one per processor, still running when the kill comes
    rest = list(range(25, 50))  # waiting in the queue behind them
    a = procs("-c", "5")
    ident_a = a.wait_registered(r)
    client.push_bulk(work, [[n, 0.02] for n in first])
    client.push_bulk(work, [[n, 60, gate] for n in held])
    client.push_bulk(work, [[n, 0.02] for n in rest])

    def all_held_running():
        seen = runs(r)
        return all(seen[n]["start"] for n in held) and all(seen[n]["done"] for n in first) and \
            not {json.loads(x)["args"][0] for x in reserved(r, ident_a)} & set(first)
    # the quick jobs' acknowledgements too: one in flight at the kill may run again (the contract
    # allows it; test_after_a_sigkill_only_running_jobs_... measures that), not in this picture
    wait_until(all_held_running, 15, 0.05, "the five held jobs to run, the quick ones acknowledged")

    a.signal(signal.SIGSTOP)  # freeze it, look, then kill: a consistent picture of the kill
    kept = {json.loads(x)["args"][0] for x in reserved(r, ident_a)}
    before = runs(r)
    a.sigkill()
    r.set(gate, 1)  # re-runs of the held jobs finish at once (the killed copies never will)

    in_flight = {n for n, v in before.items() if v["start"] and not v["done"]}
    assert in_flight == set(held) and in_flight <= kept  # every started, unfinished job was still reserved
    assert kept - in_flight <= set(rest)  # besides them, only jobs kept in hand that never started
    assert not any(before[n]["start"] for n in rest)

    b = procs("-c", "5")
    b.wait_registered(r)
    wait_until(lambda: done_set(r) == set(range(50)), STARTUP, 0.1, "every job to complete")
    wait_until(lambda: no_reserved_left(r), 30, 0.1, "no job left reserved")

    after = runs(r)
    lost = set(range(50)) - {n for n, v in after.items() if v["done"]}
    assert lost == set()
    again = {n for n, v in after.items() if len(v["start"]) > 1}
    assert again <= in_flight and len(again) <= 5  # only the jobs the kill interrupted ran twice
    assert again == set(held)  # and each of those did run again, to completion, on b
    for n in held:
        assert after[n]["start"] == [a.pid, b.pid] and after[n]["done"] == [b.pid]
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0
    assert b.stop() == 0
    assert "recovered a job of dead process" in b.output()


@pytest.mark.parametrize("runner", ["threads", "asyncio"])
def test_after_a_sigkill_only_running_jobs_run_again_and_recovery_is_not_serialized(procs, r, client, capsys, runner):
    """Two workers of ten processors (or ten jobs in flight on the asyncio runner's loop); one is
    killed in its second wave of jobs, with some jobs finished and ten running. Only the jobs it
    was running may run again (a job that ended a few milliseconds before the kill may too: its
    acknowledgement can be in flight), and the recovered ones run side by side on the survivor:
    each rerun starts before the first of them ends, all within about heartbeat TTL + recovery
    interval of the kill (recovered one at a time, they would take ten job times). The survivor
    starts once a runs every job, and is idle, fetching, when they come back.

    Issue 28 item 17: under load this flaked two ways. The survivor had to register within 7 s
    (before a's second wave ended): a's second wave now lasts until the test releases it (`gate`),
    after the kill, so a start-up of any length is waited for (a start-up wait is no contract).
    And a wall-clock bound (TTL + interval + job time + 2 s) missed by a second: the delay until
    the reruns start is now counted on the survivor's own clock, its heartbeats (see below)."""
    ttl, interval, job_time, beat = 2.0, 0.5, 8.0, 0.5
    gate = "test:gate:second-wave"
    job, flags = (timed, ("-c", "10")) if runner == "threads" else (
        async_timed, ("--runner", "asyncio", "--async-jobs", "10"))
    a = procs(*flags)
    a.wait_registered(r)
    client.push_bulk(job, [[n, 1.0] for n in range(10)] + [[n, job_time, gate] for n in range(10, 20)])
    def records(kind):  # n -> [(pid, at), ...]
        out = defaultdict(list)
        for n, pid, at in ran(r, kind):
            out[n].append((pid, at))
        return out

    def a_in_second_wave():
        # the first wave's ten 1 s jobs done and the second wave's ten jobs under way on a (they
        # end only once `gate` is set): counted by job number, a first-wave job is no second wave
        done_on_a = {n for n, v in records("timed-done").items() if any(pid == a.pid for pid, _ in v)}
        started_on_a = {n for n, v in records("timed-start").items() if any(pid == a.pid for pid, _ in v)}
        return set(range(10)) <= done_on_a and started_on_a >= set(range(10, 20))
    wait_until(a_in_second_wave, 2 * STARTUP, 0.02, "a to finish jobs and run a second wave")
    b = procs(*flags)
    b_identity = b.wait_registered(r)
    # a's ten processors are all busy: a fetch blocked in Redis is b's, ready for the reruns
    wait_until(lambda: fetches_blocked(r) > 0, STARTUP, 0.02, "b to wait for jobs")
    killed_at = time.time()
    a.signal(signal.SIGSTOP)  # frozen: what it ran and finished is final from here on
    wait_until(lambda: process_state(a.pid) in ("T", "t"), 10, 0.005, "a to stop")
    started, ended = records("timed-start"), records("timed-done")
    a.sigkill()
    r.set(gate, 1)  # the reruns end after their job time
    on_a = {n for n, v in started.items() if any(pid == a.pid for pid, _ in v)}
    finished_on_a = {n: at for n, v in ended.items() for pid, at in v if pid == a.pid}
    running = on_a - set(finished_on_a)
    assert len(running) >= 5

    b_beats: set[float] = set()  # the survivor's heartbeats (its own clock's time of each)

    def every_job_done() -> bool:
        seen = r.hget(b_identity, "beat")
        if seen is not None:
            b_beats.add(float(seen))
        return set(records("timed-done")) == set(range(20))
    wait_until(every_job_done, 2 * STARTUP, 0.02, "every job to complete")
    wait_until(lambda: no_reserved_left(r), 10, 0.05, "no job left reserved")
    started, ended = records("timed-start"), records("timed-done")
    assert set(ended) == set(range(20))  # lost: none
    again = {n for n, v in started.items() if len(v) > 1}
    assert running <= again  # each interrupted job ran again, on b
    for n in again - running:  # any other rerun ended on a only a moment before the kill
        assert killed_at - finished_on_a[n] < 0.25, (n, killed_at - finished_on_a[n])
    assert all(len(v) <= 2 for v in started.values())
    rerun_starts = [at for n in running for pid, at in started[n] if pid == b.pid]
    rerun_ends = [at for n in running for pid, at in ended[n] if pid == b.pid]
    assert len(rerun_starts) == len(rerun_ends) == len(running)
    # How long after the kill the reruns started, counted in the survivor's heartbeats: a's
    # heartbeat expires within TTL of the kill, b's recovery looks every `interval`, so about
    # (TTL + interval) / beat beats, and two beats more for the moves and the fetch. A wall-clock
    # bound cannot tell a survivor that recovers late from one the machine starves (its threads
    # then wait for a CPU, its heartbeat as much as its recovery): the bound in beats is what the
    # survivor could do with the time it got. Beats missed by a starved test make it laxer, never
    # stricter; a survivor that beats on time and recovers late still fails it.
    first_start = min(rerun_starts)
    beats_before = sorted(at - killed_at for at in b_beats if killed_at < at < first_start)
    allowed = round((ttl + interval) / beat) + 2
    with capsys.disabled():  # the figures a reader of the delivery contract wants (see docs/reliability.md)
        print(f"\nkill -9 of 1 of 2 workers ({runner}, 10 at once, {job_time:g} s jobs, TTL {ttl:g} s): "
              f"{len(running)} running, "
              f"{len(finished_on_a)} finished before it; ran again: {len(again & running)} of the running, "
              f"{len(again - running)} others; reruns started {first_start - killed_at:.1f} s after the kill "
              f"({len(beats_before)} beats of the survivor, at most {allowed}), all recovered work done "
              f"{max(rerun_ends) - killed_at:.1f} s after it")
    details = ([f"{at - killed_at:.2f}" for at in sorted(rerun_starts)], beats_before, b.output()[-3000:])
    assert max(rerun_starts) < min(rerun_ends), details  # side by side, not one at a time
    assert len(beats_before) <= allowed, details
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0
    assert b.stop() == 0
    assert "running it alone" not in b.output()


# -- 2. kill -9 in a loop ------------------------------------------------------------------------

def test_random_sigkills_in_a_loop_lose_nothing(procs, r, client):
    total, concurrency = 2000, 5
    args = ("-c", str(concurrency), "--max-recoveries", "100")
    client.push_bulk(work, [[n, 0.01] for n in range(total)])
    workers = [procs(*args) for _ in range(3)]
    for worker in workers:  # on a busy machine a start takes seconds: kill workers, not start-ups
        worker.wait_registered(r)
    wait_until(lambda: len(done_set(r)) >= 50, 30, 0.05, "the workers to be under way")
    rng = random.Random(1234)
    kills = 0
    running = ended = in_hand = 0  # what the kills orphaned, by what the victim had done with it
    caught: Counter[int] = Counter()  # job -> how many kills caught it started: its only reruns
    began = time.monotonic()
    for _ in range(5):
        time.sleep(rng.uniform(0.6, 1.0))  # the pause between kills is the scenario
        index = rng.randrange(len(workers))
        victim = workers[index]
        victim.sigkill_settled(r)  # what it sent before it died has run: nothing is in flight
        kills += 1
        # a dead process's reserved lists are frozen until recovery (at least a TTL away), and so
        # are its records: read both, and sort what it held by what it had done with each job
        held = [json.loads(x)["args"][0] for key in reserved_keys(r) if f":{victim.pid}:" in key
                for x in r.lrange(key, 0, -1)]
        seen = runs(r)
        started = {n for n in held if victim.pid in seen[n]["start"]}
        finished = {n for n in started if victim.pid in seen[n]["done"]}
        assert len(started - finished) <= concurrency  # running: one job per processor at most
        running += len(started - finished)
        ended += len(finished)  # its acknowledgement was in flight (ended in the last few ms)
        in_hand += len(held) - len(started)  # kept in hand, never started: they run once, later
        caught.update(started)
        workers[index] = procs(*args)

    def finished():
        return len(done_set(r)) == total
    wait_until(finished, 2 * STARTUP, 0.25, f"all {total} jobs to complete")  # replacements start meanwhile
    wait_until(lambda: no_reserved_left(r), 15, 0.1, "every reserved list to be recovered")
    assert r.llen("queue:default") == 0 and r.zcard("dead") == 0 and r.zcard("retry") == 0

    seen = runs(r)
    assert sorted(seen) == list(range(total))  # lost = 0
    again = {n for n, v in seen.items() if len(v["start"]) > 1}
    print(f"\n{kills} kills orphaned {running} running job(s), {ended} just ended and {in_hand} kept "
          f"in hand; {len(again)} job(s) ran again; all {total} done in {time.monotonic() - began:.1f} s")
    assert running > 0, "no kill caught a job in flight; the test proved nothing"
    for n, v in seen.items():  # a job runs again only because a kill caught it started, once a kill
        assert len(v["start"]) <= 1 + caught[n], (n, v, caught[n])
    for worker in workers:
        worker.wait_registered(r)  # a TERM before its signal handlers are set would just kill it
    assert stop_all(*workers) == [0, 0, 0]


# -- 3. SIGSTOP past the TTL, then SIGCONT ---------------------------------------------------------

def test_a_paused_worker_loses_its_jobs_to_recovery_and_resumes_cleanly(procs, r, client):
    gate = "gate:after-pause"
    a = procs("-c", "3")
    ident_a = a.wait_registered(r)
    client.push_bulk(work, [[n, 60, gate] for n in range(3)])
    wait_until(lambda: len(ran(r, "work-start")) == 3, 30, 0.05, "three jobs running on a")
    a.signal(signal.SIGSTOP)
    b = procs("-c", "3")
    ident_b = b.wait_registered(r)

    # a stays stopped past its TTL: its hash expires and b takes the three jobs over; each was
    # running when its process stopped once: an ordinary crash, so b runs them all at once
    wait_until(lambda: not r.exists(ident_a), 30, 0.05, "a's heartbeat hash to expire")
    wait_until(lambda: [n for n, pid in ran(r, "work-start") if pid == b.pid], 30, 0.05,
               "b to run a recovered job")
    wait_until(lambda: not reserved(r, ident_a), 10, 0.05, "recovery to take all three of a's jobs")
    recovered = [json.loads(x) for x in reserved(r, ident_b) + r.lrange("queue:default", 0, -1)]
    assert sorted(p["args"][0] for p in recovered) == [0, 1, 2]
    assert all(p["recovery_count"] == 1 for p in recovered)
    wait_until(lambda: len(reserved(r, ident_b)) == 3, 10, 0.05, "b to run the three side by side")

    a.signal(signal.SIGCONT)
    wait_until(lambda: r.exists(ident_a), 15, 0.05, "a to beat again")
    beat = r.hget(ident_a, "beat")
    wait_until(lambda: r.hget(ident_a, "beat") != beat, 15, 0.05, "another beat of a")
    # a is back, beating and recovering, and has not touched the copy b is running
    assert a.proc.poll() is None
    assert len(reserved(r, ident_b)) == 3 and r.llen("queue:default") + len(reserved(r, ident_a)) == 0

    r.set(gate, 1)  # a's stale copies and the recovered ones finish now
    # each job: a's stale run (its outcome discarded: the job was no longer a's) + one recovered run
    wait_until(lambda: len(runs(r)) == 3 and all(len(v["done"]) == 2 and v["done"].count(a.pid) >= 1
                                                 for v in runs(r).values()),
               10, 0.05, "the recovered jobs to complete, once each")
    assert any(b.pid in v["done"] for v in runs(r).values())
    wait_until(lambda: no_reserved_left(r), 30, 0.05, "no job left reserved")
    assert b.stop() == 0, b.output()

    # a keeps working new jobs after the pause, then stops cleanly
    client.push_bulk(work, [[n] for n in range(100, 110)])
    wait_until(lambda: {n for n, pid in ran(r, "work-done") if pid == a.pid} >= set(range(100, 110)),
               10, 0.05, "a to run new jobs")
    assert a.stop() == 0, a.output()
    assert "Traceback" not in a.output()
    assert no_reserved_left(r) and r.llen("queue:default") == 0 and r.zcard("retry") == 0


# -- 4. a job that kills its process ----------------------------------------------------------------

def test_a_job_that_kills_its_process_goes_dead_after_the_recovery_limit(procs, r, client):
    # One processor per child: a job in flight beside the crashing one would die with it each
    # time (recovery cannot tell which job killed the process) and share its fate.
    # A TTL of 1 s shortens the three rounds of crash-and-recover; a falsely presumed death
    # here would only re-run a quick job.
    sup = procs("--processes", "2", "-c", "1", "--max-recoveries", "2", "-t", "3",
                "--heartbeat-interval", "0.25", "--heartbeat-ttl", "1")
    wait_children(r, sup, 2)
    jid = client.push(exit_hard)
    client.push_bulk(work, [[n, 0.02] for n in range(50)])

    # three crashes, each followed by the start of a new child
    wait_until(lambda: r.zcard("dead") == 1, 3 * STARTUP, 0.1, "the crashing job in the dead set")
    [(entry, _)] = zset_items(r, "dead")
    assert entry["jid"] == jid and entry["class"] == "ExitHard"
    assert entry["error_class"] == "sidequest.RecoveryLimitExceeded"
    assert entry["recovery_count"] == 3
    wait_until(lambda: done_set(r) == set(range(50)), STARTUP, 0.1, "the other 50 jobs")
    wait_until(lambda: no_reserved_left(r), 30, 0.1, "no job left reserved")
    assert r.llen("queue:default") == 0
    wait_children(r, sup, 2)  # the supervisor brought the crashed children back
    assert sup.stop() == 0
    out = sup.output()
    assert out.count("exited with code 3") == 3, out


# -- 5. time limits ----------------------------------------------------------------------------------

def retry_entry(r):
    entries = zset_items(r, "retry")
    return entries[0][0] if entries else None


def test_a_job_past_its_timeout_is_retried_and_the_worker_goes_on(procs, r, client):
    w = procs("-c", "1")  # one processor: it must be free again for the others to run
    w.wait_registered(r)
    jid = client.push(work, [0, 10], timeout=0.5)
    client.push_bulk(work, [[n, 0.01] for n in range(1, 11)])
    entry = wait_until(lambda: retry_entry(r), 30, 0.05, "the timed-out job in the retry set")
    assert entry["jid"] == jid and entry["error_class"] == TIMEOUT_ERROR
    assert entry["retry_count"] == 0 and "time limit" in entry["error_message"]
    wait_until(lambda: done_set(r) >= set(range(1, 11)), 30, 0.05, "the jobs behind it")
    assert 0 not in done_set(r)  # its abandoned thread is still sleeping
    assert w.proc.poll() is None
    assert w.stop() == 0, w.output()


def test_a_timed_out_job_recycles_its_child_process_and_nothing_is_lost(procs, r, client):
    sup = procs("--processes", "2", "-c", "2", "-t", "3")
    first = wait_children(r, sup, 2)
    jid = client.push(work, [0, 10], timeout=0.5)
    client.push_bulk(work, [[n, 0.05] for n in range(1, 31)])
    entry = wait_until(lambda: retry_entry(r), 30, 0.05, "the timed-out job in the retry set")
    assert entry["jid"] == jid and entry["error_class"] == TIMEOUT_ERROR
    [ran_it] = [pid for n, pid in ran(r, "work-start") if n == 0]
    assert ran_it in first.values()

    wait_until(lambda: not alive(ran_it), 15, 0.05, "the child that ran it to recycle")
    now = wait_children(r, sup, 2)
    assert ran_it not in now.values() and set(now.values()) - set(first.values())  # a new child
    wait_until(lambda: done_set(r) >= set(range(1, 31)), STARTUP, 0.1, "the other 30 jobs")
    wait_until(lambda: no_reserved_left(r), 30, 0.1, "no job left reserved")
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 1 and r.zcard("dead") == 0
    assert sup.stop() == 0
    out = sup.output()
    assert "recycling this worker process" in out and f"(pid {ran_it}) exited with code 0" in out, out


# -- 6. TERM while Redis is down ---------------------------------------------------------------------

@pytest.fixture
def durable_redis():
    server = RedisServer(server_binary(), ["--appendonly", "yes", "--appendfsync", "always"])
    try:
        yield server
    finally:
        server.stop()


def test_term_while_redis_is_down_loses_nothing(procs, durable_redis):
    url = durable_redis.url(0)
    r = Client(Config(redis_url=url)).redis
    client = Client(Config(redis_url=url))
    a = procs("-c", "2", "-t", "2", url=url)
    ident_a = a.wait_registered(r)
    client.push(work, [7, 1.0])
    wait_until(lambda: ran(r, "work-start"), 30, 0.02, "the job to start")
    durable_redis.halt()  # the job's record, its acknowledgement, the heartbeat: all fail now
    a.signal(signal.SIGTERM)
    assert a.proc.wait(STARTUP) == 0, a.output()
    out = a.output()
    took = logged_at(out, "INFO: stopped") - logged_at(out, "SIGTERM received")  # by its own clock
    print(f"\nworker stopped {took:.1f} s after TERM with Redis down")
    # its shutdown deadline (2 s), then at most the wait for idle fetches (fetch_timeout + 1 s)
    assert took < 2 + float(FETCH_TIMEOUT) + 1 + 1, out

    durable_redis.start()
    r = Client(Config(redis_url=url)).redis
    assert len(reserved(r, ident_a)) == 1  # not lost: still reserved, in the AOF
    b = procs("-c", "2", url=url)
    b.wait_registered(r)
    wait_until(lambda: [n for n, pid in ran(r, "work-done") if pid == b.pid] == [7], 15, 0.05,
               "the job to be recovered and completed")
    wait_until(lambda: no_reserved_left(r), 30, 0.05, "no job left reserved")
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0
    assert b.stop() == 0


def logged_at(output: str, text: str) -> float:
    """When the first log line holding `text` was written (epoch seconds, from its timestamp)."""
    line = next((line for line in output.splitlines() if text in line), None)
    assert line is not None, f"{text!r} was not logged:\n{output}"
    stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    return stamp.timestamp()


# -- 7. the knobs from a config file ------------------------------------------------------------------

def test_reliability_knobs_work_from_a_config_file(procs, r, client, tmp_path):
    basic = tmp_path / "basic.yml"
    basic.write_text(":fetch: basic\n:heartbeat_interval: 0.5\n:heartbeat_ttl: 2.5\n:job_timeout: 0.5\n"
                     ":concurrency: 2\n:queues:\n  - basicq\n")
    reliable = tmp_path / "reliable.yml"
    reliable.write_text(":fetch: reliable\n:heartbeat_interval: 0.5\n:heartbeat_ttl: 2\n"
                        ":recovery_interval: 0.5\n:max_recoveries: 0\n:queues:\n  - relq\n")
    a = procs("-C", str(basic), knobs=False)
    b = procs("-C", str(reliable), knobs=False)
    ident_a, ident_b = a.wait_registered(r), b.wait_registered(r)

    # heartbeat_ttl and heartbeat_interval (defaults 60 s and 5 s)
    assert 0 < r.ttl(ident_a) <= 3 and 0 < r.ttl(ident_b) <= 2
    beats = distinct_beats(r, ident_a, 4)
    assert min(b - a for a, b in itertools.pairwise(beats)) < 2.5, beats  # beats 0.5 s apart, not 5
    with r.pipeline(transaction=True) as pipe:  # one moment: the hash's TTL and the beat that set it
        (seconds, micros), pttl, beat = pipe.time().pttl(ident_a).hget(ident_a, "beat").execute()
    outlives = seconds + micros / 1_000_000 + pttl / 1000 - float(beat)
    assert pttl <= 2500 and outlives > 2.5 - 0.05, outlives  # each beat sets 2.5 s, not cut to 2

    # fetch: basic keeps no reserved list; job_timeout (default none) applies to a job without its own
    jid = client.push(work, [1, 5], queue="basicq")
    wait_until(lambda: ran(r, "work-start"), 30, 0.02, "the job on the basic worker")
    assert not any(ident_a in key for key in reserved_keys(r))
    entry = wait_until(lambda: retry_entry(r), 15, 0.05, "the job past job_timeout in the retry set")
    assert entry["jid"] == jid and entry["error_class"] == TIMEOUT_ERROR

    # recovery_interval (default 15 s) and max_recoveries 0: a periodic recovery, after start-up,
    # sends an orphaned job straight to dead
    client.push(work, [2], queue="relq")
    wait_until(lambda: 2 in done_set(r), 30, 0.02, "a job on the reliable worker")
    orphan = json.dumps({"retry": True, "queue": "relq", "args": [3], "class": "Work",
                         "jid": "0123456789abcdef01234567", "created_at": time.time(),
                         "enqueued_at": time.time()})
    r.lpush("sidequest:reserved:ghost:1:000000000000:0", orphan)
    r.sadd("sidequest:reservations", "sidequest:reserved:ghost:1:000000000000:0")
    planted = time.time()
    wait_until(lambda: r.zcard("dead") == 1, 30, 0.02, "the orphan in the dead set")
    [(dead, died_at)] = zset_items(r, "dead")
    assert died_at - planted < 5  # by the worker's clock: a pass every 0.5 s, not every 15 s
    assert dead["error_class"] == "sidequest.RecoveryLimitExceeded" and dead["recovery_count"] == 1
    assert 3 not in done_set(r)
    assert stop_all(a, b) == [0, 0]


def distinct_beats(r, identity: str, count: int, timeout: float = 30.0) -> list[float]:
    """The `beat` times of `count` beats of `identity`, as this test saw them: a test that runs
    late may miss some in between, never see one out of order."""
    beats: list[float] = []

    def enough() -> bool:
        raw = r.hget(identity, "beat")
        if raw is not None and (not beats or float(raw) != beats[-1]):
            beats.append(float(raw))
        return len(beats) >= count
    wait_until(enough, timeout, 0.02, f"{count} beats of {identity}")
    return beats


# -- 8. heartbeats under CPU load ---------------------------------------------------------------------

def test_heartbeat_keeps_its_pace_while_jobs_burn_cpu(procs, r, client):
    interval = 0.5
    w = procs("-c", "2")
    ident = w.wait_registered(r)
    client.push_bulk(spin, [[3], [3]])  # two pure-Python loops fighting for the GIL for 3 s
    beats: list[float] = []
    gaps: list[float] = []  # between beats seen one after the other, none missed in between
    deadline = time.monotonic() + 60
    busy_seen = blind = False
    looked = time.monotonic()
    while len(ran(r, "spin")) < 2:
        assert time.monotonic() < deadline, "the spin jobs did not finish"
        # This test may run late too: after a pause between two looks of more than an interval,
        # a beat may have come and gone unseen, and the gap seen next is not one gap.
        now = time.monotonic()
        blind = blind or now - looked > interval
        looked = now
        raw = r.hget(ident, "beat")
        if raw is not None and (not beats or float(raw) != beats[-1]):
            if beats and not blind:
                gaps.append(float(raw) - beats[-1])
            beats.append(float(raw))
            blind = False
            busy_seen = busy_seen or r.hget(ident, "busy") == b"2"
        time.sleep(0.05)  # the sampling pace of the beats (a look late by over an interval is `blind`)
    print(f"\nheartbeat gaps under CPU load (interval {interval} s): max {max(gaps):.3f} s, "
          f"mean {sum(gaps) / len(gaps):.3f} s over {len(gaps)} gaps ({len(beats)} beats seen)")
    assert busy_seen, "no beat showed both spin jobs running"
    assert len(gaps) >= 2, beats
    assert max(gaps) < interval + 1.0, gaps  # by the worker's clock
    assert w.stop() == 0
