"""Jobs a threads-runner process keeps in hand (`batch.BatchList`): handed out only while still this
process's, never kept past `hub.PREFETCH_HOLD`, and handed back at a stop (issue 28 item 6).

A success waiting in a wide acknowledgement window (`ack_window`) is the state steady successes
keep a busy process in; several tests hold it open so that only the rule under test can act."""

from __future__ import annotations

import time

import redis
from conftest import wait_until
from jobs_for_tests import echo

from sidequest.store.scripts import Scripts
from sidequest.worker.background.heartbeat import Heartbeat
from sidequest.worker.background.recovery import Recovery
from sidequest.worker.counters import ProcessCounters
from sidequest.worker.fetch.batch import BatchList
from sidequest.worker.fetch.fetchers import ReliableFetch
from sidequest.worker.outcome import Outcome
from worker.fetch.test_batch import lease

IDENTITY = "host:2:hand"
WIDE = 30.0  # an acknowledgement window no test waits for


def running_and_one_in_hand(hub: BatchList, fetch: ReliableFetch, r, client):
    """Two jobs: the first runs (taken by `fetch`), the second waits in hand (as a job a fetch
    took for a processor that then left, see worker/fetch/test_batch)."""
    client.push_bulk(echo, [[1], [2]])
    unit = fetch.retrieve_work()
    assert unit is not None
    held = r.rpoplpush("queue:default", hub.reserved)
    hub._handoff.append(("queue:default", held, time.monotonic()))
    return unit, held


def live_hub(config, r, scripts, **settings) -> BatchList:
    """A hub of a process whose heartbeat reached Redis: what it holds is its own for now."""
    return BatchList(config, IDENTITY, scripts, client=r, lease=lease(config, r, IDENTITY), **settings)


def test_a_job_in_hand_that_another_process_recovered_is_not_handed_out(config, r, client):
    """Issue 28 item 6: a job kept in hand was handed to a processor (and run) after another
    process had recovered it: the process's heartbeat is missing, so the job was no longer its."""
    scripts = Scripts(r)
    hub = BatchList(config, IDENTITY, scripts, client=r, ack_window=WIDE)
    first = ReliableFetch(config, r, IDENTITY, scripts, slot=0, hub=hub)
    second = ReliableFetch(config, r, IDENTITY, scripts, slot=1, hub=hub)
    unit, held = running_and_one_in_hand(hub, first, r, client)
    unit.apply(Outcome.done(), [0])  # a success waits in its window
    # this process never beat: another one's recovery takes what its batch list holds
    # the other process recovers both, or only the running one when this hub's acknowledger,
    # seeing no lease, already put the one in hand back (seen on a loaded machine): either way
    # the job in hand is in its queue, not ours to hand out
    assert Recovery(config, r, "host:3:other", scripts).run() in (1, 2)
    assert r.llen(hub.reserved) == 0 and r.llen("queue:default") == 2
    nxt = second.retrieve_work()
    assert nxt is None or nxt.raw != held, "a job another process recovered was handed out"
    assert nxt is None or nxt.raw in r.lrange(hub.reserved, 0, -1)  # what it runs is its own
    hub.close()


def test_a_job_in_hand_goes_back_though_successes_wait(config, r, client):
    """Issue 28 item 6: the put-back of jobs kept in hand past PREFETCH_HOLD was skipped while
    successes waited for their acknowledgement, so under steady successes it never came."""
    scripts = Scripts(r)
    hub = live_hub(config, r, scripts, ack_window=WIDE)
    first = ReliableFetch(config, r, IDENTITY, scripts, slot=0, hub=hub)
    unit, held = running_and_one_in_hand(hub, first, r, client)
    unit.apply(Outcome.done(), [0])
    wait_until(lambda: r.lrange("queue:default", 0, -1) == [held], 3, 0.01,
               "the job in hand to go back to its queue while a success waits")
    assert r.lrange(hub.reserved, 0, -1) == [unit.raw]  # the success still waits: its window is open
    hub.close()


def test_closing_the_hub_hands_back_the_jobs_in_hand_at_once(config, r, client):
    """Issue 28 item 6: `BatchList.close` left the jobs in hand in the batch list, for recovery to put
    back a heartbeat TTL later (counted as a recovery), though they never ran."""
    scripts = Scripts(r)
    hub = live_hub(config, r, scripts, ack_window=WIDE)
    first = ReliableFetch(config, r, IDENTITY, scripts, slot=0, hub=hub)
    unit, held = running_and_one_in_hand(hub, first, r, client)
    unit.apply(Outcome.done(), [0])
    hub.close(first.lane)  # at once: before the job in hand is old, though a window is open
    assert r.lrange("queue:default", 0, -1) == [held]  # unchanged, at the head of its queue
    assert r.llen(hub.reserved) == 0  # the success was sent too


