"""Durable steps under `kill -9` of real worker processes (`sidequest worker` subprocesses, the
Worker helper of test_reliability): a step recorded before the kill never runs again, the step
the kill landed in runs once more with the same idempotency key, the job completes; and a job
that kills its worker every time goes to `dead` after `max_recoveries`, its records kept.

Pins docs/durable-steps.md's guarantees: at least once per step, and no more than once plus the
kills that landed inside it.
"""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import STARTUP, wait_until
from helpers import ran
from jobs_for_tests import async_steps_order, steps_order, steps_poison

from scenarios.test_reliability import worker_factory
from sidequest.api import DeadSet
from sidequest.features.steps import read_steps
from sidequest.worker.background.recovery import LIMIT_ERROR


@pytest.fixture
def procs(redis_url, tmp_path):
    yield from worker_factory(redis_url, tmp_path)


@pytest.mark.parametrize("runner", ["threads", "asyncio"])
def test_a_kill_inside_a_step_reruns_only_that_step_and_the_job_completes(procs, client, r, runner):
    job = async_steps_order if runner == "asyncio" else steps_order
    jid = job.set(client=client).perform_async(1, "receipt", "test:gate")
    first = procs("--runner", runner)
    wait_until(lambda: [x[1] for x in ran(r, "step-start")] == ["charge", "receipt"], 2 * STARTUP, 0.02,
               "the job to enter its second step")
    first.sigkill_settled(r)
    assert [s.state for s in read_steps(r, jid).steps] == ["done", "running"]

    r.set("test:gate", 1)
    procs("--runner", runner)  # recovers the dead worker's job once its heartbeat expires
    wait_until(lambda: ran(r, "steps-done"), 4 * STARTUP, 0.05, "the job to complete")

    starts = Counter(x[1] for x in ran(r, "step-start"))
    ends = Counter(x[1] for x in ran(r, "step-end"))
    assert starts == {"charge": 1, "receipt": 2, "crm": 1}  # one more run: the step the kill landed in
    assert ends == {"charge": 1, "receipt": 1, "crm": 1}
    [(_, _, keys)] = ran(r, "steps-done")
    attempts = {(x[1], x[3]) for x in ran(r, "step-start")}
    assert ("receipt", 2) in attempts
    assert len(set(keys)) == 3 and all(k.startswith(f"sq-{jid}-") for k in keys)
    wait_until(lambda: read_steps(r, jid) is None, 5, message="the records to leave with the job")


def test_a_job_that_kills_its_worker_every_time_is_dead_after_max_recoveries(procs, client, r):
    jid = steps_poison.set(client=client).perform_async(1)
    workers = [procs("--max-recoveries", "2")]
    wait_until(lambda: workers[-1].proc.poll() is not None, 2 * STARTUP, 0.05, "the pill to kill a worker")

    def dead_or_next() -> bool:
        if DeadSet(client).size:
            return True
        if workers[-1].proc.poll() is not None:  # killed again: the next worker recovers it
            workers.append(procs("--max-recoveries", "2"))
        return False

    wait_until(dead_or_next, 60, 0.1, "the pill to reach dead")
    [entry] = list(DeadSet(client))
    assert entry.item["error_class"] == LIMIT_ERROR and "died 3 times (limit 2)" in entry.item["error_message"]
    starts = Counter(x[1] for x in ran(r, "step-start"))
    assert starts == {"first": 1, "pill": 3}  # the recorded step never ran again
    steps = read_steps(r, jid)  # kept while the job is in dead: a retry from there resumes
    assert [(s.name, s.state) for s in steps.steps] == [("first", "done"), ("pill", "running")]
