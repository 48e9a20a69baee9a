"""Status and result by jid: O(1) records for result_ttl jobs, a search for the others."""

import re
import threading
import time

import pytest
import redis
from conftest import STARTUP, wait_until
from helpers import WorkerProcess, doc_examples, pttl_and_spent
from jobs_for_tests import (
    ComputeRetry,
    CustomDelay,
    compute,
    compute_async,
    compute_boom,
    compute_not_json,
    cooperative,
    noop,
    unique_boom,
    work,
)

import sidequest
from sidequest import Cancelled, Client, JobFailed, NoResultError
from sidequest.api import DeadSet, Queue, RetrySet
from sidequest.features.lookup import WAIT_STEP, run, status_query

VALUE = {"n": 3, "double": 6, "items": [3, None, True]}


def status(client, jid, **kw):
    return sidequest.status(jid, client=client, **kw)


def result(client, jid, timeout=10.0):
    return sidequest.result(jid, timeout, client=client)


def test_queued_and_scheduled_from_the_record(client, r):
    began = time.monotonic()
    queued = client.push(compute, [1])
    later = client.push(compute, [2], in_=60)
    assert status(client, queued) == "queued" and status(client, later) == "scheduled"
    assert r.hgetall(f"sidequest:status:{queued}")[b"state"] == b"queued"
    pttl, spent = pttl_and_spent(r, f"sidequest:status:{queued}", began)
    assert 60_000 - spent <= pttl <= 60_000
    pttl, spent = pttl_and_spent(r, f"sidequest:status:{later}", began)
    assert 120_000 - spent <= pttl <= 120_000  # kept past its time


def test_a_scheduled_record_whose_time_has_passed_reads_as_queued(client, r):
    began = time.monotonic()
    jid = client.push(compute, [1], in_=2)
    assert status(client, jid) == "scheduled" or time.monotonic() - began >= 2
    # due: it reads as queued before any scheduler moves it (there is none here)
    wait_until(lambda: status(client, jid) == "queued", 30, 0.05, "the record to read as queued")
    assert r.zcard("schedule") == 1 and r.llen("queue:default") == 0


def test_plain_jobs_are_found_where_they_wait(client, r):
    queued = client.push(noop, [1])
    elsewhere = client.push(noop, [2], queue="other")
    later = client.push(noop, [3], in_=60)
    assert r.keys("sidequest:status:*") == []  # plain jobs keep no record
    assert status(client, queued) == "queued"
    assert status(client, queued, queue="default") == "queued"
    assert status(client, elsewhere) == "queued"
    assert status(client, elsewhere, queue="default") == "unknown"  # looked for in that queue only
    assert status(client, later) == "scheduled"
    assert status(client, "f" * 24) == "unknown"


def test_a_plain_job_is_found_in_a_long_queue(client, r):
    jids = client.push_bulk(noop, [[i] for i in range(2500)])
    assert status(client, jids[0]) == "queued"  # the oldest: the last page, near the tail
    assert status(client, jids[1234]) == "queued"


def test_running_retry_dead_done_for_result_ttl_jobs(client, r, start):
    start()
    running = client.push(compute, [1, "gate"])
    wait_until(lambda: status(client, running) == "running", message="running")
    retrying = client.push(ComputeRetry, [2])
    wait_until(lambda: status(client, retrying) == "retry", message="retry")
    record = r.hgetall(f"sidequest:status:{retrying}")
    assert record[b"error_class"] == b"TimeoutError" and record[b"error_message"] == b"slow upstream 2"
    assert float(record[b"at"]) > time.time() + 900
    assert r.pttl(f"sidequest:status:{retrying}") > 1_000_000  # kept while it waits for its retry
    dead = client.push(compute_boom, [4])
    wait_until(lambda: status(client, dead) == "dead", message="dead")
    r.set("gate", 1)
    wait_until(lambda: status(client, running) == "done", message="done")
    assert result(client, running) == {"n": 1, "double": 2, "items": [1, None, True]}
    assert 0 < r.pttl(f"sidequest:status:{running}") <= 60_000


def test_running_retry_dead_for_plain_jobs_by_search(client, r, start):
    start()
    running = client.push(work, [1, 0, "gate"])
    wait_until(lambda: status(client, running) == "running", message="running")
    retrying = client.push(CustomDelay, [])
    wait_until(lambda: status(client, retrying) == "retry", message="retry")
    dead = client.push(unique_boom, [1])
    wait_until(lambda: status(client, dead) == "dead", message="dead")
    r.set("gate", 1)
    wait_until(lambda: status(client, running) == "unknown", message="a done plain job to leave no trace")
    done = client.push(noop, [])
    wait_until(lambda: status(client, done) == "unknown", message="done")
    assert r.keys("sidequest:status:*") == []


def test_a_job_put_back_at_shutdown_is_queued_again(client, r, start):
    jid = client.push(compute, [1, "gate"])
    launcher = start(timeout=0.3)
    wait_until(lambda: status(client, jid) == "running", message="running")
    launcher.stop()  # the deadline passes: the job goes back to its queue
    assert status(client, jid) == "queued"
    assert r.llen("queue:default") == 1


def test_result_returns_the_value(client, r, start):
    jid = client.push(compute, [3])
    start()
    assert result(client, jid) == VALUE
    assert status(client, jid) == "done"
    assert result(client, client.push(compute_async, [4])) == 40  # an async def job
    assert result(client, jid) == VALUE  # again: the record stays for result_ttl


