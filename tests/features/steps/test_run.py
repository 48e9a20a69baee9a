"""Durable steps (`sidequest.step`, `sidequest.astep`) in in-process workers on a real Redis, on
both runners: a recorded step never runs again in its job, a raised one is not recorded, the
records leave with the job (done, dropped, cancelled, deleted) and stay while it waits (retry,
dead), a re-push of the jid with other arguments starts fresh. Each step's body appends its name
to `test:bodies`, so the list is the record of every body run.

Kills of real worker processes are in tests/scenarios/test_steps_crash.py.
"""

from __future__ import annotations

import json
import threading

import pytest
from conftest import ROOT, wait_until
from helpers import reserved

import sidequest
from sidequest.api import DeadSet, RetrySet
from sidequest.features.steps import MAX_RESULT, read_steps, reset_steps
from sidequest.jobs.registry import Registry
from sidequest.store import keys

BODIES = "test:bodies"
SEEN = "test:seen"


def _r():
    return sidequest.default_client().redis


def body(name, value=None):
    """A step's body: its run is recorded, its value returned."""
    _r().rpush(BODIES, name)
    current = sidequest.current_step()
    _r().rpush(SEEN, json.dumps([name, current.attempt, current.idempotency_key]))
    return value if value is not None else {"step": name}


def fail_once(name):
    """Raises the first time it runs for this name, then returns."""
    body(name)
    if _r().incr(f"test:fails:{name}") == 1:
        raise RuntimeError(f"{name} failed once")
    return name


class StepsThree(sidequest.Job, name="StepsThree", retry=3):
    """charge, receipt (fails on its first run), crm."""

    def retry_in(self, count, exc):
        return 0.1

    def perform(self, order):
        charge = sidequest.step("charge", body, "charge", {"id": f"ch-{order}", "amounts": [1, 2], "empty": []})
        sidequest.step("receipt", fail_once, "receipt")
        sidequest.step("crm", body, "crm")
        _r().rpush("test:done", json.dumps(charge))


class AsyncStepsThree(sidequest.Job, name="AsyncStepsThree", retry=3):
    def retry_in(self, count, exc):
        return 0.1

    async def perform(self, order):
        async def charge_async(name):
            return body(name, {"id": f"ch-{order}"})

        charge = await sidequest.astep("charge", charge_async, "charge")
        await sidequest.astep("receipt", fail_once, "receipt")
        await sidequest.astep("crm", body, "crm")
        _r().rpush("test:done", json.dumps(charge))


@sidequest.job(name="StepsThenFail", retry=5)
def steps_then_fail(order):
    sidequest.step("a", body, "a")
    raise RuntimeError("after the step")


@sidequest.job(name="StepsThenFailNoRetry", retry=False)
def steps_then_fail_no_retry(order):
    sidequest.step("a", body, "a")
    raise RuntimeError("after the step")


@sidequest.job(name="StepsThenDead", retry=0)
def steps_then_dead(order):
    sidequest.step("a", body, "a")
    if not _r().exists("test:pass"):
        raise RuntimeError("not yet")
    sidequest.step("b", body, "b")


@sidequest.job(name="StepsMisused", retry=False)
def steps_misused(kind):
    if kind == "twice":
        sidequest.step("a", body, "a")
        sidequest.step("a", body, "a")
    elif kind == "object":
        sidequest.step("obj", lambda: object())
    elif kind == "big":
        sidequest.step("big", lambda: "x" * (MAX_RESULT + 1))


@sidequest.job(name="StepsGated", retry=5)
def steps_gated(order):
    sidequest.step("a", body, "a")
    while not _r().exists("test:open"):
        if sidequest.cancelled():
            raise sidequest.Cancelled()
        threading.Event().wait(0.02)


def gated_body(name):
    """A step's body that waits for `test:open` (an operator acts meanwhile)."""
    body(name)
    while not _r().exists("test:open"):
        threading.Event().wait(0.01)
    return name


class StepsResetWhileRunning(sidequest.Job, name="StepsResetWhileRunning", retry=1):
    """Step `a` (gated), then its first run fails: the retry shows whether `a` was recorded."""

    def retry_in(self, count, exc):
        return 0.1

    def perform(self, order):
        sidequest.step("a", gated_body, "a")
        if _r().incr("test:runs") == 1:
            raise RuntimeError("the first run fails after its step")


@sidequest.job(name="PlainNoop")
def plain_noop(n):
    return n


@sidequest.job(name="PlainFailNoRetry", retry=False)
def plain_fail_no_retry(n):
    """No step: its drop asks the steps feature anyway (`always_at`), as a stored payload has no mark."""
    _r().rpush(BODIES, f"plain-{n}")
    raise RuntimeError("dropped")


