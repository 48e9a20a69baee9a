"""The threads that keep reliable fetch's promises in the background: the acknowledger (both
runners') and orphan recovery's lock (issue 28 item 9)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from conftest import wait_until, wait_until_async
from jobs_for_tests import echo

from sidequest.client import async_client as aio
from sidequest.store import keys
from sidequest.store.direct import AsyncDirectPath
from sidequest.store.outage import RedisOutage
from sidequest.store.scripts import Scripts
from sidequest.worker.background.recovery import Recovery
from sidequest.worker.fetch.batch import BatchList
from sidequest.worker.fetch.fetchers import ReliableFetch
from sidequest.worker.fetch.loop_fetch import LoopFetch
from sidequest.worker.outcome import Outcome

IDENTITY = "host:2:ack"


class FailingOnce:
    """A clock that raises once, at its first call on a thread named `thread` after `arm()`:
    a fault outside any job (a bug) in the middle of an acknowledgement."""

    def __init__(self, thread: str | None = None) -> None:
        self.thread = thread
        self.armed = False
        self.raised = threading.Event()

    def arm(self) -> None:
        self.armed = True

    def __call__(self) -> float:
        if self.armed and (self.thread is None or threading.current_thread().name == self.thread):
            self.armed = False
            self.raised.set()
            raise RuntimeError("a bug in the acknowledgement")
        return time.time()


def test_the_acknowledger_thread_survives_an_unexpected_exception(config, r, client, caplog):
    """Issue 28 item 9: an exception other than a Redis error ended the acknowledger thread
    silently; every later success then waited for some processor's next fetch to carry it."""
    clock = FailingOnce("sidequest-acknowledger")
    scripts = Scripts(r)
    hub = BatchList(config, IDENTITY, scripts, client=r, clock=clock)
    fetch = ReliableFetch(config, r, IDENTITY, scripts, slot=0, hub=hub)
    client.push_bulk(echo, [[1], [2]])
    units = [fetch.retrieve_work(), fetch.retrieve_work()]
    assert all(units) and r.llen(hub.reserved) == 2
    clock.arm()
    with caplog.at_level(logging.WARNING, logger="sidequest.worker.fetch.acknowledger"):
        units[0].apply(Outcome.done(), [0])  # no processor fetches again: the acknowledger sends it
        assert clock.raised.wait(5)
        wait_until(lambda: r.llen(hub.reserved) == 1, 5, 0.01, "the success to be sent again")
    assert hub._ack_thread.is_alive()
    units[1].apply(Outcome.done(), [0])  # and it goes on acknowledging
    wait_until(lambda: r.llen(hub.reserved) == 0, 5, 0.01, "the next success to be acknowledged")
    logged = [rec for rec in caplog.records if "RuntimeError" in rec.getMessage()]
    assert len(logged) == 1 and "a bug in the acknowledgement" in logged[0].getMessage()
    hub.close()


class Idle:
    """`loop_fetch.Runs` of a capsule whose places are all taken: the hub only acknowledges."""

    def room(self) -> int:
        return 0

    def running(self) -> int:
        return 1

    def take(self, queue: str, raw: bytes) -> None:
        raise AssertionError("nothing is fetched")


def test_the_loops_acknowledger_survives_an_unexpected_exception(config, r, client, caplog):
    """Issue 28 item 9, asyncio runner: an exception other than a Redis error in the loop's
    acknowledgement was left in its task (logged, if ever, when the task was collected) and
    nothing sent the successes again until another success or fetch came."""
    clock = FailingOnce()
    scripts = Scripts(r)
    quieting = threading.Event()
    hub = LoopFetch(config, IDENTITY, scripts, Idle(), RedisOutage(), quieting, clock=clock)
    client.push(echo, [1])
    raw = r.rpoplpush("queue:default", hub.batch)

    async def scenario() -> None:
        fetching = asyncio.get_running_loop().create_task(hub.fetching(AsyncDirectPath(aio.connect(config.url))))
        try:
            await wait_until_async(lambda: hub.loop is not None, 10, message="the hub to start on the loop")
            clock.arm()
            hub.acknowledge(raw, [0])
            # sent while the worker runs, not by the stop below (a stop sends what is left)
            await wait_until_async(lambda: r.llen(hub.batch) == 0, 10, 0.02, "the success to be sent again")
        finally:
            quieting.set()
            hub.poke()
            await asyncio.wait_for(fetching, 10)

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    assert clock.raised.is_set()
    logged = [rec for rec in caplog.records if "RuntimeError" in rec.getMessage()]
    assert len(logged) == 1 and "a bug in the acknowledgement" in logged[0].getMessage()


def test_the_recovery_lock_expires_before_a_heartbeat_ttl(config, r, client):
    """Issue 28 item 9: the recovery lock lived 75 s with the default settings, longer than the
    60 s heartbeat TTL: a process killed while recovering held up every recovery, its own
    jobs' too, for longer than the TTL the delivery contract promises."""
    settings = config.replace(heartbeat_interval=5.0, heartbeat_ttl=60.0, recovery_interval=15.0)  # the defaults
    seen: list[int] = []

    def clock() -> float:  # called while the lock is held: read its TTL then
        seen.append(int(r.pttl(keys.RECOVERY_LOCK)))
        return time.time()

    dead = keys.reserved("host:1:dead", keys.BATCH_SLOT)
    client.push(echo, [1])
    r.rpoplpush("queue:default", dead)
    r.sadd(keys.RESERVATIONS, dead)
    assert Recovery(settings, r, IDENTITY, Scripts(r), clock=clock).run() == 1
    assert seen and all(0 < ttl < settings.heartbeat_ttl * 1000 for ttl in seen), seen


def wake_ups(thread: threading.Thread) -> int:
    """How often `thread` has slept and woken (Linux: its voluntary context switches)."""
    with open(f"/proc/self/task/{thread.native_id}/status") as f:
        return int(next(line for line in f if line.startswith("voluntary_ctxt_switches")).split()[1])


def test_an_idle_acknowledger_wakes_about_once_a_second(config, r):
    """Issue 41 item 2: after each of its idle second-long looks the acknowledger lingered as if a
    success had just gone out, waking every window (2 ms) for ACK_LINGER: ~50 wake-ups a second,
    each taking the GIL from whichever processor had just been handed a job."""
    hub = BatchList(config, IDENTITY, Scripts(r), client=r)
    try:
        thread = hub._ack_thread._thread
        time.sleep(0.3)  # past the linger of its start: the span measured, not a wait for a condition
        before = wake_ups(thread)
        time.sleep(2.2)  # the span measured
        assert wake_ups(thread) - before <= 6  # two or three looks (was over 100)
    finally:
        hub.close()
