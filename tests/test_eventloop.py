"""The asyncio runner (`eventloop`): `async def` jobs fetched, run and acknowledged on one loop.

In-process workers on the test Redis; the kill -9 test of the runner is test_reliability's
(parametrized over both runners)."""

from __future__ import annotations

import json
import time

import pytest
from conftest import wait_until
from helpers import ran, reserved
from jobs_for_tests import async_boom, async_echo, async_held, async_slow, echo, stamp

import sidequest
from sidequest import Config
from sidequest.eventloop import LoopCapsule
from sidequest.middleware import Chain
from sidequest.registry import Registry


@pytest.fixture
def config(config):
    """Without the process-wide links another test may have left (Sentry's, OpenTelemetry's): with
    server middleware, async jobs take the thread pool (see the last test)."""
    return config.replace(server_middleware=Chain())


def only(*jobs) -> Registry:
    registry = Registry()
    for job in jobs:
        registry.register(job.job_class)
    return registry


def capsule_of(launcher) -> LoopCapsule:
    assert launcher.runner == "asyncio"
    assert isinstance(launcher.manager, LoopCapsule)
    return launcher.manager


def test_auto_runs_an_all_async_worker_on_the_loop_and_any_other_on_threads(start, r):
    on_loop = start(registry=only(async_echo, async_held), async_jobs=50)
    threads = start(registry=only(async_echo, echo))
    forced = start(registry=only(async_echo), runner="threads")
    assert (on_loop.runner, threads.runner, forced.runner) == ("asyncio", "threads", "threads")
    # Sidekiq's process record shows the jobs it can run at once: 50 on the loop
    info = json.loads(r.hget(on_loop.identity, "info"))
    assert info["concurrency"] == 50
    assert json.loads(r.hget(threads.identity, "info"))["concurrency"] == 4


def test_asyncio_is_refused_with_basic_fetch(config):
    from sidequest.launcher import Launcher

    with pytest.raises(sidequest.ConfigError, match="runner asyncio needs reliable fetch"):
        Launcher(config.replace(runner="asyncio", fetch="basic"))


def test_a_runner_that_is_not_one_is_refused_in_one_line():
    with pytest.raises(sidequest.ConfigError, match="runner must be one of auto, threads, asyncio; got 'fibers'"):
        Config(runner="fibers")


def test_hundreds_of_jobs_run_at_once_on_one_thread(start, client, r):
    """300 jobs in flight together, all on the loop's thread, no processor thread in sight.
    Issue 28 item 17: under load this timed out waiting for the count; the jobs made blocking
    round trips on the loop (so the runner's connect timed out on it) and 300 polls a second
    each. Now the jobs never block the loop, and the waits for the acknowledgements and the
    heartbeat's count are start-up-like deadlines: a count reached late is still the count."""
    start(runner="asyncio", async_jobs=300)
    client.push_bulk(async_held, [[n, "test:gate"] for n in range(300)])
    wait_until(lambda: len(ran(r, "held-start")) == 300, 30, 0.05, "300 jobs to be running at once")
    assert len({ident for _, ident in ran(r, "held-start")}) == 1  # one thread: the event loop's
    assert not ran(r, "held-done")
    r.set("test:gate", 1)
    wait_until(lambda: len(ran(r, "held-done")) == 300, 30, 0.05, "every job to end")
    wait_until(lambda: not reserved(r), 30, 0.01, "every success to be acknowledged")
    wait_until(lambda: r.get("stat:processed") == b"300", 30, 0.02, "the heartbeat to count 300 processed")
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 0


def test_no_more_than_async_jobs_run_at_once(start, client, r):
    start(runner="asyncio", async_jobs=7)
    client.push_bulk(async_held, [[n, "test:gate"] for n in range(20)])
    wait_until(lambda: len(ran(r, "held-start")) == 7, 10, 0.02, "seven jobs to start")
    # the fetch took exactly the free places, and takes again only when a job ends: the other 13
    # wait in their queue, and only the 7 running are reserved
    assert len(reserved(r)) == 7 and r.llen("queue:default") == 13 and len(ran(r, "held-start")) == 7
    r.set("test:gate", 1)
    wait_until(lambda: len(ran(r, "held-done")) == 20, 10, 0.02, "all twenty to run")


def test_failures_time_limits_sync_jobs_and_bad_payloads_take_the_designed_paths(start, client, r):
    launcher = start(runner="asyncio")
    client.push(async_boom, ["no luck"])
    client.push(async_slow)
    client.push(echo, ["from a thread"])  # a sync job: run on the runner's thread pool
    r.lpush("queue:default", b"{not json")
    client.push("NoSuchJob", [1])

    def retry_classes():
        return sorted(json.loads(raw)["error_class"] for raw in r.zrange("retry", 0, -1))
    wait_until(lambda: len(retry_classes()) == 3, 10, 0.02, "three failures in retry")
    assert retry_classes() == ["ValueError", "sidequest.errors.JobTimeoutError", "sidequest.errors.UnknownJobError"]
    assert ran(r, "slow-cancelled") == [[]]  # cancelled for real at its limit
    assert ran(r, "echo") == [["from a thread"]]
    wait_until(lambda: r.zcard("dead") == 1, 5, 0.02, "the bad payload in dead")
    dead = json.loads(r.zrange("dead", 0, -1)[0])
    assert dead["class"] == "sidequest.InvalidPayload" and dead["args"] == ["{not json"]
    wait_until(lambda: not reserved(r), 5, 0.01, "nothing left reserved")
    assert launcher.counters.failed.value >= 4


