"""A feature's error inside a core move (issue 28, items 3 and 5): a feature key of the wrong type
is that job's fault, logged with its jid and the key; the core move stands, the other jobs of the
same call keep their features' writes, and nothing is mistaken for a Redis outage. Both runners."""

from __future__ import annotations

import json
import logging

import pytest
from conftest import wait_until
from helpers import queue_items, ran, reserved
from jobs_for_tests import compute, echo, unique_at_start, wf_gate, wf_step

from sidequest import chain
from sidequest.store import keys

RUNNERS = ["threads", "asyncio"]
OUTAGE = "Redis is unavailable"


def state(r, jid: str) -> str | None:
    value = r.hget(f"sidequest:status:{jid}", "state")
    return value.decode() if value else None


def claim_of(r, jid: str) -> str:
    """The unique claim key of the queued job `jid`."""
    [payload] = [p for p in queue_items(r) if p["jid"] == jid]
    return f"sidequest:unique:{payload['unique_digest']}"


def fault_lines(caplog, jid: str, key: str) -> list[str]:
    return [m for m in caplog.messages if jid in m and key in m]


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_wrong_type_claim_at_the_end_faults_only_its_job(start, client, r, caplog, runner):
    """Issue 28 item 3: one job's unique claim key holds a hash (WRONGTYPE for its release). It ends
    done, one line names its jid and the key; the jobs acknowledged with it keep their status
    records and claim releases, later jobs run, and no outage is logged."""
    caplog.set_level(logging.WARNING)
    bad = client.push(compute, [0, "test:gate"], unique_for=60)
    claim = claim_of(r, bad)
    r.delete(claim)
    r.hset(claim, "not", "a claim")
    goods = [client.push(compute, [n, "test:gate"], unique_for=60) for n in range(1, 8)]
    good_claims = [claim_of(r, jid) for jid in goods]
    start(runner=runner, concurrency=8)
    wait_until(lambda: all(state(r, jid) == "running" for jid in [bad, *goods]), 15, 0.02, "all eight to start")
    r.set("test:gate", 1)  # they end together: their successes share acknowledgement calls
    wait_until(lambda: all(state(r, jid) == "done" for jid in goods), 15, 0.02, "the other jobs' records to say done")
    assert not any(r.exists(key) for key in good_claims)  # released
    assert state(r, bad) == "done"  # its other feature (the status record) still ran
    assert r.type(claim) == b"hash"  # the bad key is left as it was, for the operator
    later = client.push(compute, [99], unique_for=60)
    wait_until(lambda: state(r, later) == "done", 15, 0.02, "a later job to run")
    wait_until(lambda: not reserved(r), 5, 0.02, "nothing left reserved")
    assert fault_lines(caplog, bad, claim), caplog.text
    assert OUTAGE not in caplog.text


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_wrong_type_claim_at_the_start_lets_the_job_run(start, client, r, caplog, runner):
    """Issue 28 item 3: a job whose `taken` operation fails (its unique_until="start" claim key is a
    hash) runs anyway, with one line naming its jid and the key, and holds no processor."""
    caplog.set_level(logging.WARNING)
    bad = client.push(unique_at_start, [1])
    claim = claim_of(r, bad)
    r.delete(claim)
    r.hset(claim, "not", "a claim")
    start(runner=runner, concurrency=1)
    wait_until(lambda: ran(r, "unique-start") == [[1]], 15, 0.02, "the job to run")
    later = client.push(compute, [2])
    wait_until(lambda: state(r, later) == "done", 15, 0.02, "a later job to run on the one processor")
    wait_until(lambda: not reserved(r), 5, 0.02, "nothing left reserved")
    assert fault_lines(caplog, bad, claim), caplog.text
    assert OUTAGE not in caplog.text


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_stop_puts_back_a_job_whose_workflow_state_has_the_wrong_type(start, client, r, caplog, runner):
    """Issue 28 item 3: a workflow step whose state key is a string (WRONGTYPE at `taken` and at
    `put_back`) runs, and a stop puts it back whole: in its queue, unchanged, nothing reserved, no
    failed put-back, no outage."""
    caplog.set_level(logging.WARNING)
    workflow_id = chain(wf_gate.s("bad", 1), wf_step.s("bad", "after")).perform_async(client=client)
    state_key = f"sidequest:workflow:{workflow_id}:state"
    assert r.type(state_key) == b"hash"
    r.delete(state_key)
    r.set(state_key, "not a state")
    [queued] = r.lrange("queue:default", 0, -1)
    jid = json.loads(queued)["jid"]
    launcher = start(runner=runner, concurrency=2, timeout=0.5)
    wait_until(lambda: reserved(r) == [queued] and r.llen("queue:default") == 0, 15, 0.02, "the step to be taken")
    wait_until(lambda: fault_lines(caplog, jid, state_key), 15, 0.02, "the fault of its start to be logged")
    launcher.stop()
    assert r.lrange("queue:default", 0, -1) == [queued]
    assert not reserved(r)
    assert "could not put a job back" not in caplog.text
    assert OUTAGE not in caplog.text
    assert len(fault_lines(caplog, jid, state_key)) == 2  # taken, put back
    r.set("test:gate:bad", 1)  # its thread, abandoned at the stop, ends (its outcome is not written)
    wait_until(lambda: ["bad", "gate", 1] in ran(r, "wf"), 15, 0.02, "the abandoned run to end")


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_queue_key_of_the_wrong_type_does_not_stop_the_other_queues(start, client, r, caplog, runner):
    """Issue 28 items 3 and 5: a queue whose key is a string (WRONGTYPE for the fetch's RPOP)
    is logged once with its key and skipped; the jobs of the queue before it in the same call are
    not lost, and jobs pushed later to the good queue run."""
    caplog.set_level(logging.WARNING)
    r.set("queue:second", "not a queue")
    start(runner=runner, queues=["first", "second"], concurrency=1)
    jids = [client.push(compute, [n], queue="first") for n in range(3)]
    wait_until(lambda: all(state(r, jid) == "done" for jid in jids), 15, 0.02, "the good queue's jobs to run")
    # idle, the blocking fetch meets the bad key too: that queue's fault, said once, never a refusal
    def blmoves() -> int:  # calls that answered or failed, on every queue
        return int(r.info("commandstats").get("cmdstat_blmove", {}).get("calls", 0))
    before = blmoves()
    wait_until(lambda: blmoves() >= before + 3, 30, 0.02, "blocking fetches on both queues")
    jid = client.push(compute, [9], queue="first")
    wait_until(lambda: state(r, jid) == "done", 15, 0.02, "a job pushed to the idle good queue to run")
    assert sum("queue:second" in m and "WRONGTYPE" in m for m in caplog.messages) == 1, caplog.text
    assert OUTAGE not in caplog.text and "refuses" not in caplog.text, caplog.text


