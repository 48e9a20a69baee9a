"""How a job's `perform` is called (`executor`, and the asyncio runner's own call): keyword
arguments pushed with a job reach it, and its hooks, on both runners, for sync, `async def` and
timed jobs and Job classes; a time limit is one rule on every path a job is run by: only the
limit running out is a time-out, a `TimeoutError` the job's own code raises is an ordinary
exception of the job. In-process workers on the test Redis."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import wait_until
from helpers import ran
from jobs_for_tests import KwClass, _wait_push, kw_async, kw_fn_hooks, kw_sync, kw_timed, kw_timed_async, record

import sidequest
from sidequest.jobs.middleware import Chain


@pytest.fixture
def config(config):
    """Without process-wide server middleware another test may have left: with it, the asyncio
    runner takes every job through its thread pool, and its loop path would go untested."""
    return config.replace(server_middleware=Chain())


@pytest.mark.parametrize("runner", ["threads", "asyncio"])
def test_keyword_arguments_reach_every_kind_of_job(start, client, r, runner):
    start(runner=runner)
    kw_sync.set(client=client).perform_async(1, template="reset")
    kw_async.set(client=client).perform_async(2, template="reset", extra={"a": [1]})
    kw_timed.set(client=client).perform_async(3, extra=None, template="reset")
    kw_timed_async.set(client=client).perform_async(4, template="reset")
    KwClass.set(client=client).perform_async(5, template="reset", locale="fr")
    kw_sync.set(client=client).perform_async(6)  # none: the defaults
    wait_until(lambda: len(ran(r, "kw")) == 6, message="the six jobs to run")
    assert sorted(ran(r, "kw"), key=lambda row: row[1]) == [
        ["sync", 1, "reset", None], ["async", 2, "reset", {"a": [1]}], ["timed", 3, "reset", None],
        ["timed-async", 4, "reset", None], ["class", 5, "reset", {"locale": "fr"}], ["sync", 6, "welcome", None]]


@pytest.mark.parametrize("runner", ["threads", "asyncio"])
def test_hooks_get_the_keyword_arguments_too(start, client, r, runner):
    start(runner=runner)
    KwClass.set(client=client).perform_async(1, template="t")
    KwClass.set(client=client).perform_async(2, fail=True)
    kw_fn_hooks.set(client=client).perform_async(3, template="f")
    wait_until(lambda: ran(r, "kw-after-ok") and ran(r, "kw-after-fail") and ran(r, "kw-fn-after-ok"),
               message="the three hooks")
    assert ran(r, "kw-after-ok") == [[[1], {"template": "t"}]]
    assert ran(r, "kw-after-fail") == [["ValueError", [2], {"fail": True}]]
    assert ran(r, "kw-fn-after-ok") == [[[3], {"template": "f"}]]


# -- time limits ---------------------------------------------------------------------------------

OWN = "the upstream took too long"  # the job's own TimeoutError's message
GATE = "test:time-limit:gate"  # the sync overrun job's thread waits for a push here


def _own_timeout(label: str) -> None:
    """First run: the job's own TimeoutError. The retry: records what its payload says of it."""
    payload = sidequest.current_job().payload
    if "retry_count" not in payload:
        record("own-first", label)
        raise TimeoutError(OWN)
    record("own-retried", label, payload["retry_count"], payload["error_class"], payload["error_message"])


def _soon(count, exc):
    return 0.01  # retried at the poller's next pass (0 would mean the default back-off)


@sidequest.job(name="OwnTimeoutAsync", queue="limits", retry_on=(TimeoutError,), retry_in=_soon)
async def own_timeout_async(label):
    await asyncio.sleep(0)  # a real suspension before its own TimeoutError
    _own_timeout(label)


@sidequest.job(name="OwnTimeoutAsyncLimited", queue="limits", retry_on=(TimeoutError,), retry_in=_soon, timeout=30)
async def own_timeout_async_limited(label):
    await asyncio.sleep(0)  # a real suspension before its own TimeoutError
    _own_timeout(label)


@sidequest.job(name="OwnTimeoutSync", queue="limits", retry_on=(TimeoutError,), retry_in=_soon)
def own_timeout_sync(label):
    _own_timeout(label)


