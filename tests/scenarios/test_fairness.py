"""Fairness groups and priorities ("lanes", issue 31 items 1 and 2) with real worker processes.

A fleet of `sidequest worker` subprocesses (test_reliability's `Worker` and `procs`, the same
short knobs: heartbeat 0.5 s, TTL 2 s, recovery and poller passes every 0.5 s and 0.2 s) on one
queue. Jobs are jobs_for_tests' `Work(n)` (records ("work-start", n, pid) and ("work-done", n, pid),
in the order they happen, in the `test:ran` list) and `Timed(n, s)` (the same with the time);
a job's number says its tenant. Every wait is on those records, with a deadline.

A laned job (pushed with `group=` or `priority=`) waits in `sidequest:lanes:<q>...` and is staged
into `queue:<q>` a few at a time (the contract: /docs/flow-control.md, "Fair queues: groups"):
what the workers take is an ordinary job, so nothing here is a worker option.
"""

from __future__ import annotations

import json
import signal
import time
from collections import defaultdict

import pytest
from conftest import STARTUP, wait_until
from helpers import WorkerProcess, beats, doc_examples, ran
from jobs_for_tests import echo, stamp, timed, work

from scenarios.test_reliability import done_set, no_reserved_left, reserved_keys, runs, worker_factory
from sidequest.api import pause_group, resume_group
from sidequest.store.keys import DEFAULT

A = range(0, 10_000)  # tenant A's jobs, pushed first
B = range(10_000, 10_100)  # then tenant B's
C = range(20_000, 20_100)  # and tenant C's
EVERY = set(A) | set(B) | set(C)
SIDEKIQ_LAYOUT = ["retry", "queue", "args", "class", "jid", "created_at", "enqueued_at"]


@pytest.fixture
def procs(redis_url, tmp_path):
    """test_reliability's: start workers with `procs(*args)`, all gone after the test."""
    yield from worker_factory(redis_url, tmp_path)


def tenant(n: int) -> str:
    return "A" if n < 10_000 else "B" if n < 20_000 else "C"


def lanes(queue: str = "default") -> str:
    """The base key of the queue's lanes (`B` in the contract)."""
    return DEFAULT.lanes(queue)


def lanes_idle(r, queue: str = "default") -> bool:
    """No laned job waiting, staged or running: every lane, rotation and running set is empty."""
    base = lanes(queue)
    running = [key for key in r.scan_iter(f"{base}:running:*") if r.scard(key)]
    return not r.exists(base) and not r.scard(f"{base}:busy") and not running


def fleet(procs, r, count: int = 2, concurrency: int = 10) -> list:
    """`count` worker processes of `concurrency` threads on queue `default`, each registered."""
    workers = [procs("-c", str(concurrency)) for _ in range(count)]
    for worker in workers:
        worker.wait_registered(r)
    return workers


def push_tenants(client, r, seconds: float = 0.0) -> int:
    """Tenant A's 10,000 jobs in one push, then B's and C's 100 each; returns how many jobs had
    finished when B's and C's pushes returned (A's, run while the client built them: on a busy
    machine the client's own pace, not the queue's order, so `assert_fair` counts from there)."""
    for tenant_jobs, group in ((A, "A"), (B, "B"), (C, "C")):
        client.push_bulk(work, [[n, seconds] for n in tenant_jobs], group=group)
    return len(ran(r, "work-done"))


def done_order(r) -> list[int]:
    """The jobs' numbers in the order they finished (a job run twice: each time)."""
    return [n for n, _ in ran(r, "work-done")]


def assert_fair(order: list[int], pushed: int) -> str:
    """B's and C's last jobs finished before A's 1,000th since their push (`pushed`: the jobs done
    by then); returns where, for the test's output."""
    a_done = [i for i, n in enumerate(order) if tenant(n) == "A" and i >= pushed]
    last = {t: max(i for i, n in enumerate(order) if tenant(n) == t) for t in "BC"}
    thousandth = a_done[999]
    a_before = {t: sum(1 for i in a_done if i < last[t]) for t in "BC"}
    assert last["B"] < thousandth and last["C"] < thousandth, (a_before, thousandth)
    return (f"{pushed} of A's had finished when B and C were pushed; B's last job finished after {a_before['B']} "
            f"more of A's, C's after {a_before['C']}")


def all_settled(r) -> None:
    wait_until(lambda: no_reserved_left(r), 30, 0.05, "no job left reserved")
    wait_until(lambda: lanes_idle(r), 30, 0.05, "every lane and running set of the groups to empty")
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0


# -- 1. fairness ------------------------------------------------------------------------------------