def test_a_failed_refill_keeps_the_age_of_the_job_in_hand(config, r, client):
    """Issue 28 item 6: a processor takes the last job in hand and fetches more before running
    it; when that fetch failed, the job went back into the hand as if just taken, so while the
    fetches kept failing it never aged out and never went back to its queue."""
    scripts = Scripts(r)
    hub = live_hub(config, r, scripts)
    r.acl_setuser("hand-test", enabled=True, nopass=True, keys=["*"], commands=["+@all"])
    limited = redis.Redis.from_url(config.url, username="hand-test", password="")
    try:
        taker = ReliableFetch(config, limited, IDENTITY, scripts, slot=0, hub=hub)
        client.push(echo, [1])
        held = r.rpoplpush("queue:default", hub.reserved)
        hub._handoff.append(("queue:default", held, time.monotonic()))
        hub._target = 4  # it keeps jobs in hand: one taking the last fetches more first
        r.acl_setuser("hand-test", enabled=True, nopass=True, commands=["-evalsha"])  # from now on its fetches fail

        def one_more_try() -> bool:
            try:
                unit = taker.retrieve_work()
            except redis.ResponseError:  # the refill failed: the job is in hand again
                return r.lrange("queue:default", 0, -1) == [held]
            assert unit is None, "the fetch cannot succeed"
            return r.lrange("queue:default", 0, -1) == [held]
        wait_until(one_more_try, 3, 0.01, "the job in hand to go back though each refill failed")
    finally:
        r.acl_deluser("hand-test")
        limited.close()
        hub.close()


def test_a_job_in_hand_is_handed_out_while_the_heartbeat_holds_and_never_after_a_lapse(config, r, client):
    """Issue 28 item 6: the check costs no round trip (the heartbeat's lease, `heartbeat.Lease`):
    a job in hand goes to the next processor at once while the process's heartbeat hash surely
    lives; once the hash may have expired after the job was taken, it is not handed out, even
    when the process beats again before the job is old (a process paused past its TTL)."""
    settings = config.replace(heartbeat_interval=0.2, heartbeat_ttl=0.5)
    scripts = Scripts(r)
    beat = Heartbeat(settings, r, IDENTITY, ProcessCounters(), "test")
    beat.beat()
    hub = BatchList(settings, IDENTITY, scripts, client=r, lease=beat.lease, ack_window=WIDE)
    first = ReliableFetch(settings, r, IDENTITY, scripts, slot=0, hub=hub)
    second = ReliableFetch(settings, r, IDENTITY, scripts, slot=1, hub=hub)
    _running, held = running_and_one_in_hand(hub, first, r, client)
    calls = r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    nxt = second.retrieve_work()
    assert nxt is not None and nxt.raw == held  # from the hand, with no call
    assert r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0) == calls

    wait_until(lambda: not r.exists(IDENTITY), 5, 0.01, "the heartbeat hash to expire (no beat)")
    client.push(echo, [3])
    late = r.rpoplpush("queue:default", hub.reserved)
    hub._handoff.append(("queue:default", late, time.monotonic()))
    assert Recovery(settings, r, "host:3:other", scripts).run() == 3  # the hash is missing
    beat.beat()  # and the process beats again, before the job in hand is old
    again = second.retrieve_work()
    assert again is not None and again.raw != late, "a job another process recovered was handed out"
    assert again.raw in r.lrange(hub.reserved, 0, -1)
    hub.close()


def test_a_workers_hubs_hold_its_heartbeats_lease_until_it_stops(start):
    """Issue 28 item 6: each capsule's hub of a worker checks its jobs in hand against the
    process's own heartbeat (renewed by every beat, ended by the stop)."""
    from sidequest.config import Capsule

    launcher = start(runner="threads", capsules=[Capsule("serial", queues=["ledger"], concurrency=1)])
    hubs = [runner.hub for runner in launcher.runners if isinstance(runner.hub, BatchList)]
    assert len(hubs) == 2 and all(hub.lease is launcher.heartbeat.lease for hub in hubs)
    now = time.monotonic()
    assert launcher.heartbeat.lease.holds(now, now)
    launcher.stop()
    now = time.monotonic()
    assert not launcher.heartbeat.lease.holds(now, now)
