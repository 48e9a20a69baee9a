"""`sidequest.current_job()` (worker/current.py): what a running job learns of itself, from a
function job, a Job class, an `async def` job and timed ones (a sync one runs on a thread of its own), on
both runners; None outside a job."""

from __future__ import annotations

import dataclasses
import threading

import pytest
from conftest import wait_until
from helpers import ran
from jobs_for_tests import record

import sidequest
from sidequest.jobs.middleware import Chain


def _seen(label):
    job = sidequest.current_job()
    record("seen", label, job.jid, job.name, job.queue, job.retry_count, job.args, job.kwargs,
           job.payload["jid"], threading.current_thread().name)
    if job.retry_count == 0:
        raise sidequest.Retry(in_=0.05)  # the second run sees retry_count 1


@sidequest.job(name="WhoFn", queue="who")
def who_fn(label, n):
    _seen(label)


class WhoClass(sidequest.Job, name="WhoClass", queue="who"):
    def perform(self, label, n):
        _seen(label)


@sidequest.job(name="WhoAsync", queue="who")
async def who_async(label, n):
    _seen(label)


@sidequest.job(name="WhoTimed", queue="who", timeout=30)
def who_timed(label, n):
    _seen(label)


@sidequest.job(name="WhoAsyncTimed", queue="who", timeout=30)
async def who_async_timed(label, n):
    _seen(label)


@pytest.fixture
def config(config):
    return config.replace(server_middleware=Chain(), queues=["who"])


def test_outside_a_job_there_is_none():
    assert sidequest.current_job() is None


def test_it_is_a_frozen_dataclass():
    fields = [f.name for f in dataclasses.fields(sidequest.CurrentJob)]
    assert fields == ["jid", "name", "queue", "retry_count", "args", "kwargs", "payload"]
    job = sidequest.CurrentJob("j", "X", "q", 0, [], {}, {})
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.jid = "k"  # type: ignore[misc]


@pytest.mark.parametrize("runner", ["threads", "asyncio"])
def test_every_kind_of_job_sees_itself(start, client, r, runner):
    start(runner=runner)
    jobs = {"fn": who_fn, "class": WhoClass, "async": who_async, "timed": who_timed, "async-timed": who_async_timed}
    jids = {label: client.push(job, [label, 7]) for label, job in jobs.items()}
    wait_until(lambda: len(ran(r, "seen")) == 10, message="each job run twice (a Retry, then the retry)")
    seen = ran(r, "seen")
    for label, jid in jids.items():
        runs = [s for s in seen if s[0] == label]
        name = jobs[label].name
        assert [s[1:8] for s in runs] == [[jid, name, "who", count, [label, 7], {}, jid] for count in (0, 1)], label
    timed_threads = {s[8] for s in seen if s[0] == "timed"}
    assert all(t.startswith("sidequest-job-") for t in timed_threads), timed_threads  # its own thread


def test_the_inline_testing_mode_sets_it_too():
    import sidequest.testing

    seen = []

    @sidequest.job(name="WhoInline")
    def who_inline(n):
        job = sidequest.current_job()
        seen.append((job.name, job.jid, job.args, job.retry_count))

    with sidequest.testing.inline():
        jid = who_inline.perform_async(3)
    assert seen == [("WhoInline", jid, [3], 0)]
    assert sidequest.current_job() is None
