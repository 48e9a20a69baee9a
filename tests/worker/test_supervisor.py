"""The multi-process supervisor (`sidequest worker --processes N`) as a real process tree.

Uses the process helpers of scenarios/test_reliability: workers log to files, and every supervisor and
each of its children is gone after the test, whatever happened.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import PYTHON, STARTUP, free_port, python_env, wait_until
from helpers import beats, fetches_blocked, ran
from jobs_for_tests import blocker, capsule_span, echo, work
from scenarios.test_first_hour import http_port  # noqa: F401  (the fixture)
from scenarios.test_reliability import (
    alive,
    children,
    done_set,
    live_processes,
    no_reserved_left,
    wait_children,
    worker_factory,
)

from sidequest.worker.supervisor import capsule_share


@pytest.fixture
def procs(redis_url, tmp_path):
    """Start a supervisor with `procs("--processes", "N", ...)`; it and its children are gone after the test."""
    yield from worker_factory(redis_url, tmp_path)


def restart_delay(output: str, pid: int) -> tuple[str, float]:
    """The (slot, back-off) the supervisor logged when child `pid` died."""
    found = re.search(rf"worker process (\d+) \(pid {pid}\) exited with code -9 after [\d.]+ s; "
                      rf"restarting in ([\d.]+) s", output)
    assert found, output
    return found.group(1), float(found.group(2))


def test_supervisor_starts_n_children_and_restarts_a_killed_one_with_backoff(procs, r):
    sup = procs("--processes", "3", "-c", "2")
    first = wait_children(r, sup, 3)
    assert len(set(first.values())) == 3 and sup.pid not in first.values()
    assert not any(f":{sup.pid}:" in ident for ident in live_processes(r))  # it runs no jobs itself

    def replaced(gone: int):
        kids = children(sup.pid)
        return kids if len(kids) == 3 and gone not in kids else None

    victim = min(first.values())
    killed = time.monotonic()  # taken before the kill: the supervisor may notice it at once
    os.kill(victim, signal.SIGKILL)
    [second] = set(wait_until(lambda: replaced(victim), STARTUP, 0.01, "a replacement child")) - set(first.values())
    first_wait = time.monotonic() - killed

    # the replacement dies young too: the back-off for that slot doubles
    killed = time.monotonic()
    os.kill(second, signal.SIGKILL)
    [third] = set(wait_until(lambda: replaced(second), STARTUP, 0.01, "a second replacement")) - set(first.values())
    second_wait = time.monotonic() - killed
    now = wait_children(r, sup, 3)
    assert third in now.values() and victim not in now.values() and second not in now.values()

    out = sup.output()
    slot, delay = restart_delay(out, victim)
    assert delay == 0.25 and first_wait >= 0.25
    assert restart_delay(out, second) == (slot, 0.5) and second_wait >= 0.5
    assert sup.stop() == 0


def test_supervisor_forwards_tstp_and_stops_every_child_on_term(procs, r, client):
    sup = procs("--processes", "2", "-c", "2")
    kids = wait_children(r, sup, 2)
    sup.signal(signal.SIGTSTP)
    wait_until(lambda: all(r.hget(ident, "quiet") == b"true" for ident in kids), 15, 0.05,
               "both children quiet")
    assert sup.proc.poll() is None  # TSTP is forwarded, not obeyed by the supervisor
    wait_until(lambda: fetches_blocked(r) == 0, 30, 0.05, "the fetches begun before the quiet to end")
    client.push(echo, ["while quiet"])
    beats(r, kids, 2)  # a quiet worker must not take it: two beats of each child give it the chance to
    assert r.llen("queue:default") == 1 and not ran(r, "echo")

    sup.signal(signal.SIGTERM)
    assert sup.proc.wait(15) == 0, sup.output()
    assert not any(alive(pid) for pid in kids.values())
    assert live_processes(r) == {} and r.scard("processes") == 0  # each child deregistered
    out = sup.output()
    assert out.count("quiet: finishing running jobs") == 2 and out.count("SIGTERM received") == 3
    assert "all worker processes stopped" in out


def test_max_jobs_recycles_children_and_every_job_completes(procs, r, client):
    sup = procs("--processes", "2", "-c", "2", "--max-jobs", "5", "--heartbeat-interval", "0.25")
    first = wait_children(r, sup, 2)
    client.push_bulk(work, [[n, 0.15] for n in range(30)])
    wait_until(lambda: done_set(r) == set(range(30)), 3 * STARTUP, 0.1, "all 30 jobs")  # over several child lives
    wait_until(lambda: no_reserved_left(r), 30, 0.05, "no job left reserved")
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0

    per_pid = Counter(pid for _, pid in ran(r, "work-done"))
    print(f"\njobs per child process life: {sorted(per_pid.values(), reverse=True)}")
    assert len(per_pid) >= 3  # children were replaced along the way
    assert not all(alive(pid) for pid in first.values())
    assert len(ran(r, "work-start")) == 30  # a recycle puts nothing back to run twice
    # A life ends at its first beat after its 5th job: it counted at least 5 by then, and ran no
    # more than those and the jobs its two processors had in hand (how many a slow beat let in
    # varies with the machine; what a life ran after deciding does not).
    out = sup.output()
    decided = {int(pid): int(count) for pid, count in
               re.findall(r"pid=(\d+) .*recycling this worker process: processed (\d+) jobs \(max_jobs 5\)", out)}
    assert decided and set(decided) <= set(per_pid), out
    for pid, count in decided.items():
        assert count >= 5 and per_pid[pid] <= count + 2, (pid, count, per_pid[pid])
    wait_children(r, sup, 2)
    assert sup.stop() == 0


def test_max_memory_recycles_a_child_over_its_limit(redis_url, r):
    """Every Python child is over 1 MB, so each recycles itself at its first heartbeat."""
    from helpers import WorkerProcess

    supervisor = WorkerProcess(redis_url, "--processes", "2", "--max-memory", "1", "-t", "2")
    seen = set()
    try:
        def many_lives():
            seen.update(m.decode() for m in r.smembers("processes"))
            return len(seen) >= 4
        wait_until(many_lives, 2 * STARTUP, 0.05, "children to recycle and be replaced")  # two generations
    finally:
        out = supervisor.stop()
    assert supervisor.proc.returncode == 0, out
    assert "is over max_memory 1 MB" in out


needs_two_cpus = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                                    reason="pinning needs Linux and two CPUs")


@needs_two_cpus
def test_each_child_is_pinned_to_a_cpu_of_its_own(procs, r):
    sup = procs("--processes", "2")
    kids = wait_children(r, sup, 2)
    cpus = [os.sched_getaffinity(pid) for pid in kids.values()]
    assert all(len(c) == 1 for c in cpus) and cpus[0] != cpus[1], cpus
    assert len(os.sched_getaffinity(sup.pid)) > 1  # the supervisor itself is left free
    assert sup.stop() == 0


@needs_two_cpus
def test_with_no_flags_a_worker_runs_a_pinned_process_per_cpu(procs, r, client):
    """The default (`processes` "auto"): as many worker processes as CPUs this one may use, each
    on its own CPU, under a supervisor; `--processes 0` and SIDEQUEST_PROCESSES=0 keep one."""
    cpus = len(os.sched_getaffinity(0))
    sup = procs(env={"SIDEQUEST_PROCESSES": "auto"})
    kids = wait_children(r, sup, cpus)
    assert len({frozenset(os.sched_getaffinity(pid)) for pid in kids.values()}) == cpus
    client.push_bulk(work, [[n, 0.01] for n in range(40)])
    wait_until(lambda: done_set(r) == set(range(40)), STARTUP, 0.05, "every job to run")
    assert sup.stop() == 0
    single = procs("--processes", "0", env={"SIDEQUEST_PROCESSES": "auto"})
    single.wait_registered(r)
    assert children(single.pid) == [] and single.stop() == 0


@needs_two_cpus
def test_a_single_process_is_free_unless_asked(procs, r):
    free, pinned = procs(), procs("--pin-cpu")
    free.wait_registered(r)
    pinned.wait_registered(r)
    assert len(os.sched_getaffinity(free.pid)) > 1
    assert len(os.sched_getaffinity(pinned.pid)) == 1
    assert "pinned to CPU" in pinned.output()
    assert free.stop() == 0 and pinned.stop() == 0


@needs_two_cpus
def test_no_pin_cpu_leaves_children_free(procs, r):
    sup = procs("--processes", "2", "--no-pin-cpu")
    kids = wait_children(r, sup, 2)
    assert all(len(os.sched_getaffinity(pid)) > 1 for pid in kids.values())
    assert sup.stop() == 0


def test_a_killed_supervisor_takes_its_children_with_it(procs, r, client, tmp_path):
    """kill -9 of the supervisor: its children stop as on TERM (running jobs go back), so a new
    supervisor's fleet is the only one registered, not twice as many processes."""
    pidfile = str(tmp_path / "sup.pid")
    first = procs("--processes", "2", "-c", "2", "-t", "1", "-P", pidfile)
    kids = wait_children(r, first, 2)
    client.push(blocker, ["gate:never"])
    wait_until(lambda: ran(r, "blocker-start"), 10, 0.05, "a child to start the job")
    try:
        first.sigkill()
        wait_until(lambda: not any(alive(pid) for pid in kids.values()), 15, 0.05,
                   "every child of the killed supervisor to exit")
        assert r.llen("queue:default") == 1 and no_reserved_left(r)  # a graceful stop: the job went back
        second = procs("--processes", "2", "-c", "2", "-t", "1", "-P", pidfile)  # takes the stale pidfile over
        fleet = wait_children(r, second, 2)
        assert set(live_processes(r)) == set(fleet) and r.scard("processes") == 2
        assert Path(pidfile).read_text().strip() == str(second.pid)
        assert second.stop() == 0
    finally:  # without the fix they outlive the test: the fixture only knows the supervisor's tree
        for pid in kids.values():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