@sidequest.job(name="OwnTimeoutSyncLimited", queue="limits", retry_on=(TimeoutError,), retry_in=_soon, timeout=30)
def own_timeout_sync_limited(label):
    _own_timeout(label)


@sidequest.job(name="OverrunAsync", queue="limits", timeout=0.2, retry_in=lambda count, exc: 600)
async def overrun_async():
    try:
        await asyncio.sleep(30)  # far past its 0.2 s limit: cancelled long before
    except asyncio.CancelledError:
        record("overrun-cancelled")
        raise


@sidequest.job(name="OverrunSync", queue="limits", timeout=0.2, retry_in=lambda count, exc: 600)
def overrun_sync():
    _wait_push(GATE, 30)  # its abandoned thread ends when the test lets it


class PassThrough:
    def __call__(self, job, payload, queue, call_next):
        return call_next()


# Issue 37 item 5: on the threads runner (and on the asyncio runner with server middleware, whose
# async jobs take the thread pool) an `async def` job's own TimeoutError was taken for the limit:
# with no limit it went to dead as `TypeError: unsupported format string passed to
# NoneType.__format__`, with one it was reported as the limit.
RUNNERS = ["threads", "asyncio", "asyncio+middleware"]


@pytest.fixture
def run_on(start, config):
    """Start a worker of the runner named by the test's parameter (see RUNNERS)."""
    def start_on(runner: str):
        middleware = Chain()
        if runner == "asyncio+middleware":
            middleware.add(PassThrough)
        return start(runner=runner.split("+")[0], server_middleware=middleware, queues=["limits"])
    return start_on


@pytest.fixture
def release(r):
    yield
    r.rpush(GATE, 1)  # the abandoned thread of an OverrunSync job, if one waits


@pytest.mark.parametrize("runner", RUNNERS)
def test_an_async_jobs_own_timeout_error_is_retried_per_retry_on_with_or_without_a_limit(run_on, client, r, runner):
    run_on(runner)
    own_timeouts_are_retried(client, r, {"async": own_timeout_async, "async-limited": own_timeout_async_limited})


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_sync_jobs_own_timeout_error_is_retried_per_retry_on_with_or_without_a_limit(run_on, client, r, runner):
    run_on(runner)
    own_timeouts_are_retried(client, r, {"sync": own_timeout_sync, "sync-limited": own_timeout_sync_limited})


def own_timeouts_are_retried(client, r, jobs) -> None:
    """Each job fails once with its own TimeoutError, which `retry_on` names: it is retried (not
    dead as a time-out), and its retry's payload reports the job's own error."""
    for label, job in jobs.items():
        client.push(job, [label])
    wait_until(lambda: len(ran(r, "own-retried")) == len(jobs) or r.zcard("dead"), 15, 0.02, "the retries to run")
    assert [json.loads(raw)["error_message"] for raw in r.zrange("dead", 0, -1)] == []  # none taken for a limit
    assert sorted(ran(r, "own-retried")) == [[label, 0, "TimeoutError", OWN] for label in sorted(jobs)]
    assert sorted(label for [label] in ran(r, "own-first")) == sorted(jobs)
    assert r.zcard("retry") == 0


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_job_that_overruns_its_limit_is_still_reported_as_a_time_out(run_on, client, r, runner, release):
    run_on(runner)
    client.push(overrun_async)
    client.push(overrun_sync)
    wait_until(lambda: r.zcard("retry") == 2, 15, 0.02, "both jobs in retry")
    failures = sorted((entry["class"], entry["error_class"], entry["error_message"])
                      for entry in map(json.loads, r.zrange("retry", 0, -1)))
    assert failures == [
        ("OverrunAsync", "sidequest.errors.JobTimeoutError", "job ran longer than its 0.2 s time limit (cancelled)"),
        ("OverrunSync", "sidequest.errors.JobTimeoutError",
         "job ran longer than its 0.2 s time limit; its thread was abandoned")]
    wait_until(lambda: ran(r, "overrun-cancelled"), 5, 0.02, "the async job to be cancelled")
    assert r.zcard("dead") == 0
