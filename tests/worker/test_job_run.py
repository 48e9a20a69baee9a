"""The job-run step (`worker.job_run`) is one: a sync job run by a processor thread, an async job
run by a processor thread, and an async job run by the asyncio runner's task on the loop end with
the same outcome applied (the same SETTLE move on Redis, the same lifecycle point observed, the
same hooks and counters).

The step runs on the test Redis; its units end through the core's SETTLE call (`Settler`), from
a reserved list the test fills as a fetch would."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest
import redis.asyncio

import sidequest
from sidequest.errors import Cancelled, JobFailed, OverLimit
from sidequest.jobs.registry import Registry
from sidequest.store.scripts import Scripts
from sidequest.worker.asyncio_runner import AsyncioRunner
from sidequest.worker.counters import ProcessCounters
from sidequest.worker.executor import ThreadExecutor
from sidequest.worker.fetch.unit import Settler, UnitOfWork
from sidequest.worker.job_run import JobRun, Runtime
from sidequest.worker.lifecycle import Lifecycle
from sidequest.worker.retry import Retrier

HOME = "sidequest:reserved:test-run:0"  # the reserved list the job is taken into
hooks: list[tuple[str, Any]] = []


def act(how: str) -> Any:
    """What both twins do: return, or end as `how` says."""
    if how == "raises":
        raise ValueError("boom")
    if how == "fails":
        raise JobFailed("not today")
    if how == "cancels":
        raise Cancelled("stop")
    if how == "snoozes":
        raise OverLimit("api", delay=30)
    return 42


class Twin(sidequest.Job, name="Twin", retry=3):
    def perform(self, how):
        return act(how)

    def after_succeeded(self, *args):
        hooks.append(("after_succeeded", args))

    def after_failed(self, exc, *args):
        hooks.append(("after_failed", (type(exc).__name__, *args)))


class AsyncTwin(Twin, name="AsyncTwin"):
    async def perform(self, how):
        await asyncio.sleep(0)  # a real suspension: the task yields to the loop once
        return act(how)


class Observer:
    """A lifecycle feature that records each point it is told of: only once an outcome was written."""

    name, lua, marks = "observer", "", frozenset()

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def ops(self, point, payload, outcome):
        return None

    def running(self, payload):
        return None

    def observe(self, point, payload, outcome):
        self.seen.append((point, outcome.kind if outcome is not None else ""))


class SettleFetch:
    """Ends a unit with the core's SETTLE call, as a reliable fetch does for one taken alone."""

    answered = True
    reserved = HOME

    def __init__(self, settler: Settler) -> None:
        self.settler = settler

    def apply(self, unit, outcome, ops):
        return self.settler.settle(unit, outcome, ops)

    def mark(self, unit, ops):
        return self.settler.mark(unit, ops)


@pytest.fixture
def parts(config, r, redis_url):
    """A runtime, a fetch on the test Redis, and an asyncio runner on the executor's loop."""
    observer = Observer()
    registry = Registry()
    for job in (Twin, AsyncTwin):
        registry.register(job)
    lifecycle = Lifecycle([observer])
    executor = ThreadExecutor()
    runtime = Runtime(config=config, registry=registry, counters=ProcessCounters(), retrier=Retrier(config),
                      executor=executor, identity="test-run", lifecycle=lifecycle)
    scripts = Scripts(r, lifecycle.lua)
    settler = Settler(config, r, scripts, time.time)
    on_loop = AsyncioRunner(runtime, config, "test-run", scripts, executor.loop, client=r,
                            connect=lambda: redis.asyncio.Redis.from_url(redis_url))
    hooks.clear()
    yield runtime, observer, SettleFetch(settler), on_loop
    on_loop.pool.shutdown()
    settler.lane.close()
    executor.close()


def taken(client, r, fetch, job, how: str, **options) -> tuple[UnitOfWork, dict[str, Any]]:
    """A job as a fetch hands it over: its bytes in the reserved list, a unit, its payload."""
    payload = client.build(job, [[how]], [None], time.time(), options)[0][0][0]
    raw = json.dumps(payload).encode()
    r.lpush(HOME, raw)
    return UnitOfWork("default", raw, fetch, HOME), json.loads(raw)