# -- issue 28 --------------------------------------------------------------------------------------

def run_worker_cli(*args: str, redis_url: str) -> tuple[subprocess.CompletedProcess[str], float, list[str]]:
    """`sidequest worker ARGS` to its end: (the result, seconds it took, its output's lines)."""
    began = time.monotonic()
    out = subprocess.run([PYTHON, "-m", "sidequest.cli", "worker", *args],
                         env=python_env(REDIS_URL=redis_url), capture_output=True, text=True, timeout=2 * STARTUP)
    return out, time.monotonic() - began, (out.stdout + out.stderr).strip().splitlines()


@pytest.mark.parametrize("server", ["not Redis", "nothing listening"])
def test_a_wrong_redis_url_stops_the_supervisor_before_any_child_in_one_line(server, request):
    """Issue 28 item 12: a REDIS_URL at an HTTP server's port (or a port where nothing listens)
    made the supervisor start its children, restart them five times and print 27 lines; the
    supervisor now checks the server once before it starts any, as the Launcher does."""
    if server == "not Redis":
        port = request.getfixturevalue("http_port")
        url, words, code = f"redis://127.0.0.1:{port}/0", "does not answer as a Redis server", 2
    else:
        url, words, code = f"redis://127.0.0.1:{free_port()}/0", "cannot reach Redis at", 1
    out, took, lines = run_worker_cli("--processes", "2", "-r", "jobs_for_tests", redis_url=url)
    assert out.returncode == code and len(lines) == 1, lines
    assert words in lines[0] and "Traceback" not in lines[0]
    assert took < 30, took  # no child was started, let alone restarted with back-off (loaded 2-core runs: 15 s)


