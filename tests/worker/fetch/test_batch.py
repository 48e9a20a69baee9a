"""Reliable fetch in batches (`batch.BatchList`) and the direct Redis calls under it (`wire.DirectPath`)."""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis
from conftest import wait_until
from helpers import ran
from jobs_for_tests import echo

from sidequest.store import keys
from sidequest.store.direct import DirectPath
from sidequest.store.scripts import Scripts
from sidequest.worker.background.heartbeat import Heartbeat, Lease
from sidequest.worker.counters import ProcessCounters
from sidequest.worker.fetch.batch import BatchList, Waiter
from sidequest.worker.fetch.fetchers import ReliableFetch
from sidequest.worker.fetch.unit import UnitOfWork
from sidequest.worker.outcome import Outcome

IDENTITY = "host:2:batch"


def lease(config, r, identity: str = IDENTITY) -> Lease:
    """The lease of a process whose heartbeat reached Redis: a job it keeps in hand is its own
    for a heartbeat TTL (a hub without one hands out nothing it keeps in hand)."""
    beat = Heartbeat(config.replace(heartbeat_ttl=60.0), r, identity, ProcessCounters(), "test")  # no test outlives it
    beat.beat()
    return beat.lease


def pair(config, r):
    """Two processors of one process: two fetches sharing one hub."""
    scripts = Scripts(r)
    hub = BatchList(config, IDENTITY, scripts, client=r, lease=lease(config, r))
    return hub, ReliableFetch(config, r, IDENTITY, scripts, slot=0, hub=hub), \
        ReliableFetch(config, r, IDENTITY, scripts, slot=1, hub=hub)


def args_of(raws) -> list:
    return sorted(json.loads(raw)["args"][0] for raw in raws)


def waiting(hub: BatchList, count: int) -> list[Waiter]:
    """`count` processors waiting for the next fetch, as they would inside `take`."""
    waiters = [Waiter() for _ in range(count)]
    hub._waiters.extend(waiters)
    return waiters


def test_one_call_takes_a_job_for_each_processor_waiting_and_no_more(config, r, client):
    hub, first, _second = pair(config, r)
    client.push_bulk(echo, [[n] for n in range(5)])
    [other] = waiting(hub, 1)
    mine = first.retrieve_work()
    assert mine is not None and args_of([mine.raw]) == [0]  # the oldest job first
    assert args_of(r.lrange(hub.reserved, 0, -1)) == [0, 1]  # two taken: one each, not five
    assert r.llen("queue:default") == 3
    assert other.wake.acquire(timeout=0) and other.job is not None  # handed over, and woken
    assert args_of([other.job[1]]) == [1]


def test_a_processor_that_finds_a_job_in_hand_makes_no_call(config, r, client):
    """A job taken for a processor that stopped waiting meanwhile goes to the next that asks."""
    hub, _, second = pair(config, r)
    client.push(echo, [7])
    hub._handoff.append(("queue:default", r.rpoplpush("queue:default", hub.reserved), time.monotonic()))
    before = evalsha_calls(r)
    theirs = second.retrieve_work()
    assert theirs is not None and args_of([theirs.raw]) == [7]
    assert evalsha_calls(r) == before


def busy_fetch(config, r, **settings):
    """Three processors of one process; while the first fetches (Redis holds its call: CLIENT
    PAUSE), the other two ask for work: the demand that makes a hub keep jobs in hand."""
    scripts = Scripts(r)
    hub = BatchList(config.replace(**settings), IDENTITY, scripts, client=r, lease=lease(config, r))
    fetches = [ReliableFetch(config, r, IDENTITY, scripts, slot=n, hub=hub) for n in range(3)]
    r.execute_command("CLIENT", "PAUSE", 300, "WRITE")
    first = threading.Thread(target=fetches[0].retrieve_work)
    first.start()
    wait_until(lambda: hub._fetching, 2, 0.005, "the first processor's fetch")
    others = [threading.Thread(target=f.retrieve_work) for f in fetches[1:]]
    for thread in [*others]:
        thread.start()
    for thread in [first, *others]:
        thread.join(5)
    return hub, fetches


def test_a_hub_keeps_in_hand_as_many_jobs_as_were_asked_for_during_its_fetches(config, r, client):
    client.push_bulk(echo, [[n] for n in range(40)])
    hub, fetches = busy_fetch(config, r)
    held = r.llen(hub.reserved)  # what the three took (the late two may have timed out: 1 to 3)
    unit = fetches[0].retrieve_work()  # two asked during the last fetch: it takes more than its own
    assert unit is not None
    in_hand = r.llen(hub.reserved) - held - 1
    assert 1 <= in_hand <= 2 * config.concurrency
    assert r.llen("queue:default") == 40 - held - 1 - in_hand
    # no processor asks again: within PREFETCH_HOLD (0.1 s) those go back, to the queue's head, in order
    wait_until(lambda: r.llen(hub.reserved) == held + 1, 2, 0.01, "the jobs in hand to go back")
    head = [json.loads(raw)["args"][0] for raw in reversed(r.lrange("queue:default", 0, -1))]
    assert head == list(range(held + 1, 40))
    nxt = fetches[1].retrieve_work()  # the next processor takes the oldest of them
    assert nxt is not None and args_of([nxt.raw]) == [held + 1]
    hub.close()