def only(*jobs) -> Registry:
    registry = Registry()
    for job in jobs:
        registry.register(job.job_class if hasattr(job, "job_class") else job)
    return registry


def bodies(r) -> list[str]:
    return [b.decode() for b in r.lrange(BODIES, 0, -1)]


def no_records(r) -> bool:
    return not r.keys("sidequest:steps:*")


def test_a_step_that_raised_runs_again_and_recorded_steps_do_not(worker, client, r, runner):
    job = AsyncStepsThree if runner == "asyncio" else StepsThree
    worker()
    jid = job.set(client=client).perform_async(7)
    wait_until(lambda: r.llen("test:done") == 1, 10, message="the job to end")
    assert bodies(r) == ["charge", "receipt", "receipt", "crm"]
    # the second run's charge is the recorded one: the same JSON, no body run
    assert json.loads(r.lpop("test:done"))["id"] == "ch-7"
    wait_until(lambda: no_records(r), 5, message="the records to leave with the job")
    seen = [json.loads(s) for s in r.lrange(SEEN, 0, -1)]
    assert [s[1] for s in seen] == [1, 1, 2, 1]  # receipt's second attempt
    keys_by_step = {name: key for name, _, key in seen}
    assert seen[1][2] == seen[2][2]  # one idempotency key on every run of a step
    assert len(set(keys_by_step.values())) == 3
    assert all(key.startswith(f"sq-{jid}-") for key in keys_by_step.values())


def test_a_replayed_result_is_the_first_runs_json(worker, client, r, runner):
    worker()
    StepsThree.set(client=client).perform_async(8)
    wait_until(lambda: r.llen("test:done") == 1, 10, message="the job to end")
    # the first run returned the body's value through JSON, as a replay returns it
    assert json.loads(r.lpop("test:done")) == {"id": "ch-8", "amounts": [1, 2], "empty": []}


def test_records_stay_while_the_job_waits_in_retry_and_go_when_an_operator_deletes_it(worker, client, r):
    worker()
    jid = steps_then_fail.set(client=client).perform_async(1)
    wait_until(lambda: r.zcard("retry") == 1, 10, message="the retry")
    found = read_steps(r, jid)
    assert found is not None and [(s.name, s.state, s.attempts) for s in found.steps] == [("a", "done", 1)]
    assert found.steps[0].result == {"step": "a"} and found.klass == "StepsThenFail"
    assert 0 < r.ttl(keys.steps(jid)) <= keys.STEPS_TTL
    entry = next(iter(RetrySet(client)))
    entry.delete()
    assert read_steps(r, jid) is None


def test_a_dropped_job_leaves_no_records(worker, client, r):
    worker()
    steps_then_fail_no_retry.set(client=client).perform_async(1)
    wait_until(lambda: bodies(r) == ["a"], 10, message="the step")
    wait_until(lambda: no_records(r), 5, message="the records to go with the dropped job")


def test_records_stay_in_dead_and_a_retry_from_dead_resumes_past_them(worker, client, r):
    worker()
    jid = steps_then_dead.set(client=client).perform_async(1)
    wait_until(lambda: r.zcard("dead") == 1, 10, message="the dead entry")
    assert [s.name for s in read_steps(r, jid).steps] == ["a"]
    r.set("test:pass", 1)
    next(iter(DeadSet(client))).retry()
    wait_until(lambda: bodies(r) == ["a", "b"], 10, message="the retry from dead to resume")
    wait_until(lambda: no_records(r), 5, message="the records to leave with the job")


def test_a_cancelled_job_leaves_no_records(worker, client, r):
    worker()
    jid = steps_gated.set(client=client).perform_async(1)
    wait_until(lambda: bodies(r) == ["a"], 10, message="the step")
    assert read_steps(r, jid) is not None
    assert sidequest.cancel(jid, client)
    wait_until(lambda: no_records(r), 5, message="the records to go with the cancelled job")


def test_a_repush_of_the_jid_with_other_arguments_starts_fresh(worker, client, r):
    worker()
    jid = steps_then_fail.set(client=client).perform_async(1)
    wait_until(lambda: r.zcard("retry") == 1, 10, message="the retry")
    first = read_steps(r, jid)
    # removed behind sidequest's back (Sidekiq's Web UI): the records stay, for their TTL
    r.zremrangebyrank("retry", 0, -1)
    # the same jid pushed again (Sidekiq's client takes a jid) with other arguments
    payload = {"class": "StepsThenFail", "args": [2], "queue": "default", "jid": jid, "retry": 5,
               "created_at": 1.0, "enqueued_at": 1.0}
    r.lpush("queue:default", json.dumps(payload))
    wait_until(lambda: bodies(r) == ["a", "a"], 10, message="the new incarnation's step to run")
    wait_until(lambda: r.zcard("retry") == 1, 10, message="the retry")
    second = read_steps(r, jid)
    assert second.digest != first.digest
    assert [(s.name, s.attempts) for s in second.steps] == [("a", 1)]


