"""Nothing sidequest writes lives forever by accident: each test runs a feature end to end, and
after it (and at chosen moments inside it) every key of the test's database must either have a
TTL or match a pattern of `lifetimes.KEPT`, the keys meant to stay (each with its reason there)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase

import pytest
from conftest import wait_until
from helpers import ran, reserved
from jobs_for_tests import FastBoom, Tick, boom, compute, cooperative, echo, noop, unique_work

import sidequest
from sidequest import Task
from sidequest.api import DeadSet, Queue, clear_group_limits, set_group_limits
from sidequest.features.limiter import bucket, concurrent, leaky, points, window
from sidequest.features.periodic import PeriodicRegistry, PeriodicScheduler, status
from sidequest.store import keys, lanes, lifetimes
from sidequest.worker.background.heartbeat import STATS_TTL

# keys the tests themselves write (not sidequest's): jobs_for_tests.record's lists, gates
TEST_KEYS = {"test:*": "the tests' own records and gates"}


def unexpiring(r) -> list[str]:
    """Keys with no TTL that no pattern of lifetimes.KEPT (or TEST_KEYS) allows."""
    allowed = [*lifetimes.KEPT, *TEST_KEYS]
    names = (key.decode() for key in r.scan_iter(count=1000))
    return sorted(name for name in names
                  if r.ttl(name) == -1 and not any(fnmatchcase(name, pattern) for pattern in allowed))


@pytest.fixture(autouse=True)
def keyspace(r):
    """After the test (and its workers' stop): no key lives forever unless it is meant to."""
    yield
    assert unexpiring(r) == []


def ttls(r, pattern: str) -> dict[str, int]:
    return {key.decode(): r.ttl(key) for key in r.scan_iter(pattern)}


def test_the_kept_keys_are_documented_with_a_reason():
    assert all(reason.strip() for reason in lifetimes.KEPT.values())
    for name in ("queues", "queue:default", "schedule", "retry", "dead", "processes", "stat:processed",
                 "stat:failed", keys.reserved("host:1:ab", 3), keys.RESERVATIONS, keys.PAUSED):
        assert any(fnmatchcase(name, pattern) for pattern in lifetimes.KEPT), name
    for name in (keys.stat_daily("processed", "2026-01-01"), keys.task("t"), keys.periodic("p"), keys.PERIODIC,
                 keys.metrics("202601010000"), keys.unique("d"), keys.status("j"), "host:1:ab"):
        assert not any(fnmatchcase(name, pattern) for pattern in lifetimes.KEPT), name


def test_jobs_retries_dead_and_a_worker_start_and_stop(start, client, r):
    launcher = start()
    client.push(echo, ["ran"])
    client.push(echo, ["later"], in_=600)
    client.push(boom, ["to the dead set"], retry=0)
    client.push(FastBoom, ["retried"])
    client.push(boom, ["waits in retry"])
    wait_until(lambda: ran(r, "echo") and r.zcard("dead") == 2 and r.zcard("retry") == 1, 15,
               message="a run, a retry and two deaths")
    Queue("default", client=client).pause()
    assert unexpiring(r) == []  # while the worker runs too
    launcher.stop()
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    for name in ("processed", "failed"):  # Sidekiq's launcher keeps the daily counts five years
        assert STATS_TTL - 60 < r.ttl(keys.stat_daily(name, day)) <= STATS_TTL == 5 * 365 * 24 * 3600
    assert any(r.scan_iter(keys.metrics("*")))  # the minute the jobs ran in (the test may cross one)
    assert not reserved(r)


def test_an_unsealed_task_expires_after_task_ttl(start, client, r):
    task = Task.create("never sealed", client=client)
    task.add(noop, 1)
    assert 0.9 * client.config.task_ttl < min(ttls(r, "sidequest:task:*").values())
    start(task_ttl=500)
    wait_until(lambda: task.status()["counts"]["finished"] == 1, message="the job to finish")
    assert not task.status()["done"]
    # the `finished` index was created by the job's last transition: it expires with the others
    assert set(ttls(r, "sidequest:task:*")) == {keys.task(task.id), keys.task_events(task.id),
                                                 keys.task_order(task.id), keys.task_index(task.id, "finished")}
    assert all(490 < ttl <= client.config.task_ttl for ttl in ttls(r, "sidequest:task:*").values())


def test_a_task_reopened_by_an_operator_after_completing_keeps_expiring(start, client, r):
    task = Task.create("dies, then retried by hand", client=client, on_complete=echo)
    jid = task.add(boom.set(retry=0), "once")
    task.seal()
    start(task_retention=300)
    wait_until(lambda: task.status()["done"] and ran(r, "echo") == [[task.id]], message="completion")
    assert DeadSet(client=client).find_job(jid).retry()  # `enqueued` index, emptied, comes back
    assert unexpiring(r) == []
    wait_until(lambda: r.zcard("dead") == 1 and task.status()["counts"]["error"] == 1
               and r.exists(keys.task_index(task.id, "error")), message="the job to die again")
    assert unexpiring(r) == []


def test_a_task_job_waiting_for_a_retry(start, client, r):
    task = Task.create("waiting", client=client)
    task.add(boom, "retries in a while")
    launcher = start()
    wait_until(lambda: r.zcard("retry") == 1, message="a retry to be scheduled")
    launcher.stop()
    assert task.events()[0]["status"] == "enqueued"
    assert all(ttl > 0 for ttl in ttls(r, "sidequest:task:*").values())


def test_unique_claims(start, client, r):
    client.push(unique_work, [1])
    start()
    wait_until(lambda: ran(r, "unique-done"), message="the unique job to run")
    # its claim goes with its acknowledgement, a moment after the job's own record: gone first,
    # so the one claim left is the queued job's (the read raced that release: TTL -2)
    wait_until(lambda: not list(r.scan_iter("sidequest:unique:*")), message="the finished job's claim to go")
    client.push(unique_work, [2], queue="nobody-works-it")
    assert 0 < r.ttl(next(iter(r.scan_iter("sidequest:unique:*")))) <= 60


def test_debounce_and_throttle_records(client, r):
    client.push("Echo", [1], debounce=30)
    client.push("Echo", [1], debounce=30)  # replaced: counted
    client.push("Echo", [2], throttle=45)
    client.push("Echo", [2], throttle=45)  # dropped: counted
    assert r.ttl(next(iter(r.scan_iter("sidequest:debounce:*")))) == -1  # lives as its run (in KEPT)
    assert 0 < r.ttl(next(iter(r.scan_iter("sidequest:throttle:*")))) <= 45
    counts = [keys.DEFAULT.flow(counted, "default") for counted in ("replaced", "dropped")]
    assert [r.ttl(key) for key in counts] == [-1, -1]  # totals, in KEPT


def test_limiters(client, r):
    with concurrent("api", 2, client=client), window("geocode", 5, per=10, client=client):
        assert unexpiring(r) == []
        assert r.ttl(keys.limit_concurrent("api")) > 0 and r.ttl(keys.limit_window("geocode")) > 0
    with bucket("b", 5, "minute", client=client), leaky("l", 5, 10, client=client), \
            points("p", 100, 10, client=client).within_limit(estimate=50):
        assert unexpiring(r) == []
    assert 0 < r.pttl(keys.limit_bucket("b")) <= 61_000  # the rest of the minute, and a second
    assert 0 < r.pttl(keys.limit_leaky("l")) <= 3_000  # 1 of 5 drains in 2 s, and a second
    assert 0 < r.pttl(keys.limit_points("p")) <= 6_000  # 50 of 100 drain in 5 s, and a second


def test_cancellation_of_a_running_job(start, client, r):
    start()
    jid = client.push(cooperative, ["stop me"])
    wait_until(lambda: ran(r, "coop-start"), message="the job to start")
    assert sidequest.cancel(jid, client=client)
    wait_until(lambda: ran(r, "coop-cancelled"), message="the job to stop")
    assert r.ttl(keys.cancel_flag(jid)) > 0


def test_results_and_status_records(start, client, r):
    jid = client.push(compute, [3])
    waiting = client.push(compute, [4], queue="nobody-works-it")
    start()
    assert sidequest.result(jid, 10, client=client)["double"] == 6
    assert sidequest.status(waiting, client=client) == "queued"
    assert r.ttl(keys.status(jid)) > 0 and r.ttl(keys.status_notify(jid)) > 0


def test_periodic_entries(client, r):
    registry = PeriodicRegistry()
    sidequest.periodic(job=Tick, every=timedelta(seconds=1), args=["x"], registry=registry)
    scheduler = PeriodicScheduler(client, registry.entries)
    now = int(time.time()) + 0.5  # mid-second: a second later exactly one more whole second is due
    scheduler.run_due(now)
    assert scheduler.run_due(now + 1.01) == 1
    assert status(client, registry=PeriodicRegistry())[0].last_run is not None
    assert r.ttl(keys.PERIODIC) > 0 and all(ttl > 0 for ttl in ttls(r, "sidequest:periodic:*").values())


def test_lanes_leave_nothing_behind_but_a_paused_group(start, client, r):
    for n in range(40):
        client.push("Echo", [n], group=f"t{n % 3}", group_concurrency=2, group_rate=(100, 60))
    client.push("Echo", ["urgent"], priority=9)
    lane = lanes.LaneKeys(keys.DEFAULT.lanes("default"))
    r.sadd(lane.paused, "nobody")
    set_group_limits("default", "t1", weight=3, client=client)  # an operator's override: kept until removed
    start()

    def kept() -> list[str]:  # the lanes' keys without a TTL (the rate windows, `head` and streaks expire)
        return sorted(key for key, ttl in ttls(r, "sidequest:lanes:*").items() if ttl == -1)

    wait_until(lambda: len(ran(r, "echo")) == 41 and kept() == sorted([lane.paused, lane.limits]),
               message="the lanes to empty")
    assert r.hgetall(lane.limits) == {b"t1": b";- - - 3"}  # the override alone: its jobs' limits went with them
    clear_group_limits("default", "t1", client=client)
    assert kept() == [lane.paused]
    assert all(0 < ttl <= 3600 for ttl in ttls(r, "sidequest:lanes:*").values() if ttl != -1)