@pytest.mark.parametrize("settings", [{"prefetch": 0}, {"max_recoveries": 1}])
def test_prefetch_0_or_few_recoveries_keep_nothing_in_hand(config, r, client, settings):
    """With max_recoveries 1 a crash would make a job in hand a suspect though it never ran."""
    client.push_bulk(echo, [[n] for n in range(40)])
    hub, fetches = busy_fetch(config, r, **settings)
    held = r.llen(hub.reserved)
    assert fetches[0].retrieve_work() is not None
    assert r.llen(hub.reserved) == held + 1 and r.llen("queue:default") == 40 - held - 1
    hub.close()


def evalsha_calls(r) -> int:
    return r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)


def test_successes_ending_within_the_window_are_acknowledged_in_one_call(config, r, client):
    scripts = Scripts(r)
    hub = BatchList(config, IDENTITY, scripts, client=r, ack_window=0.5)  # a wide window: all four fall in it
    first = ReliableFetch(config, r, IDENTITY, scripts, slot=0, hub=hub)
    second = ReliableFetch(config, r, IDENTITY, scripts, slot=1, hub=hub)
    client.push_bulk(echo, [[n] for n in range(6)])
    others = waiting(hub, 3)
    units = [first.retrieve_work()]
    units += [UnitOfWork("default", w.job[1], second, hub.reserved) for w in others if w.job]
    assert args_of(u.raw for u in units) == [0, 1, 2, 3]
    before = evalsha_calls(r)
    for unit in units:
        assert unit.apply(Outcome.done(), [0]) is True
    # no processor fetches again: the acknowledger sends them, once the window has passed
    wait_until(lambda: r.llen(hub.reserved) == 0, 10, 0.01, "the four successes to be acknowledged")
    assert evalsha_calls(r) == before + 1  # one call for the four
    assert r.llen("queue:default") == 2
    hub.close()


def test_a_success_is_acknowledged_when_it_ends_not_when_the_process_fetches_again(config, r, client):
    """With every processor busy, nothing fetches; the success must still leave Redis at once."""
    hub, first, _ = pair(config, r)
    client.push_bulk(echo, [[n] for n in range(2)])
    [other] = waiting(hub, 1)
    mine = first.retrieve_work()
    assert mine is not None and other.job is not None and r.llen(hub.reserved) == 2
    mine.apply(Outcome.done(), [0])  # the other job still runs: no fetch follows
    wait_until(lambda: r.lrange(hub.reserved, 0, -1) == [other.job[1]], 2, 0.005,
               "the success to leave the batch list within the window")
    hub.close()


def test_successes_a_fetch_carries_first_are_not_sent_again(config, r, client):
    scripts = Scripts(r)
    hub = BatchList(config, IDENTITY, scripts, client=r, ack_window=0.5)
    first = ReliableFetch(config, r, IDENTITY, scripts, slot=0, hub=hub)
    client.push_bulk(echo, [[n] for n in range(3)])
    unit = first.retrieve_work()
    assert unit is not None
    unit.apply(Outcome.done(), [0])
    before = evalsha_calls(r)
    nxt = first.retrieve_work()  # leaves before the window ends: it carries the success
    assert nxt is not None and r.lrange(hub.reserved, 0, -1) == [nxt.raw]
    assert evalsha_calls(r) == before + 1
    hub.close()  # the acknowledger had nothing left to send
    assert evalsha_calls(r) == before + 1 and r.lrange(hub.reserved, 0, -1) == [nxt.raw]


def test_a_failure_is_settled_at_once_and_leaves_the_batch_list(config, r, client):
    hub, first, _ = pair(config, r)
    client.push(echo, ["x"])
    unit = first.retrieve_work()
    assert unit is not None
    assert unit.apply(Outcome("retry", blob=unit.raw.decode(), at=1.0), [0]) is True
    assert r.llen(hub.reserved) == 0 and r.zcard("retry") == 1
    assert not hub.ledger.known  # nothing left that the process thinks it holds


def test_jobs_taken_for_processors_that_stopped_go_back_unchanged(config, r, client):
    hub, first, _ = pair(config, r)
    client.push_bulk(echo, [[n] for n in range(3)])
    original = r.lrange("queue:default", 0, -1)
    others = waiting(hub, 2)
    unit = first.retrieve_work()
    hub._handoff.extend((*w.job, time.monotonic()) for w in others if w.job)  # they stopped before picking theirs up
    first.release()  # the two handed-over jobs nobody picked up (taken after the running one)
    assert unit is not None and unit.put_back([0])  # then, as shutdown does, the running one
    assert r.lrange("queue:default", 0, -1) == original and r.llen(hub.reserved) == 0


