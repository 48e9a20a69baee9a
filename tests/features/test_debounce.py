"""Debounce and throttle: a burst of pushes runs once, through a real worker."""

import asyncio
import json
import re
import subprocess
import threading
import time
from datetime import timedelta

import pytest
from conftest import PYTHON, ROOT, STARTUP, python_env, wait_until
from helpers import WorkerProcess

import sidequest
from sidequest import JobArgumentError, JobDefinitionError, Task
from sidequest.aio import AsyncClient
from sidequest.api import flow_counts
from sidequest.client import Client
from sidequest.jobs.payload import encode


def _record(kind, account, note):
    from jobs_for_tests import _r

    _r().rpush("test:flow", json.dumps([kind, account, note, time.time()]))


@sidequest.job(name="Debounced", debounce=1)
def debounced(account, note):
    _record("debounced", account, note)


@sidequest.job(name="DebouncedPerAccount", debounce=timedelta(seconds=1), key=lambda account, note: account)
def per_account(account, note):
    _record("per-account", account, note)


@sidequest.job(name="Throttled", throttle=1, key=lambda account, note: account)
def throttled(account, note):
    _record("throttled", account, note)


@sidequest.job(name="PlainFlow")
def plain(account, note):
    _record("plain", account, note)


def runs(r, kind):
    return [tuple(x[1:]) for x in map(json.loads, r.lrange("test:flow", 0, -1)) if x[0] == kind]


def nothing_pending(r):
    """No run left to come: nothing scheduled, nothing waiting in the queue."""
    return r.zcard("schedule") == 0 and r.llen("queue:default") == 0


def burst(push, count=50, span=2.0):
    """`count` pushes spread over about `span` seconds; the time of the last one."""
    for n in range(count):
        push(n)
        time.sleep(span / count)  # a producer's pace: the burst spans what debounce must absorb
    return time.time()


def test_fifty_debounced_calls_within_two_seconds_run_once_with_the_last_arguments(client, r, start):
    start()
    jids = []
    last = burst(lambda n: jids.append(per_account.set(client=client).perform_async(7, f"call {n}")))
    assert all(jids) and len(set(jids)) == 50  # each push returns its jid; only the newest runs
    wait_until(lambda: runs(r, "per-account"), timeout=10, message="the debounced job ran")
    assert nothing_pending(r)  # the replaced runs are gone: no second run can come
    [(account, note, at)] = runs(r, "per-account")
    assert (account, note) == (7, "call 49")
    assert 0.9 <= at - last <= 3.0, at - last  # debounce=1 after the last call (poll_interval 0.2)
    assert flow_counts(client)["DebouncedPerAccount"] == {"replaced": 49, "dropped": 0}


def test_debounce_keys_are_independent_and_the_arguments_by_default(client, r, start):
    start()
    for n in range(10):
        per_account.set(client=client).perform_async(1, f"one {n}")
        per_account.set(client=client).perform_async(2, f"two {n}")
        debounced.set(client=client).perform_async(3, "same")  # no key: the class and arguments are the key
        debounced.set(client=client).perform_async(4, "same")
    wait_until(lambda: len(runs(r, "per-account")) >= 2 and len(runs(r, "debounced")) >= 2, timeout=10,
               message="every key ran")
    wait_until(lambda: nothing_pending(r), timeout=10, message="nothing pending")
    assert sorted((a, n) for a, n, _ in runs(r, "per-account")) == [(1, "one 9"), (2, "two 9")]
    assert sorted((a, n) for a, n, _ in runs(r, "debounced")) == [(3, "same"), (4, "same")]
    assert flow_counts(client)["DebouncedPerAccount"]["replaced"] == 18
    assert flow_counts(client)["Debounced"]["replaced"] == 18


def test_throttle_runs_once_per_period_with_the_first_arguments(client, r, start):
    start()
    calls = {5: [], 6: []}  # per key: (time before the push, time after, jid or None)
    for n in range(30):  # about 1.5 s of calls: periods of 1 s
        for account in (5, 6):  # another key: its own periods
            before = time.time()
            jid = throttled.set(client=client).perform_async(account, f"call {n}")
            calls[account].append((before, time.time(), jid))
        time.sleep(0.05)  # a producer's pace: calls spread over periods (each timed by Redis above)
    for made in calls.values():
        assert made[0][2] is not None  # the first call of a key is let through
        last = made[0]
        for before, after, jid in made[1:]:  # the period is measured by Redis, between before and after
            if jid is None:
                assert before < last[1] + 1.0
            else:
                assert after >= last[0] + 1.0
                last = (before, after, jid)
    written = {account: [n for n, (_, _, jid) in enumerate(made) if jid] for account, made in calls.items()}
    total = sum(map(len, written.values()))
    wait_until(lambda: len(runs(r, "throttled")) == total, timeout=10, message="each period's run")
    wait_until(lambda: nothing_pending(r), timeout=10, message="nothing pending")
    for account, kept in written.items():  # the first call of each period, with its arguments
        assert [n for a, n, _ in runs(r, "throttled") if a == account] == [f"call {n}" for n in kept]
    assert flow_counts(client)["Throttled"] == {"replaced": 0, "dropped": 60 - total}


