"""Durable waits with real worker processes (`sidequest worker` subprocesses, the Worker helper of
test_reliability) and an event sent by another process: a waiting job holds no worker, so a
`kill -9` of the worker while it waits changes nothing (it stays parked in `schedule`, nothing is
reserved, nothing is recovered), and `send_event` from another process, sync or asyncio, resumes
it on a worker within 1 s, past its recorded step.

Pins docs/durable-steps.md's "Durable waits": no thread held, resumed within a second of the event.
"""

from __future__ import annotations

import subprocess

import pytest
from conftest import PYTHON, STARTUP, python_env, wait_until
from helpers import ran, reserved
from jobs_for_tests import async_waits_approval, waits_approval

import sidequest
from scenarios.test_reliability import worker_factory
from sidequest.features.steps import read_steps

SEND = """
import asyncio, sys, time
import sidequest
jid, how = sys.argv[1], sys.argv[2]
sent = time.time()
if how == "sync":
    woke = sidequest.send_event(jid, "approved", {"by": how})
else:
    woke = asyncio.run(sidequest.aio.send_event(jid, "approved", {"by": how}))
print(sent, woke)
"""


@pytest.fixture
def procs(redis_url, tmp_path):
    yield from worker_factory(redis_url, tmp_path)


@pytest.mark.parametrize(("runner", "how"), [("threads", "sync"), ("asyncio", "asyncio")])
def test_a_kill_while_waiting_changes_nothing_and_another_process_wakes_it_within_a_second(
        procs, client, r, redis_url, runner, how):
    job = async_waits_approval if runner == "asyncio" else waits_approval
    jid = job.set(client=client).perform_async(1)
    first = procs("--runner", runner, "--poll-interval", "5")  # send_event moves the job, not the poller
    wait_until(lambda: r.zcard("schedule") == 1, 2 * STARTUP, 0.02, "the job to wait")
    first.wait_registered(r)
    first.sigkill_settled(r)
    assert sidequest.status(jid, client=client) == "waiting"
    assert reserved(r) == [] and read_steps(r, jid).waiting.event == "approved"

    second = procs("--runner", runner, "--poll-interval", "5")
    second.wait_registered(r)
    out = subprocess.run([PYTHON, "-c", SEND, jid, how], env=python_env(REDIS_URL=redis_url),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    sent, woke = out.stdout.split()
    assert woke == "True"
    [(n, answer, pid, resumed)] = wait_until(lambda: ran(r, "waits-done"), 10, 0.01, "the job to resume")
    assert (n, answer, pid) == (1, {"by": how}, second.pid)
    assert resumed - float(sent) < 1.0
    assert [x[0] for x in ran(r, "waits-asked")] == [1]  # the step before the wait ran once, before the kill
    assert int(r.get("stat:failed") or 0) == 0
    wait_until(lambda: read_steps(r, jid) is None, 5, message="the records to leave with the job")