def test_an_idle_processor_blocks_into_its_own_list_and_acknowledges_at_once(config, r, client):
    _, first, _ = pair(config, r)
    assert first.retrieve_work() is None  # nothing waits: it blocked up to fetch_timeout
    assert keys.reserved(IDENTITY, 0).encode() in r.smembers(keys.RESERVATIONS)  # registered first
    client.push(echo, ["late"])
    r.rename("queue:default", "aside")  # arrives while it blocks: simulate with the list
    r.rename("aside", "queue:default")
    unit = first.retrieve_work()
    assert unit is not None and unit.home in (first.own, first.reserved)
    unit.apply(Outcome.done(), [0])
    first.flush()
    assert r.llen(first.own) == 0 and r.llen(first.reserved) == 0


# -- the direct calls ------------------------------------------------------------------------------

def test_a_transaction_with_a_refused_command_raises_and_writes_nothing(r, client):
    """A push's MULTI (`push_plan`, on the direct path) with a command that fails."""
    r.set("text", "x")
    with pytest.raises(redis.ResponseError):  # wrong type: fails in EXEC
        client.write([], 0.0, also=lambda pipe: (pipe.lpush("list", "a"), pipe.lpush("text", "b")))
    assert r.lrange("list", 0, -1) == [b"a"]  # Redis transactions do not roll back: as redis-py
    with pytest.raises(redis.ResponseError):  # refused while queued
        client.write([], 0.0, also=lambda pipe: (pipe.lpush("other", "a"), pipe.execute_command("NOSUCHCOMMAND")))
    assert not r.exists("other")  # the whole transaction was discarded
    assert client.write([], 0.0, also=lambda pipe: pipe.lpush("other", "b")) == frozenset()  # and the lane works on
    assert r.lrange("other", 0, -1) == [b"b"]


def test_a_script_the_server_lost_is_loaded_again(r):
    lane = DirectPath(r)
    script = r.register_script("return ARGV[1]")
    r.script_flush()
    assert lane.evalsha(script, [], ["hi"]) == b"hi"


def test_a_killed_connection_is_replaced_and_the_call_goes_on_a_new_one(r):
    """Issue 28 item 1: a connection the server killed before the call was sent (it raised
    once before) is replaced, as redis-py's pool replaces it: the call never reached Redis."""
    lane = DirectPath(r)
    assert lane.call("CLIENT", "SETNAME", "lane") == b"OK"
    r.client_kill_filter(_type="normal", skipme=True)
    assert lane.call("PING") == b"PONG"
    assert lane.call("CLIENT", "GETNAME") is None  # a new connection


def test_a_push_message_between_replies_is_left_out(redis_url):
    """RESP3 (redis-py 8's default): a push message (here a client-side caching invalidation)
    arriving before a reply goes to redis-py's handler, and the reply is still the one read."""
    r3 = redis.Redis.from_url(redis_url, protocol=3)
    lane = DirectPath(r3)
    assert lane.call("CLIENT", "TRACKING", "ON") == b"OK"
    r3.set("watched", "1")
    assert lane.call("GET", "watched") == b"1"  # now tracked for this connection
    r3.set("watched", "2")  # another connection changes it: an invalidation is pushed to the lane's
    wait_until(lambda: r3.get("watched") == b"2", 2, 0.01, "the write")
    assert lane.exchange([("PING",), ("GET", "watched")]) == [b"PONG", b"2"]
    r3.close()


def test_an_idle_worker_of_weighted_queues_has_a_waiter_on_every_queue(start, r, client):
    """Idle processors block one per queue in a fixed spread (not the shuffled fetch order, which
    left a queue without a waiter now and then: a job there waited out a blocking timeout)."""
    queues = [(f"w{i}", 1 + i % 3) for i in range(6)]
    start(queues=queues, concurrency=10, fetch_timeout=5.0)

    db = str(r.connection_pool.connection_kwargs.get("db", 0))

    def waiters() -> int:
        return sum(1 for c in r.client_list() if c.get("cmd") == "blmove" and c.get("db") == db)
    wait_until(lambda: waiters() >= 10, 10, 0.02, "every processor to block")
    for round_ in range(3):
        for name, _ in queues:
            began = len(ran(r, "echo"))
            client.push(echo, [name, round_], queue=name)
            wait_until(lambda began=began: len(ran(r, "echo")) > began, 0.5, 0.005,
                       f"the job in {name} to start at once (a missed waiter would take a second)")
            wait_until(lambda: waiters() >= 10, 5, 0.005, "the processor to block again")