def run_on_a_thread(runtime, unit, payload) -> None:
    JobRun(runtime, threading.Event()).run(unit, payload)


def run_on_the_loop(on_loop, unit, payload) -> None:
    asyncio.run_coroutine_threadsafe(on_loop.perform(unit, payload), on_loop.rt.executor.loop()).result(10)


def applied(r, runtime, observer) -> dict[str, Any]:
    """What the step left: Redis's sets, the point observed, the hooks, the counters."""
    def entries(key):
        found = []
        for raw in r.zrange(key, 0, -1):
            entry = json.loads(raw)
            found.append({k: entry.get(k) for k in ("args", "retry_count", "error_class", "error_message",
                                                      "snoozed", "queue")})
        return found

    return {"reserved": r.llen(HOME), "queue": r.llen("queue:default"), "retry": entries("retry"),
            "dead": entries("dead"), "schedule": entries("schedule"), "seen": list(observer.seen),
            "hooks": list(hooks), "processed": runtime.counters.processed.reset(),
            "failed": runtime.counters.failed.reset()}


CASES = {
    "returns": {"seen": [("finished", "done")], "hooks": [("after_succeeded", ("returns",))]},
    "raises": {"seen": [("retried", "retry")], "retry": 1, "failed": 1},
    "fails": {"seen": [("dropped", "dropped")], "failed": 1},
    "cancels": {"seen": [("cancelled", "cancelled")]},
    "snoozes": {"seen": [("snoozed", "snoozed")], "schedule": 1},
}


@pytest.mark.parametrize("how", list(CASES))
def test_a_sync_job_and_an_async_job_end_with_the_same_outcome_on_both_runners(parts, client, r, how):
    runtime, observer, fetch, on_loop = parts
    results = []
    for job, run in ((Twin, lambda u, p: run_on_a_thread(runtime, u, p)),
                     (AsyncTwin, lambda u, p: run_on_a_thread(runtime, u, p)),
                     (AsyncTwin, lambda u, p: run_on_the_loop(on_loop, u, p))):
        r.flushdb()
        observer.seen.clear()
        hooks.clear()
        unit, payload = taken(client, r, fetch, job, how)
        run(unit, payload)
        assert unit.done
        results.append(applied(r, runtime, observer))
    assert results[0] == results[1] == results[2]
    result = results[0]
    expected = CASES[how]
    assert result["reserved"] == 0 and result["queue"] == 0 and result["processed"] == 1
    assert result["seen"] == expected["seen"]
    assert len(result["retry"]) == expected.get("retry", 0) and not result["dead"]
    assert len(result["schedule"]) == expected.get("schedule", 0)
    assert result["failed"] == expected.get("failed", 0)
    if how == "raises":
        assert result["retry"][0]["error_class"] == "ValueError" and result["retry"][0]["retry_count"] == 0
        assert result["hooks"] == [("after_failed", ("ValueError", "raises"))]
    if "hooks" in expected:
        assert result["hooks"] == expected["hooks"]


@pytest.mark.parametrize("refused", ["expired", "unknown"])
def test_a_job_refused_before_it_runs_ends_the_same_on_both_runners(parts, client, r, refused):
    """Past its deadline: dropped unstarted. A name this worker does not run: retried."""
    runtime, observer, fetch, on_loop = parts
    results = []
    for run in (lambda u, p: run_on_a_thread(runtime, u, p), lambda u, p: run_on_the_loop(on_loop, u, p)):
        r.flushdb()
        observer.seen.clear()
        unit, payload = taken(client, r, fetch, AsyncTwin, "returns")
        if refused == "expired":
            payload["expires_at"] = time.time() - 5
        else:
            payload["class"] = "Elsewhere::Mailer"
        run(unit, payload)
        results.append(applied(r, runtime, observer))
    assert results[0] == results[1]
    seen, retried = (("dropped", "dropped"), 0) if refused == "expired" else (("retried", "retry"), 1)
    assert results[0]["seen"] == [seen] and len(results[0]["retry"]) == retried and results[0]["reserved"] == 0