def test_an_idle_worker_starts_a_pushed_job_within_a_round_trip(start, client, r):
    """Idle, it waits in BLMOVE on the queue, not in a poll: each job starts well within the
    blocking timeout (1 s here) of its push."""
    start(runner="asyncio", registry=only(async_echo, stamp), fetch_timeout=5)
    def blocked() -> bool:  # the worker waits in BLMOVE on the queue
        return any(c.get("cmd") == "blmove" for c in r.client_list())

    for label in range(5):
        wait_until(blocked, 5, 0.005, "the idle worker to wait in BLMOVE")
        sent = time.time()
        client.push(async_echo, [label])
        wait_until(lambda label=label: [label, "sidequest-asyncio"] in ran(r, "async"), 5, 0.005, "the job")
        assert time.time() - sent < 0.5
    wait_until(lambda: not reserved(r), 5, 0.01, "every success to be acknowledged")


def test_a_stop_puts_back_what_is_still_running_at_the_deadline_and_cancels_it(start, client, r):
    launcher = start(runner="asyncio", timeout=0.5)
    jid = client.push(async_held, [1, "test:never"])
    wait_until(lambda: ran(r, "held-start"), 10, 0.02, "the job to start")
    launcher.stop()
    assert ran(r, "held-cancelled") == [[1]]
    [raw] = r.lrange("queue:default", 0, -1)
    assert json.loads(raw)["jid"] == jid and not reserved(r)


def test_a_job_in_the_batch_list_whose_reply_was_lost_is_run(start, client, r):
    """A call whose reply is lost may have moved a job into the batch list: the runner reads the
    list back and runs what it did not know of (as the threads' hub does)."""
    launcher = start(runner="asyncio")
    capsule = capsule_of(launcher)
    wait_until(lambda: r.sismember("sidequest:reservations", capsule.batch), 5, 0.01, "the batch list registered")
    payload = client.build(async_echo, [["adopted"]], [None], time.time(), {})[0][0][0]
    r.lpush(capsule.batch, json.dumps(payload))
    capsule.lost_reply()
    wait_until(lambda: ran(r, "async") == [["adopted", "sidequest-asyncio"]], 10, 0.02, "the adopted job to run")
    wait_until(lambda: not reserved(r), 5, 0.01, "its success acknowledged")


def test_server_middleware_wraps_async_jobs_through_the_thread_path(start, client, r):
    seen = []

    def link(job, payload, queue, call_next):
        seen.append(payload["class"])
        return call_next()

    config_changes = {"runner": "asyncio"}
    launcher = start(**config_changes)
    launcher.config.server_middleware.add(link)
    client.push(async_echo, ["wrapped"])
    wait_until(lambda: ran(r, "async"), 10, 0.02, "the job")
    assert seen == ["AsyncEcho"]


def test_an_async_job_uses_the_workers_redis_through_sidequest_aio_redis(start, client, r, monkeypatch):
    """`sidequest.aio.redis()`: redis.asyncio's methods and replies (reply callbacks included),
    on the worker's Redis, from a hundred jobs at once (no pool cap)."""
    from jobs_for_tests import async_count

    monkeypatch.setattr(sidequest.client, "_default", client)  # what `sidequest worker` sets up
    start(runner="asyncio")
    client.push_bulk(async_count, [["test:count"]] * 150)
    wait_until(lambda: len(ran(r, "counted")) == 150, 10, 0.02, "every job to count")
    assert sorted(n for n, _, _ in ran(r, "counted")) == list(range(1, 151))
    assert all(seen == {"b'seen'": "b'1'"} for _, seen, _ in ran(r, "counted"))  # bytes, as json.dumps shows them
    assert {ok for _, _, ok in ran(r, "counted")} == {True}


def test_sidequest_aio_redis_outside_a_worker_is_the_default_clients(client, monkeypatch):
    import asyncio

    monkeypatch.setattr(sidequest.client, "_default", client)

    async def use() -> list:
        own = sidequest.aio.redis()
        assert own is sidequest.aio.redis()  # one per loop
        async with own.pipeline(transaction=True) as pipe:  # redis-py's own pipeline
            pipe.incr("test:n")
            pipe.incr("test:n")
            counted = await pipe.execute()
        return [counted, await own.get("test:n"), await own.exists("nope"), await own.lpush("test:l", "a", "b")]

    assert asyncio.run(use()) == [[1, 2], b"2", 0, 2]