def test_recovery_moves_a_dead_processs_job_whose_workflow_state_has_the_wrong_type(start, client, r, caplog):
    """Issue 28 item 3: recovering a dead process's jobs is a core move too: a job whose workflow
    state key is a string goes back to its queue and runs, with one line for its fault, and the
    jobs behind it in the same reserved list are recovered as well."""
    caplog.set_level(logging.WARNING)
    workflow_id = chain(wf_step.s("orphan", "one"), wf_step.s("orphan", "two")).perform_async(client=client)
    state_key = f"sidequest:workflow:{workflow_id}:state"
    [step] = r.lrange("queue:default", 0, -1)
    jid = json.loads(step)["jid"]
    client.push_bulk(echo, [["behind", n] for n in range(2)])
    dead = keys.reserved("gone-host:4242:0a0b0c0d0e0f", keys.BATCH_SLOT)  # no heartbeat: a dead process's
    while r.lmove("queue:default", dead, "RIGHT", "RIGHT"):
        pass  # the step first, then the echoes: recovery reads the list head first
    r.sadd(keys.RESERVATIONS, dead)
    r.delete(state_key)
    r.set(state_key, "not a state")
    start(concurrency=2)
    wait_until(lambda: len(ran(r, "echo")) == 2 and ["orphan", "one"] in ran(r, "wf"), 15, 0.02,
               "the dead process's jobs to be recovered and run")
    assert not r.exists(dead)
    assert any("'recovered'" in m for m in fault_lines(caplog, jid, state_key)), caplog.text
    assert "orphan recovery failed" not in caplog.text