def test_a_child_that_exits_with_a_configuration_error_is_not_restarted(redis_url):
    """Issue 28 item 12: a configuration error only a child can see (a -r module that does not
    exist) ended in five restarts with back-off; the child exits with the configuration-error
    code, and the supervisor stops at once with one line, exit 2."""
    out, took, lines = run_worker_cli("--processes", "2", "-r", "no_such_module_xyz", redis_url=redis_url)
    problems = [line for line in lines if " ERROR: " in line or " WARNING: " in line]
    assert out.returncode == 2, lines
    assert len(problems) == 1 and "No module named 'no_such_module_xyz'" in problems[0], lines
    assert not any("restarting in" in line for line in lines), lines
    assert took < 30, took  # five restarts with back-off took longer; a loaded 2-core run took 15.6 s without any


@pytest.mark.parametrize("runner", ["threads", "asyncio"])
def test_a_killed_childs_jobs_run_again_at_once_and_a_live_childs_never(procs, r, client, runner):
    """Issue 28 item 13: after kill -9 of a supervised child its jobs waited a whole heartbeat_ttl
    (60 s) though the supervisor saw it die. The supervisor now forgets the dead child's heartbeat
    and recovers that identity's reserved lists at once; the other child's running job stays its own."""
    sup = procs("--processes", "2", "-c", "1", "--async-jobs", "1", "--prefetch", "0", "--heartbeat-ttl", "60",
                "--runner", runner)
    wait_children(r, sup, 2)
    gate = "gate:item13"
    client.push(work, [1, 120, gate])
    wait_until(lambda: ran(r, "work-start"), STARTUP, 0.02, "job 1 to start")
    client.push(work, [2, 120, gate])  # the other child: the first one's only thread is busy
    [(_, victim), (_, other)] = wait_until(lambda: len(ran(r, "work-start")) == 2 and ran(r, "work-start"),
                                           STARTUP, 0.02, "job 2 to start")
    assert victim != other
    other_ident = next(i for i, p in live_processes(r).items() if p == other)
    killed = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    def job_1_back() -> float | None:  # in its queue again (or already taken by the replacement child)
        back = r.llen("queue:default") or [n for n, _ in ran(r, "work-start")].count(1) == 2
        return (time.monotonic() - killed) if back else None
    again = wait_until(job_1_back, 30, 0.02, "job 1 to go back to its queue")
    assert again < 10, f"job 1 went back {again:.1f} s after the kill; heartbeat_ttl is 60 s"
    wait_until(lambda: [n for n, _ in ran(r, "work-start")].count(1) == 2, STARTUP, 0.02, "job 1 to run again")
    assert not any(f":{victim}:" in ident for ident in live_processes(r))  # its heartbeat is gone
    r.set(gate, 1)
    wait_until(lambda: {n for n, _ in ran(r, "work-done")} == {1, 2}, STARTUP, 0.05, "both jobs to finish")
    starts = [n for n, _ in ran(r, "work-start")]
    assert starts.count(2) == 1, starts  # the live child's job was never recovered
    assert r.exists(other_ident) and alive(other)
    assert re.search(rf"put back 1 job\(s\) of dead worker process [^ ]+:{victim}:", sup.output())
    assert sup.stop() == 0


