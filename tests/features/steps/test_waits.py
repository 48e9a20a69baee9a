"""Durable waits (`sidequest.sleep`, `wait_for`, `send_event`) in in-process workers on a real
Redis, on both runners: a sleeping or waiting job leaves the worker (parked in `schedule`, status
`waiting`), spends no retry, counts no failure, keeps its `recovery_count`, and resumes past its
recorded steps; an event wakes it at once, an early one is kept, a time-out raises at the call;
a cancelled waiting job never runs again and its records go. `except Exception` cannot swallow
the wait. A real worker process, another process's send_event and a kill -9 are in
tests/scenarios/test_waits.py.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from conftest import wait_until

import sidequest
from sidequest.features.steps import read_steps
from sidequest.jobs.payload import decode, encode

LOG = "test:log"


def _r():
    return sidequest.default_client().redis


def note(*what):
    _r().rpush(LOG, json.dumps(list(what)))


def log(r):
    return [json.loads(x) for x in r.lrange(LOG, 0, -1)]


@sidequest.job(name="WaitSleeper", retry=3)
def sleeper(seconds):
    sidequest.step("before", note, "before")
    try:
        sidequest.sleep(seconds)
    except Exception:  # a job's broad except cannot swallow the wait
        note("swallowed")
    note("after")


@sidequest.job(name="WaitAsyncSleeper", retry=3)
async def async_sleeper(seconds):
    await sidequest.astep("before", note, "before")
    try:
        await sidequest.asleep(seconds)
    except Exception:
        note("swallowed")
    note("after")


@sidequest.job(name="WaitApproval", retry=0)
def approval(timeout):
    sidequest.step("asked", note, "asked")
    try:
        answer = sidequest.wait_for("approved", timeout=timeout)
    except sidequest.WaitTimeout as exc:
        note("timeout", str(exc))
        return
    note("approved", answer)


@sidequest.job(name="WaitAsyncApproval", retry=0)
async def async_approval(timeout):
    await sidequest.astep("asked", note, "asked")
    try:
        answer = await sidequest.await_for("approved", timeout=timeout)
    except sidequest.WaitTimeout as exc:
        note("timeout", str(exc))
        return
    note("approved", answer)


@sidequest.job(name="WaitMarker")
def marker():
    note("marker")


def parked(r):
    return [decode(m) for m in r.zrange("schedule", 0, -1)]


def test_a_sleep_parks_the_job_and_resumes_it_past_its_steps(worker, client, r, runner):
    job = async_sleeper if runner == "asyncio" else sleeper
    worker()
    jid = job.set(client=client).perform_async(0.6)
    wait_until(lambda: parked(r), 10, message="the job to be parked")
    [entry] = parked(r)
    assert entry["sidequest_waiting"]["kind"] == "sleep" and "retry_count" not in entry
    assert sidequest.status(jid, client=client) == "waiting"
    record = read_steps(r, jid).waiting
    assert (record.name, record.kind, record.state) == ("sleep-1", "sleep", "waiting")
    assert record.until == pytest.approx(time.time() + 0.6, abs=0.6)
    wait_until(lambda: ["after"] in log(r), 10, message="the job to resume")
    assert log(r) == [["before"], ["after"]]  # the step ran once, nothing swallowed the wait
    assert int(r.get("stat:failed") or 0) == 0
    wait_until(lambda: read_steps(r, jid) is None, 5, message="the records to leave with the job")


def test_a_sleep_keeps_recovery_count_and_retry_count(worker, client, r):
    """A poison pill stays bounded across sleeps: the parked payload keeps what it had."""
    payload = {"class": "WaitSleeper", "args": [0.3], "queue": "default", "jid": "a" * 24, "retry": 3,
               "retry_count": 1, "recovery_count": 2, "created_at": time.time(), "enqueued_at": time.time()}
    r.sadd("queues", "default")
    r.lpush("queue:default", encode(payload))
    worker()
    wait_until(lambda: parked(r), 10, message="the job to be parked")
    [entry] = parked(r)
    assert (entry["recovery_count"], entry["retry_count"]) == (2, 1)
    wait_until(lambda: ["after"] in log(r), 10, message="the job to resume")


def test_an_event_wakes_a_waiting_job_at_once(worker, client, r, runner):
    job = async_approval if runner == "asyncio" else approval
    worker(poll_interval=5)  # not the poller: send_event moves the job itself
    jid = job.set(client=client).perform_async(60)
    wait_until(lambda: parked(r), 10, message="the job to wait")
    assert sidequest.status(jid, client=client) == "waiting"
    sent = time.monotonic()
    assert sidequest.send_event(jid, "approved", {"by": "ada"}, client=client) is True
    wait_until(lambda: any(x[0] == "approved" for x in log(r)), 5, 0.005, "the job to resume")
    assert time.monotonic() - sent < 1.0
    assert log(r) == [["asked"], ["approved", {"by": "ada"}]]


def test_an_event_sent_before_the_wait_is_kept_for_it(worker, client, r):
    jid = approval.set(client=client).perform_async(60)  # queued, no records yet: found by search
    assert sidequest.send_event(jid, "approved", [1, "early"], client=client) is False
    worker()
    wait_until(lambda: any(x[0] == "approved" for x in log(r)), 10, message="the job to end")
    assert log(r) == [["asked"], ["approved", [1, "early"]]]
    assert not r.zcard("schedule")  # it never parked


def test_a_wait_times_out_with_a_raise_at_the_call(worker, client, r, runner):
    job = async_approval if runner == "asyncio" else approval
    worker()
    jid = job.set(client=client).perform_async(0.5)
    wait_until(lambda: any(x[0] == "timeout" for x in log(r)), 10, message="the time-out")
    [_, (_, message)] = log(r)
    assert "no event 'approved' came within the wait's timeout (0.5 s" in message
    wait_until(lambda: read_steps(r, jid) is None, 5, message="the records to leave with the job")


def test_send_event_to_an_unknown_jid_is_a_clear_error(client):
    with pytest.raises(sidequest.EventError, match="no job 0123 to send event 'x' to"):
        sidequest.send_event("0123", "x", client=client)


def test_send_event_refuses_a_payload_that_is_not_json(client):
    with pytest.raises(sidequest.StepError, match="send JSON"):
        sidequest.send_event("0123", "x", {1, 2}, client=client)


def test_the_asyncio_send_event_wakes_the_job(worker, client, r, monkeypatch):
    worker()
    jid = approval.set(client=client).perform_async(60)
    wait_until(lambda: parked(r), 10, message="the job to wait")

    async def send():
        return await sidequest.aio.send_event(jid, "approved", "yes")

    assert asyncio.run(send()) is True
    wait_until(lambda: ["approved", "yes"] in log(r), 5, message="the job to resume")


def test_a_cancelled_waiting_job_never_runs_again_and_its_records_go(worker, client, r):
    worker()
    jid = approval.set(client=client).perform_async(0.8)
    wait_until(lambda: parked(r), 10, message="the job to wait")
    assert sidequest.cancel(jid, client)
    assert not r.zcard("schedule") and read_steps(r, jid) is None
    with pytest.raises(sidequest.EventError):
        sidequest.send_event(jid, "approved", client=client)
    marker.set(client=client).perform_in(1.2)  # due after the wait's time-out: the poller has passed it
    wait_until(lambda: ["marker"] in log(r), 10, message="a job due after the time-out to run")
    assert log(r) == [["asked"], ["marker"]]


def test_wait_outside_a_job_and_bad_durations_say_so():
    with pytest.raises(sidequest.StepError, match="inside a job"):
        sidequest.sleep(1)
    with pytest.raises(sidequest.StepError, match="takes seconds from 0"):
        sidequest.sleep(-1)
    with pytest.raises(sidequest.StepError, match="non-empty string"):
        sidequest.wait_for("")


@sidequest.job(name="WaitGroupedUnique", group="tenant", group_concurrency=1, unique_for=60)
def grouped_unique(n):
    sidequest.wait_for("go", timeout=60)
    note("grouped", n)


def test_a_waiting_job_gives_back_its_group_slot_and_keeps_its_unique_claim(worker, client, r):
    from sidequest.store import keys, lanes

    lane = lanes.LaneKeys(keys.DEFAULT.lanes("default"))
    worker()
    jid = grouped_unique.set(client=client).perform_async(1)
    wait_until(lambda: parked(r), 10, message="the job to wait")
    wait_until(lambda: r.scard(lane.running("tenant")) == 0, 5, message="its group's slot given back")
    assert r.keys("sidequest:unique:*")  # its claim is kept: a second push of it is refused
    assert grouped_unique.set(client=client).perform_async(1) is None
    assert grouped_unique.set(client=client).perform_async(2) is not None  # the group's slot is free
    wait_until(lambda: r.zcard("schedule") == 2, 10, message="the second to wait beside it")
    sidequest.send_event(jid, "go", client=client)
    wait_until(lambda: ["grouped", 1] in log(r), 5, message="the first to resume")
    wait_until(lambda: len(r.keys("sidequest:unique:*")) == 1, 5, message="its claim to end (the second's stays)")


def test_the_durable_waits_snippets_run_as_written(worker, client, r):
    import re
    from pathlib import Path

    text = (Path(__file__).parents[3] / "docs" / "durable-steps.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)[2:]
    assert len(blocks) == 2
    scopes = [{} for _ in blocks]
    for block, scope in zip(blocks, scopes, strict=True):
        exec(compile(block, "docs/durable-steps.md", "exec"), scope)
    worker()
    jid = scopes[0]["onboarding"].set(client=client).perform_async(7)
    def waiting_for():
        found = read_steps(r, jid)
        return found is not None and found.waiting is not None and found.waiting.event

    wait_until(lambda: waiting_for() == "approved", 10, message="the wait for the approval")
    assert [(s.name, s.kind, s.state) for s in read_steps(r, jid).steps] == [
        ("welcome", "step", "done"), ("sleep-1", "sleep", "done"), ("approved", "wait", "waiting")]
    assert scopes[1]["approve"](jid) is True
    wait_until(lambda: scopes[0]["ACCOUNTS"].get(7) == {"by": "ada"}, 5, message="the job to end")
    assert int(r.get("stat:failed") or 0) == 0


LEASE = sidequest.limiter.concurrent("wait-lease", 1, lease=60)  # 60 s: an expiry cannot hide a leak


@sidequest.job(name="WaitLeased", retry=0)
def leased(n):
    with LEASE:
        note("inside", n, len(LEASE.holders()))
        sidequest.sleep(0.2, name="nap")  # the first run ends here
        answer = sidequest.wait_for("go", timeout=60)  # the second here
        note("resumed", n, LEASE.holders(), answer)


@sidequest.job(name="WaitAsyncLeased", retry=0)
async def async_leased(n):
    async with LEASE:
        note("inside", n, len(LEASE.holders()))
        await sidequest.asleep(0.2, name="nap")
        answer = await sidequest.await_for("go", timeout=60)
        note("resumed", n, LEASE.holders(), answer)


@sidequest.job(name="WaitLeaseTaker", retry=0)
def lease_taker():
    with LEASE:  # full: OverLimit, and the job would be snoozed for minutes
        note("taker", len(LEASE.holders()))


@pytest.mark.parametrize("kind", ["with", "async with"])
def test_a_concurrent_limiters_lease_is_given_back_by_a_wait_and_taken_again_at_resume(worker, client, r, kind):
    job = async_leased if kind == "async with" else leased
    worker(concurrency=2)
    jid = job.set(client=client).perform_async(1)
    # the sleep gave the slot back: else the run after it could not enter (limit 1) and is snoozed
    wait_until(lambda: (read_steps(r, jid) or None) and read_steps(r, jid).waiting
               and read_steps(r, jid).waiting.event == "go", 10, message="the job to wait, past its sleep")
    assert [x for x in log(r) if x[0] == "inside"] == [["inside", 1, 1], ["inside", 1, 1]]
    assert LEASE.holders() == []  # the wait gave it back too

    lease_taker.set(client=client).perform_async()
    wait_until(lambda: ["taker", 1] in log(r), 5, message="another job to take the slot while it waits")
    assert LEASE.holders() == []
    assert sidequest.send_event(jid, "go", {"by": kind}, client=client) is True
    [resumed] = wait_until(lambda: [x for x in log(r) if x[0] == "resumed"], 5, message="the job to resume")
    assert resumed[1] == 1 and len(resumed[2]) == 1 and resumed[3] == {"by": kind}  # it holds the slot again
    assert LEASE.holders() == [] and int(r.get("stat:failed") or 0) == 0