@pytest.mark.parametrize(("kind", "message"), [
    ("twice", "step 'a' is used twice in one run of StepsMisused"),
    ("object", "the result of step 'obj'"),
    ("big", f"over the limit of {MAX_RESULT:,}"),
])
def test_a_misused_step_fails_the_job_with_one_line(worker, client, r, kind, message, caplog):
    worker()
    steps_misused.set(client=client).perform_async(kind)
    wait_until(lambda: message in caplog.text, 10, message="the job's failure")
    line = next(rec for rec in caplog.records if message in rec.getMessage())
    assert "StepError" in line.getMessage() or "StepError" in str(line.exc_info)


def test_step_outside_a_job_says_so():
    with pytest.raises(sidequest.StepError, match="inside a job"):
        sidequest.step("a", body, "a")


def test_an_operator_reset_runs_the_step_again(worker, client, r):
    worker()
    jid = steps_gated.set(client=client).perform_async(1)
    wait_until(lambda: bodies(r) == ["a"], 10, message="the step")
    assert reset_steps(r, jid, "nope") == 0
    assert reset_steps(r, jid, "a") == 1
    assert read_steps(r, jid).steps == []
    assert reset_steps(r, jid) == 0 or read_steps(r, jid) is None
    assert reset_steps(r, "0" * 24) == 0


def test_a_reset_while_the_step_runs_makes_its_end_write_nothing(worker, client, r):
    """docs/durable-steps.md: a reset between a step's start and its end makes the end write
    nothing, so the next run runs the step again (its end once re-created the record)."""
    worker()
    jid = StepsResetWhileRunning.set(client=client).perform_async(1)
    wait_until(lambda: bodies(r) == ["a"], 10, message="the step's body to start")
    assert reset_steps(r, jid, "a") == 1
    r.set("test:open", 1)
    wait_until(lambda: r.get("test:runs") == b"2", 10, message="the retry to pass the step")
    assert bodies(r) == ["a", "a"]


def test_an_end_of_an_attempt_that_is_no_longer_the_latest_writes_nothing(client, r):
    """A run taken for dead (its process paused past its heartbeat) whose job was recovered and
    began the step again: the later attempt's result is the recorded one, whichever ends last."""
    from sidequest.features.steps.lua import STEP_BEGIN, STEP_END

    key, digest = keys.steps("c" * 24), "d" * 16
    begin = [digest, "1.0", 60_000, "c" * 24, "K", "default"]
    assert r.eval(STEP_BEGIN, 1, key, "a", *begin)[:2] == [b"running", 1]
    assert r.eval(STEP_BEGIN, 1, key, "a", *begin)[:2] == [b"running", 2]
    assert r.eval(STEP_END, 1, key, "a", digest, "2.0", 60_000, "done", '"second"', 2) == 1
    assert r.eval(STEP_END, 1, key, "a", digest, "3.0", 60_000, "done", '"first"', 1) == 0
    assert r.eval(STEP_BEGIN, 1, key, "a", *begin) == [b"done", 2, b'"second"']


# -- a records key of the wrong type: that job's fault, never an outage -----------------------------
OUTAGE = "Redis is unavailable"


def wrong_type(r, jid: str) -> str:
    """Make job `jid`'s records key a string (set by hand): WRONGTYPE for the feature's HGET."""
    key = keys.steps(jid)
    r.delete(key)
    r.set(key, "not step records")
    return key


def fault_lines(caplog, jid: str, key: str) -> list[str]:
    return [m for m in caplog.messages if jid in m and key in m and "WRONGTYPE" in m]


def test_an_operator_delete_with_a_wrong_type_records_key_deletes_and_says_which_job(worker, client, r, caplog):
    worker()
    jid = steps_then_fail.set(client=client).perform_async(1)
    wait_until(lambda: r.zcard("retry") == 1, 10, message="the retry")
    key = wrong_type(r, jid)
    assert next(iter(RetrySet(client))).delete() is True
    assert r.zcard("retry") == 0  # the move stands
    assert len(fault_lines(caplog, jid, key)) == 1, caplog.text
    assert r.get(key) == b"not step records"  # left as it was, for the operator
    assert OUTAGE not in caplog.text