SERIAL_YAML = """\
:concurrency: 5
:queues: [default]
:capsules:
  :serial:
    :queues: [ledger]
    :concurrency: 1
  :pair:
    :queues: [pairs]
    :concurrency: 2
"""


@pytest.mark.parametrize("concurrency, count", [(c, n) for c in range(1, 8) for n in range(1, 5)])
def test_capsule_shares_add_up_to_the_configured_concurrency(concurrency, count):
    """Issue 28 item 16: the children's shares of a capsule add up to its concurrency, none
    gets more than one over another, and a serial capsule has exactly one child."""
    for index in range(3):
        shares = [capsule_share(concurrency, slot, count, index) for slot in range(count)]
        assert sum(shares) == concurrency and max(shares) - min(shares) <= 1, shares
    assert [capsule_share(1, slot, 3, 1) for slot in range(3)] == [0, 1, 0]  # serial capsules spread out


def peak(intervals: list[tuple[float, float]]) -> int:
    """Most intervals open at one instant (an end at the same instant as a start closes first)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    level = top = 0
    for _, step in events:
        level += step
        top = max(top, level)
    return top


def test_a_serial_capsule_stays_serial_across_worker_processes(procs, r, client, tmp_path):
    """Issue 28 item 16: under the default of a process per CPU, a capsule of concurrency 1 ran two
    jobs at once (one per process). The supervisor now shares each capsule's concurrency out over
    its children: the sum is what was configured, so a serial capsule runs in one child only."""
    config_file = tmp_path / "sidekiq.yml"
    config_file.write_text(SERIAL_YAML)
    sup = procs("--processes", "2", "-C", str(config_file))
    kids = wait_children(r, sup, 2)
    capsule_span.set(queue="ledger", client=client).perform_bulk([[n, "ledger", 0.05] for n in range(40)])
    capsule_span.set(queue="pairs", client=client).perform_bulk([[n, "pairs", 0.3] for n in range(100, 110)])
    wait_until(lambda: len(ran(r, "span")) == 50, 2 * STARTUP, 0.05, "all 50 jobs")
    spans = ran(r, "span")
    ledger = [(start, end) for _, queue, _, start, end in spans if queue == "ledger"]
    pairs = [(start, end) for _, queue, _, start, end in spans if queue == "pairs"]
    assert peak(ledger) == 1, f"the serial capsule ran {peak(ledger)} jobs at once over the processes"
    assert peak(pairs) <= 2
    assert len({pid for _, queue, pid, _, _ in spans if queue == "ledger"}) == 1  # one child runs it
    threads = {ident: json.loads(r.hget(ident, "info"))["capsules"] for ident in kids}
    assert sorted(c.get("serial", {}).get("concurrency", 0) for c in threads.values()) == [0, 1], threads
    assert [c["pair"]["concurrency"] for c in threads.values()] == [1, 1], threads
    assert all(c["default"]["concurrency"] == 5 for c in threads.values())  # -c stays per process
    out = sup.output()
    assert "capsule serial: concurrency 1 over 2 worker processes: 1+0" in out, out
    assert sup.stop() == 0


def test_children_killed_young_again_and_again_are_replaced_and_jobs_keep_running(procs, r, client):
    """A supervisor once seemed to stop starting children in a chaos run. Here every child is sent
    SIGKILL soon after it starts, 10 times, at every stage of its start (before its imports, while
    it connects, after it registered and took jobs): each is replaced after its slot's back-off,
    never more than the configured count run at once, and afterwards both slots run children that
    take the jobs pushed meanwhile, none lost."""
    sup = procs("--processes", "2", "-c", "2")
    client.push_bulk(work, [[n, 0.05] for n in range(20)])
    seen: set[int] = set()
    ages = [0.0, 0.05, 0.2, 0.5, 1.0, 2.0]  # seconds after it appeared: every stage of a start

    def kids() -> list[int]:
        assert sup.proc.poll() is None, f"the supervisor exited:\n{sup.output()}"
        found = children(sup.pid)
        assert len(found) <= 2, found  # a slot never runs two children
        return found

    def a_new_child() -> int | None:
        return next((pid for pid in kids() if pid not in seen), None)

    for kill in range(10):
        # a slot's back-off doubles with each young death: 0.25 s, 0.5 s... 4 s for its 5th
        pid = wait_until(a_new_child, 2 * STARTUP, 0.005, f"a new child to kill ({kill + 1} of 10)")
        seen.add(pid)
        born, age = time.monotonic(), ages[kill % len(ages)]
        # let it reach that stage, checking the supervisor all along
        wait_until(lambda b=born, a=age: kids() is not None and time.monotonic() - b >= a, age + 5, 0.005, "its age")
        os.kill(pid, signal.SIGKILL)
        client.push(work, [100 + kill, 0.05])

    after = wait_children(r, sup, 2, timeout=2 * STARTUP)  # both slots are back, past their back-offs
    assert not set(after.values()) & seen
    wait_until(lambda: done_set(r) >= {*range(20), *range(100, 110)}, 2 * STARTUP, 0.05, "every job to run")
    wait_until(lambda: no_reserved_left(r), 30, 0.05, "no job left reserved")
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0
    assert sup.output().count("exited with code -9") == 10
    assert sup.stop() == 0