def test_a_tenant_with_10000_waiting_jobs_does_not_delay_two_with_100(procs, r, client, capsys):
    workers = fleet(procs, r)
    began = time.monotonic()
    pushed = push_tenants(client, r)
    wait_until(lambda: r.llen("test:ran") >= 2 * len(EVERY), 120, 0.1, "all 10,200 jobs to run")
    took = time.monotonic() - began
    seen = runs(r)
    assert set(seen) == EVERY
    assert all(v["start"] == v["done"] and len(v["start"]) == 1 for v in seen.values())  # each once
    where = assert_fair(done_order(r), pushed)
    assert {pid for v in seen.values() for pid in v["done"]} == {w.pid for w in workers}  # the fleet's work
    all_settled(r)
    with capsys.disabled():
        print(f"\nfairness, 2 processes x 10: 10,000 jobs of A then 100 of B and C, all run once in "
              f"{took:.1f} s; {where}")


def test_a_sigkill_mid_way_loses_nothing_and_reruns_only_the_jobs_it_caught(procs, r, client, capsys):
    """The same fleet, one process killed with SIGKILL half-way through; the decision of which
    reruns are allowed is test_reliability's: the jobs the victim held in its reserved lists and
    had started (running, or ended a few ms before with the acknowledgement in flight)."""
    workers = fleet(procs, r)
    began = time.monotonic()
    pushed = push_tenants(client, r, 0.002)  # a job lasts long enough for a kill to catch some in flight
    wait_until(lambda: r.llen("test:ran") >= len(EVERY), 120, 0.02, "half of the jobs to run")
    victim, survivor = workers
    victim.sigkill_settled(r)  # what it sent before it died has run: its records and lists are final
    held = [json.loads(x)["args"][0] for key in reserved_keys(r) if f":{victim.pid}:" in key
            for x in r.lrange(key, 0, -1)]
    seen = runs(r)
    started = {n for n in held if victim.pid in seen[n]["start"]}
    finished = {n for n in started if victim.pid in seen[n]["done"]}
    assert len(started - finished) <= 10  # one running job per processor at most
    assert started - finished, "the kill caught no job in flight: the test proved nothing"

    wait_until(lambda: done_set(r) == EVERY, 2 * STARTUP, 0.25, "every job to complete")
    all_settled(r)
    took = time.monotonic() - began
    seen = runs(r)
    assert set(seen) == EVERY and all(v["done"] for v in seen.values())  # lost: none
    again = {n for n, v in seen.items() if len(v["start"]) > 1}
    assert again <= started, again - started  # only jobs the kill caught ran again
    assert all(len(v["start"]) <= 2 for v in seen.values())
    assert started - finished <= again  # and each interrupted one did run again
    where = assert_fair(done_order(r), pushed)
    assert survivor.stop() == 0
    assert "recovered a job of dead process" in survivor.output()
    with capsys.disabled():
        print(f"\nfairness with a kill -9: {len(started - finished)} running and {len(finished)} just ended "
              f"at the kill, {len(again)} ran again; all 10,200 done in {took:.1f} s; {where}")


# -- 2. per-group concurrency and rate ---------------------------------------------------------------

def timed_intervals(r) -> dict[int, list[tuple[float, float, int]]]:
    """n -> [(start, end, pid)] of the Timed jobs, from their records."""
    starts = {n: (at, pid) for n, pid, at in ran(r, "timed-start")}
    out: dict[int, list[tuple[float, float, int]]] = defaultdict(list)
    for n, pid, at in ran(r, "timed-done"):
        out[n].append((starts[n][0], at, pid))
    return out


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one moment (an end and a start at the same instant: not both)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = now = 0
    for _, change in events:
        now += change
        most = max(most, now)
    return most