def test_a_run_waiting_out_ten_minutes_without_a_poller_is_replaced_not_doubled(client, r, start):
    """Issue 38, defect 5: with no poller for 10 minutes (a deploy, a fleet scaled to zero) the
    record of a run still waiting in `schedule` expired, and the next push added a second run."""
    per_account.set(client=client).perform_async(5, "before the deploy")
    # Ten minutes pass with no worker: every key whose TTL ends by then expires, as Redis would.
    ending = [key for key in r.scan_iter("*") if 0 < r.pttl(key) <= 11 * 60 * 1000]
    for key in ending:
        r.pexpire(key, 1)
    wait_until(lambda: not any(r.exists(key) for key in ending), message="those keys to expire")
    per_account.set(client=client).perform_async(5, "after the deploy")
    assert r.zcard("schedule") == 1  # the waiting run was replaced, not joined by a second
    start()  # the fleet is back
    wait_until(lambda: (5, "after the deploy") in [(a, n) for a, n, _ in runs(r, "per-account")],
               timeout=10, message="the newest push's run")
    assert [(a, n) for a, n, _ in runs(r, "per-account")] == [(5, "after the deploy")]
    assert nothing_pending(r) and not list(r.scan_iter("sidequest:debounce:*"))  # ended with its run


def test_twenty_threads_debouncing_one_key_leave_exactly_one_pending_run(client, r):
    barrier = threading.Barrier(20)

    def push(n):
        barrier.wait()
        per_account.set(client=client).perform_async(7, f"thread {n}")

    threads = [threading.Thread(target=push, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    [member] = r.zrange("schedule", 0, -1)
    record = r.get(next(iter(r.scan_iter("sidequest:debounce:*"))))
    assert record == member  # the record names the one pending run
    assert flow_counts(client)["DebouncedPerAccount"]["replaced"] == 19


def test_a_replaced_push_leaves_no_status_record(client, r):
    """With result_ttl, the replaced push's record goes with it (its jid never runs); the newest is scheduled."""
    first = per_account.set(client=client, result_ttl=60).perform_async(1, "a")
    assert r.hget(f"sidequest:status:{first}", "state") == b"scheduled"
    second = per_account.set(client=client, result_ttl=60).perform_async(1, "b")
    assert not r.exists(f"sidequest:status:{first}")
    assert r.hget(f"sidequest:status:{second}", "state") == b"scheduled"
    assert sidequest.status(first, client=client) == "unknown"


def test_the_dashboard_shows_the_counts(client):
    from starlette.testclient import TestClient

    from sidequest.web import create_app

    for n in range(3):
        throttled.set(client=client).perform_async(8, f"call {n}")
    page = TestClient(create_app(client)).get("/job-metrics").text
    assert "Debounced and throttled pushes" in page
    assert re.search(r"Throttled</td><td[^>]*>0</td><td[^>]*>2</td>", page), page


def test_prometheus_counts_the_replaced_and_dropped_pushes(client):
    from prometheus_client.parser import text_string_to_metric_families
    from starlette.testclient import TestClient

    from sidequest.web import create_app

    for n in range(3):
        throttled.set(client=client).perform_async(8, f"call {n}")
    text = TestClient(create_app(client)).get("/metrics").text
    scraped = {f.name: f.samples for f in text_string_to_metric_families(text)}
    [sample] = [s for s in scraped["sidequest_job_throttled"] if s.labels["job"] == throttled.name]
    assert sample.name == "sidequest_job_throttled_total" and sample.value == 2
    [replaced] = [s for s in scraped["sidequest_job_debounced"] if s.labels["job"] == throttled.name]
    assert replaced.value == 0


def test_the_asyncio_client_debounces_alike(config, r, start):
    start()

    async def main():
        async with AsyncClient(config) as aclient:
            for n in range(20):
                await aclient.push(per_account, [3, f"async {n}"])
            return await aclient.push(throttled, [9, "a"]), await aclient.push(throttled, [9, "b"])

    first, second = asyncio.run(main())
    assert first is not None and second is None
    wait_until(lambda: runs(r, "per-account") and runs(r, "throttled"), timeout=10, message="both ran")
    wait_until(lambda: nothing_pending(r), timeout=10, message="nothing pending")
    assert [(a, n) for a, n, _ in runs(r, "per-account")] == [(3, "async 19")]
    assert [(a, n) for a, n, _ in runs(r, "throttled")] == [(9, "a")]


def test_options_are_checked_and_refused_where_they_cannot_apply(client):
    with pytest.raises(JobArgumentError, match="debounce"):
        client.push(plain, [1, "x"], debounce=-1)
    with pytest.raises(JobArgumentError, match="key"):
        client.push(plain, [1, "x"], debounce=1, key="account")
    with pytest.raises(JobArgumentError, match="not both"):
        client.push(plain, [1, "x"], debounce=1, throttle=1)
    with pytest.raises(JobArgumentError, match="unique_for"):
        client.push(plain, [1, "x"], debounce=1, unique_for=10)
    assert client.push(throttled, [1, "x"], unique_for=None) and not client.push(throttled, [1, "y"], unique_for=None)
    with pytest.raises(JobArgumentError, match="bulk"):
        client.push_bulk(debounced, [[1, "x"], [2, "y"]])
    with pytest.raises(JobArgumentError, match="in_"):
        client.push(debounced, [1, "x"], in_=5)
    with pytest.raises(JobArgumentError, match="key"):
        client.push(plain, [1, "x"], key=lambda a, n: a)  # key without debounce or throttle
    with pytest.raises(JobArgumentError, match="not JSON"):
        client.push(plain, [1, "x"], throttle=1, key=lambda a, n: {a})
    @sidequest.job(name="RailsDebounced", active_job=True, debounce=1)
    def rails(a): ...
    with pytest.raises(JobArgumentError, match="active_job"):
        client.push(rails, [1])
    for_one_push = plain.set(client=client, throttle=60, key=lambda a, n: a)
    assert for_one_push.perform_async(1, "x") and for_one_push.perform_async(1, "y") is None


def test_a_definition_a_task_and_a_workflow_refuse_them_in_one_line(client):
    with pytest.raises(JobDefinitionError, match="option 'key'"):
        @sidequest.job(name="KeyAlone", key=lambda a: a)
        def key_alone(a): ...
    with pytest.raises(JobDefinitionError, match="'throttle' must be a duration"):
        @sidequest.job(name="BadThrottle", throttle="5s")
        def bad(a): ...
    task = Task.create("flows", client=client)
    with pytest.raises(JobArgumentError, match="throttle, group and priority are not available for the jobs of a task"):
        task.add(throttled, 1, "x")
    with pytest.raises(JobArgumentError, match="not available for a workflow's steps"):
        sidequest.chain(plain.si(1, "x"), throttled.si(1, "y")).apply_async(client=client)


def test_a_job_without_them_keeps_sidekiqs_payload_layout(client, r):
    jid = client.push(plain, [1, "x"])
    [blob] = r.lrange("queue:default", 0, -1)
    payload = json.loads(blob)
    assert list(payload) == ["retry", "queue", "args", "class", "jid", "created_at", "enqueued_at"]
    assert blob.decode() == encode(payload) and payload["jid"] == jid
    assert not r.keys("sidequest:flow*")


def test_flow_counts_is_empty_without_pushes(client):
    assert flow_counts(Client(client.config)) == {}


def test_the_docs_example_runs(tmp_path, redis_url, r):
    doc = (ROOT / "docs" / "flow-control.md").read_text(encoding="utf-8")
    for block in re.findall(r"```python\n(.*?)```", doc, re.S):
        name = block.splitlines()[0].removeprefix("# ").split(" ")[0]
        if name in ("search.py", "debounce_demo.py"):
            (tmp_path / name).write_text(block, encoding="utf-8")
    worker = WorkerProcess(redis_url, "-r", "search", "-q", "search", cwd=str(tmp_path))
    try:
        worker.wait_registered(r)
        done = subprocess.run([PYTHON, "debounce_demo.py"], cwd=tmp_path, env=python_env(REDIS_URL=redis_url),
                              capture_output=True, text=True, timeout=2 * STARTUP + 15)
    finally:
        worker.stop()
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["reindexed account 42 after edit 49", "[True, False, False]",
                                        "{'replaced': 49, 'dropped': 0}", "{'replaced': 0, 'dropped': 2}"]


def test_a_ruby_sidekiq_worker_runs_a_debounced_job_once_it_is_due(ruby, client, r, redis_url):
    """Item 5: the run is an ordinary scheduled job (two more payload fields Ruby ignores)."""
    from ruby_peer import RubySidekiq

    jids = [client.push("Echo", [1, "same"], debounce=0.5) for _ in range(5)]
    [(member, _)] = r.zrange("schedule", 0, -1, withscores=True)
    assert json.loads(member)["jid"] == jids[-1]
    peer = RubySidekiq(redis_url)
    try:
        wait_until(lambda: r.llen("test:ruby-ran") == 1 and r.zcard("schedule") == 0, 60, 0.1,
                   "Ruby Sidekiq to run the due job")
    finally:
        log = peer.stop()
    assert [json.loads(x)["jid"] for x in r.lrange("test:ruby-ran", 0, -1)] == [jids[-1]], log
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0