def test_result_wakes_as_soon_as_the_job_ends_and_every_waiter_gets_it(client, r, start):
    jid = client.push(compute, [3, "gate"])
    start()
    got = []
    named = Client(client.config, redis_client=redis.Redis.from_url(client.config.redis_url, client_name="waiter"))

    def wait():
        got.append(result(named, jid, timeout=20))

    waiters = [threading.Thread(target=wait) for _ in range(3)]
    for w in waiters:
        w.start()
    wait_until(lambda: status(client, jid) == "running", message="running")
    # every waiter blocked in Redis on the job's notify list before the job is let end
    wait_until(lambda: sum(c.get("name") == "waiter" and "b" in c["flags"] for c in r.client_list()) == 3,
               STARTUP, 0.01, "the three waiters to block")
    released = time.monotonic()
    r.set("gate", 1)
    for w in waiters:
        w.join(15)
    assert got == [VALUE] * 3
    # Woken by the notify list: a waiter that looked again only every WAIT_STEP (5 s) would
    # still be asleep; the margin is for a loaded machine, which may run these threads late.
    assert time.monotonic() - released < WAIT_STEP - 1


def test_result_raises_job_failed_for_a_dead_job(client, r, start):
    jid = client.push(compute_boom, [4])
    start()
    with pytest.raises(JobFailed, match="ValueError: cannot compute 4"):
        result(client, jid)


def test_result_times_out(client, r):
    jid = client.push(compute, [5])  # no worker
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="still queued"):
        result(client, jid, timeout=0.3)
    assert 0.25 < time.monotonic() - began < WAIT_STEP - 1  # its own timeout, not a WAIT_STEP


def test_result_refuses_what_it_can_never_give(client, r, start):
    with pytest.raises(NoResultError, match="unknown"):
        result(client, "0" * 24)
    plain = client.push(noop, [1])
    with pytest.raises(NoResultError, match="result_ttl"):
        result(client, plain)
    not_json = client.push(compute_not_json, [])
    start()
    wait_until(lambda: status(client, not_json) == "done", message="done")
    with pytest.raises(NoResultError, match="set"):
        result(client, not_json)
    assert "not native JSON" in r.hget(f"sidequest:status:{not_json}", "result_error").decode()


def test_cancelled_jobs(client, r, start):
    waiting = client.push(compute, [1], in_=60)
    assert sidequest.cancel(waiting, client=client)
    assert status(client, waiting) == "cancelled"
    with pytest.raises(Cancelled):
        result(client, waiting)
    running = client.push(cooperative, ["t"], result_ttl=60)
    start()
    wait_until(lambda: status(client, running) == "running", message="running")
    assert sidequest.cancel(running, client=client)
    wait_until(lambda: status(client, running) == "cancelled", message="cancelled")


def test_operator_actions_update_the_record(client, r, start):
    retrying = client.push(ComputeRetry, [2])
    start()
    wait_until(lambda: status(client, retrying) == "retry", message="retry")
    assert RetrySet(client=client).find_job(retrying).kill()
    assert status(client, retrying) == "dead"
    with pytest.raises(JobFailed, match="TimeoutError: slow upstream 2"):
        result(client, retrying)
    assert DeadSet(client=client).find_job(retrying).delete()
    assert status(client, retrying) == "unknown"
    queued = client.push(compute, [1], queue="held")
    assert Queue("held", client=client).find_job(queued).delete()
    with pytest.raises(NoResultError, match="unknown"):
        result(client, queued)


def test_a_result_ttl_job_whose_record_expired_while_waiting_is_still_found(client, r):
    jid = client.push(compute, [1], result_ttl=0.2)
    wait_until(lambda: not r.exists(f"sidequest:status:{jid}"), 10, 0.02, "the record to expire")
    found = run(status_query(jid), r)
    assert found.state == "queued" and found.record is None and found.payload["jid"] == jid
    with pytest.raises(TimeoutError):  # still waited for: its next change writes a record again
        result(client, jid, timeout=0.2)


def test_bad_result_ttl_and_jid_are_refused(client):
    for bad in (0, -1, "1h", float("nan")):
        with pytest.raises(sidequest.JobArgumentError, match="result_ttl"):
            client.push(compute, [1], result_ttl=bad)
    for jid in ("", None, 42):
        with pytest.raises(ValueError, match="jid"):
            status(client, jid)


# -- the docs ----------------------------------------------------------------------------------
DOC_FILES = {"pricing.py", "unique_demo.py", "quote_demo.py", "produce_async.py"}


def test_the_flow_control_docs_examples_run(tmp_path, redis_url, r):
    run = doc_examples("flow-control.md", DOC_FILES, tmp_path, redis_url)

    assert run("unique_demo.py") == ["True None True"]
    worker = WorkerProcess(redis_url, "-r", "pricing", "-q", "pricing", cwd=str(tmp_path))
    try:
        worker.wait_registered(r)
        lines = run("quote_demo.py")
        assert lines[:3] == ["True", "{'sku': 'A-1', 'quantity': 4, 'total': 50.0}", "done"]
        assert re.fullmatch(r"job [0-9a-f]{24} ended dead: LookupError: no price for Z-9", lines[3])
        assert run("produce_async.py") == ["True", "{'sku': 'B-2', 'quantity': 3, 'total': 37.5}"]
    finally:
        worker.stop()