def test_a_drop_with_a_wrong_type_records_key_drops_the_job_and_the_worker_goes_on(worker, client, r, caplog):
    bad = plain_fail_no_retry.set(client=client).perform_async(1)
    key = wrong_type(r, bad)
    worker(concurrency=1)
    wait_until(lambda: fault_lines(caplog, bad, key), 10, message="the drop's fault to be logged")
    later = plain_fail_no_retry.set(client=client).perform_async(2)
    wait_until(lambda: bodies(r) == ["plain-1", "plain-2"], 10, message="a later job to run on the one processor")
    wait_until(lambda: not reserved(r), 5, message="nothing left reserved")
    assert r.llen("queue:default") == r.zcard("retry") == r.zcard("dead") == 0  # both dropped
    assert fault_lines(caplog, later, keys.steps(later)) == []
    assert len(fault_lines(caplog, bad, key)) == 1
    assert OUTAGE not in caplog.text


# -- a job without steps pays nothing ----------------------------------------------------------
def test_a_plain_job_has_no_step_operation_and_sends_no_step_command(worker, client, r, redis_url):
    from sidequest.worker.lifecycle import Setting, compose

    lifecycle = compose(Setting(client.config, client.redis, client.keys)).lifecycle
    plain = {"class": "PlainNoop", "args": [1], "queue": "default", "jid": "a" * 24}
    assert lifecycle.ops("taken", plain) == [0] and lifecycle.ops("finished", plain) == [0]
    seen: list[str] = []
    stop = threading.Event()

    def watch():
        import redis as redis_lib

        with redis_lib.Redis.from_url(redis_url).monitor() as m:
            for command in m.listen():
                seen.append(command["command"])
                if stop.is_set():
                    return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    wait_until(lambda: any("O" in c.get("flags", "") for c in r.client_list()), 5, message="the monitor")
    worker()
    for n in range(20):
        plain_noop.set(client=client).perform_async(n)
    wait_until(lambda: not r.llen("queue:default") and r.get("stat:processed") == b"20", 10,
               message="the plain jobs to run")
    stop.set()
    r.ping()
    watcher.join(5)
    assert any("RESERVE" in c or "EVALSHA" in c.upper() for c in seen)  # the monitor saw the jobs' calls
    assert not [c for c in seen if "sidequest:steps" in c or "HGET" in c.upper().split(" ")[0]]


# -- metrics -----------------------------------------------------------------------------------
def test_step_counts_reach_metrics_by_job_class(worker, client, r):
    from sidequest.web.prometheus import JobCounters, SidequestCollector

    worker()
    StepsThree.set(client=client).perform_async(9)
    wait_until(lambda: r.llen("test:done") == 1, 10, message="the job to end")
    collector = SidequestCollector(client, JobCounters())

    def steps() -> dict:
        found = {}
        for metric in collector.collect():
            if metric.name in ("sidequest_job_steps", "sidequest_job_step_seconds"):
                for sample in metric.samples:
                    found[(metric.name, tuple(sorted(sample.labels.items())))] = sample.value
        return found

    wait_until(lambda: steps().get(("sidequest_job_steps", (("job", "StepsThree"), ("outcome", "ran")))) == 4, 10,
               message="the heartbeat to write the step counts")
    found = steps()
    assert found[("sidequest_job_steps", (("job", "StepsThree"), ("outcome", "failed")))] == 1
    assert found[("sidequest_job_steps", (("job", "StepsThree"), ("outcome", "replayed")))] == 1  # charge, on the retry
    assert found[("sidequest_job_step_seconds", (("job", "StepsThree"),))] >= 0
    assert not any("receipt" in str(labels) for _, labels in found)  # never labelled by step name


# -- the docs' snippets run as written ---------------------------------------------------------
def test_the_durable_steps_snippets_run_as_written(worker, client, r):
    import re

    text = (ROOT / "docs" / "durable-steps.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 4  # the steps' two, the waits' two (run in tests/features/steps/test_waits.py)
    blocks = blocks[:2]
    scopes = [{} for _ in blocks]
    for block, scope in zip(blocks, scopes, strict=True):
        exec(compile(block, "docs/durable-steps.md", "exec"), scope)
    worker()
    checkout = scopes[0]["checkout"]
    checkout.set(client=client, retry=0).perform_async(42, 1250)
    scopes[1]["checkout_async"].set(client=client).perform_async(43)
    wait_until(lambda: int(r.get("stat:processed") or 0) == 2, 10, message="the snippets' jobs to run")
    assert [c["order"] for c in scopes[0]["CHARGES"].values()] == [42]
    assert int(r.get("stat:failed") or 0) == 0