def test_group_concurrency_2_is_never_exceeded_across_two_processes(procs, r, client, capsys):
    groups, per_group = 5, 12
    workers = fleet(procs, r)
    jobs = [[g * 100 + k, 0.05] for g in range(groups) for k in range(per_group)]
    client.push_bulk(timed, jobs, group=lambda n, seconds: f"g{n // 100}", group_concurrency=2)
    wait_until(lambda: len(ran(r, "timed-done")) == len(jobs), STARTUP, 0.05, "every grouped job to run")
    found = timed_intervals(r)
    assert sorted(found) == sorted(n for n, _ in jobs) and all(len(v) == 1 for v in found.values())
    by_group: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for n, [(start, end, _)] in found.items():
        by_group[n // 100].append((start, end))
    peaks = {g: most_at_once(spans) for g, spans in by_group.items()}
    overall = most_at_once([span for spans in by_group.values() for span in spans])
    assert all(peak <= 2 for peak in peaks.values()), peaks
    assert overall >= 5, overall  # three groups or more ran side by side: a group waits alone
    assert {pid for v in found.values() for _, _, pid in v} == {w.pid for w in workers}
    all_settled(r)
    with capsys.disabled():
        print(f"\ngroup_concurrency=2, {groups} groups over 2 processes x 10: at most {max(peaks.values())} of a "
              f"group at once, {overall} jobs at once overall")


def test_group_rate_lets_at_most_n_per_period_through(procs, r, client, capsys):
    count, period, total, slack = 3, 1.0, 12, 0.25
    fleet(procs, r)
    client.push_bulk(timed, [[n, 0] for n in range(total)], group="R", group_rate=(count, period))
    client.push_bulk(timed, [[100 + n, 0] for n in range(total)], group="S")  # no rate: not held back
    wait_until(lambda: len(ran(r, "timed-done")) == 2 * total, STARTUP, 0.05, "every job to run")
    starts = sorted(at for n, _, at in ran(r, "timed-start") if n < 100)
    others = sorted(at for n, _, at in ran(r, "timed-start") if n >= 100)
    assert len(starts) == total
    # A window lets `count` through, and windows follow each other: 2 * count apart, jobs are at
    # least a period apart, whatever the windows' edges (up to `slack` of the time a staged job
    # takes to start, which varies)
    gaps = [later - first for first, later in zip(starts, starts[2 * count:], strict=False)]
    assert min(gaps) >= period - slack, gaps
    assert starts[-1] - starts[0] >= (total // count - 1) * period - slack, starts
    assert others[-1] < starts[count], "group S waited for R's rate"
    all_settled(r)
    with capsys.disabled():
        print(f"\ngroup_rate=({count}, {period:g}): {total} jobs started over {starts[-1] - starts[0]:.2f} s, "
              f"2*{count} apart at least {min(gaps):.2f} s")


def test_a_paused_group_waits_while_others_run_and_resumes(procs, r, client):
    pause_group("default", "P", client=client)
    [worker] = fleet(procs, r, count=1)
    client.push_bulk(work, [[n] for n in range(10)], group="P")
    client.push_bulk(work, [[100 + n] for n in range(10)], group="Q")
    wait_until(lambda: done_set(r) >= set(range(100, 110)), STARTUP, 0.05, "group Q to run")
    beats(r, worker.wait_registered(r), 2)  # a second of poller passes more: P still waits
    assert not done_set(r) & set(range(10)) and not [n for n, _ in ran(r, "work-start") if n < 10]
    assert int(r.hget(f"{lanes()}:waiting", "P")) == 10 and r.llen("queue:default") == 0

    resume_group("default", "P", client=client)  # staged at once: staging had set it aside while paused
    wait_until(lambda: done_set(r) >= set(range(10)), STARTUP, 0.05, "group P to run once resumed")
    assert sorted(n for n, _ in ran(r, "work-start")) == sorted([*range(10), *range(100, 110)])
    all_settled(r)


# -- 3. priorities ------------------------------------------------------------------------------------

def test_a_priority_9_job_starts_within_a_second_behind_5000_priority_5_jobs(procs, r, client, capsys):
    fleet(procs, r, count=1)
    client.push_bulk(work, [[n, 0.005] for n in range(5000)], priority=5)
    wait_until(lambda: r.llen("test:ran") >= 200, STARTUP, 0.02, "the backlog to be under way")
    pushed = time.time()
    client.push(stamp, ["urgent"], priority=9)
    [(label, started)] = wait_until(lambda: ran(r, "stamp"), STARTUP, 0.01, "the priority-9 job to start")
    records = [json.loads(x) for x in r.lrange("test:ran", 0, -1)]
    ahead = next(i for i, item in enumerate(records) if item[0] == "stamp")
    waited = 5000 - sum(1 for item in records[:ahead] if item[0] == "work-start")
    assert label == "urgent" and started - pushed < 1.0, started - pushed
    assert waited >= 1000, waited  # it started while the backlog was still there
    with capsys.disabled():
        print(f"\npriority 9 behind 5,000 of priority 5: started {1000 * (started - pushed):.0f} ms after its push, "
              f"{waited} of them still waiting")


def test_each_priority_level_runs_in_push_order_around_the_plain_jobs(procs, r, client):
    """Behind 40 plain jobs, several priority-9 and priority-3 jobs pushed alternately, more than
    the staging depth of the queue (32): each level's jobs start in the order they were pushed;
    the 9s go ahead of the plain jobs waiting, the 3s after them."""
    plain, high, low = range(0, 40), range(100, 110), range(300, 340)
    client.push_bulk(work, [[n] for n in plain])
    for k in range(len(low)):
        if k < len(high):
            client.push(work, [high[k]], priority=9)
        client.push(work, [low[k]], priority=3)
    procs("-c", "1").wait_registered(r)  # one processor: start order is take order
    wait_until(lambda: done_set(r) == {*plain, *high, *low}, STARTUP, 0.05, "every job to run")
    order = [n for n, _ in ran(r, "work-start")]
    assert [n for n in order if n in high] == list(high)
    assert [n for n in order if n in low] == list(low)
    assert [n for n in order if n in plain] == list(plain)
    assert order[0] == high[0]
    assert max(map(order.index, high)) < order.index(plain[-1]) < min(map(order.index, low))
    all_settled(r)


def test_a_staged_laned_job_is_an_ordinary_sidekiq_job(client, r):
    """No worker needed: a laned push stages up to the depth (32) into `queue:<q>`; what is there
    is Sidekiq's layout with the lane's fields, which a Ruby worker ignores; the rest waits."""
    from sidequest.store.lanes import LANE_DEPTH

    jids = client.push_bulk(echo, [[n] for n in range(40)], group="tenant-7")
    urgent = client.push(echo, ["now"], priority=9)
    staged = [json.loads(x) for x in r.lrange("queue:default", 0, -1)]
    assert len(staged) == LANE_DEPTH + 1 == 33  # the depth at the tail, and the 9 at the head
    assert staged[-1]["jid"] == urgent and staged[-1]["priority"] == 9 and "group" not in staged[-1]
    for payload in staged[:-1]:  # Sidekiq's fields, in Sidekiq's order, and the lane's
        assert [k for k in payload if k != "group"] == SIDEKIQ_LAYOUT
        assert payload["group"] == "tenant-7" and "priority" not in payload
    assert [p["jid"] for p in reversed(staged[:-1])] == jids[:LANE_DEPTH]  # oldest at the tail (taken first)
    assert int(r.hget(f"{lanes()}:waiting", "tenant-7")) == 40 - LANE_DEPTH
    assert r.sismember("queues", "default")


def test_a_ruby_sidekiq_worker_runs_staged_laned_jobs(ruby, client, r, redis_url):
    """docs/sidekiq-compatibility.md: a Ruby worker on the queue runs what is staged (it ignores
    the lane fields); what waits in the lanes reaches it only through a sidequest process's staging."""
    from ruby_peer import RubySidekiq

    jids = client.push_bulk("Echo", [[n] for n in range(3)], group="g")
    jids.append(client.push("Echo", ["first"], priority=9))
    peer = RubySidekiq(redis_url)
    try:
        wait_until(lambda: r.llen("test:ruby-ran") == 4, 60, 0.1, "Ruby Sidekiq to run the staged jobs")
    finally:
        log = peer.stop()
    ran_jids = [json.loads(x)["jid"] for x in r.lrange("test:ruby-ran", 0, -1)]
    assert sorted(ran_jids) == sorted(jids), log
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0
    # what the docs warn of: Ruby does not count a group's jobs out (its running set keeps them)
    assert r.scard(f"{lanes()}:running:g") == 3


def test_a_stopped_worker_puts_its_laned_jobs_back_and_the_next_one_runs_them(procs, r, client):
    """Shutdown's put-back is unchanged: the jobs still running at the shutdown deadline go back
    to the head of the queue, still counted in their group (group_concurrency=2 keeps the
    others in their lane meanwhile), and run on the next worker; then the group is idle."""
    a = procs("-c", "2", "-t", "1")
    a.wait_registered(r)
    client.push_bulk(work, [[n, 60, "gate:held"] for n in range(2)], group="H", group_concurrency=2)
    client.push_bulk(work, [[n] for n in range(2, 12)], group="H", group_concurrency=2)
    wait_until(lambda: len(ran(r, "work-start")) == 2, STARTUP, 0.05, "the two held jobs to start")
    a.signal(signal.SIGTERM)
    assert a.proc.wait(STARTUP) == 0, a.output()
    assert r.scard(f"{lanes()}:running:H") == 2 and r.llen("queue:default") == 2  # put back, still counted
    r.set("gate:held", 1)
    b = procs("-c", "2")
    b.wait_registered(r)
    wait_until(lambda: done_set(r) == set(range(12)), STARTUP, 0.05, "every job to run")
    assert [len(v["start"]) for n, v in sorted(runs(r).items())] == [2, 2] + [1] * 10
    all_settled(r)


# -- the docs -----------------------------------------------------------------------------------------
DOC_FILES = {"tenants.py", "fair_demo.py", "priorities_demo.py", "weights_demo.py"}


def test_the_groups_and_priorities_docs_examples_run(tmp_path, redis_url, r):
    run = doc_examples("flow-control.md", DOC_FILES, tmp_path, redis_url)

    worker = WorkerProcess(redis_url, "-r", "tenants", "-q", "tenants", cwd=str(tmp_path))
    try:
        worker.wait_registered(r)
        assert run("fair_demo.py") == ["exported invoices of account 2", "True"]
        assert run("priorities_demo.py") == ["told user 7: your password was reset", "True"]
        assert run("weights_demo.py") == ["[('free', 5), ('gold', 17), ('pro', 10)]", "[(4, ('weight',))]", "[1]"]
    finally:
        output = worker.stop()
    assert "Traceback" not in output, output
