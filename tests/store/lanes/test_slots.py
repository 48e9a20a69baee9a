"""Group slots that heal (`store.lanes.slots`): a slot whose job is nowhere (taken and run by a
Ruby worker, deleted by hand, lost with a process under basic fetch) is given back once it was
found nowhere on two passes a grace apart; a slot whose job is queued, reserved (a dead process's
list too) or in a process's work hash (Sidekiq 6's object, Sidekiq 7's and sidequest's string) is
kept. On a real Redis; the reconciler's clock is passed in."""

import json

from conftest import wait_until
from jobs_for_tests import echo

from sidequest.store import keys, lanes

LANE = lanes.LaneKeys(keys.DEFAULT.lanes("default"))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def reconciler(r, clock, grace=10.0):
    from sidequest.store.lanes.slots import SlotReconciler

    return SlotReconciler(r, grace, clock=clock)


def test_a_slot_whose_job_is_nowhere_comes_back_after_two_passes_a_grace_apart(client, r):
    first = client.push(echo, [1], group="g", group_concurrency=1)
    second = client.push(echo, [2], group="g", group_concurrency=1)
    assert r.rpop(keys.queue("default")) and r.llen(keys.queue("default")) == 0  # a Ruby worker took it
    clock = Clock()
    slots = reconciler(r, clock)
    assert slots.run(["default"]) == 0  # nowhere once: maybe between two places
    clock.now += 9.9
    assert slots.run(["default"]) == 0
    clock.now += 0.1
    assert slots.run(["default"]) == 1
    assert r.smembers(LANE.running("g")) == {second.encode()}  # given back, and the next one staged
    assert json.loads(r.rpop(keys.queue("default")))["jid"] == second
    assert first.encode() not in r.smembers(LANE.running("g"))


def test_a_pass_over_other_queues_keeps_what_was_found_missing_in_this_one(client, r):
    """Recovery looks at other workers' queues a page a pass: a queue's missing jids wait for its
    next pass, whatever passes over other queues came between."""
    client.push(echo, [1], group="g", group_concurrency=1)
    assert r.rpop(keys.queue("default"))  # a Ruby worker took it
    clock = Clock()
    slots = reconciler(r, clock)
    assert slots.run(["default"]) == 0
    clock.now += 5
    assert slots.run(["elsewhere"]) == 0
    clock.now += 5
    assert slots.run(["default"]) == 1


def test_a_slot_is_kept_while_its_job_is_queued_reserved_or_running_anywhere(client, r):
    jids = [client.push(echo, [n], group="g") for n in range(6)]
    raws = {json.loads(raw)["jid"]: raw for raw in r.lrange(keys.queue("default"), 0, -1)}
    r.lrem(keys.queue("default"), 0, raws[jids[1]])
    r.lpush(keys.reserved("dead-host:1:abc", 0), raws[jids[1]])  # a dead process's list, until recovery
    r.sadd(keys.RESERVATIONS, keys.reserved("dead-host:1:abc", 0))
    for n, form in ((2, "object"), (3, "string")):  # Sidekiq 6 writes the payload as an object, 7 as a string
        r.lrem(keys.queue("default"), 0, raws[jids[n]])
        payload = json.loads(raws[jids[n]]) if form == "object" else raws[jids[n]].decode()
        identity = f"ruby-host:{n}:0123"
        r.sadd(keys.PROCESSES, identity)
        r.hset(keys.work(identity), "tid", json.dumps({"queue": "default", "payload": payload, "run_at": 1}))
    r.lrem(keys.queue("default"), 0, raws[jids[4]])  # ran elsewhere and ended: nowhere
    r.lrem(keys.queue("default"), 0, raws[jids[5]])
    r.zadd("retry", {raws[jids[5]]: 1})  # failed in a Ruby worker: waits in retry, holds no slot
    clock = Clock()
    slots = reconciler(r, clock)
    slots.run(["default"])
    clock.now += 10
    assert slots.run(["default"]) == 2
    assert r.smembers(LANE.running("g")) == {j.encode() for j in jids[:4]}


def test_a_slot_found_again_before_the_grace_ends_is_kept(client, r):
    client.push(echo, [1], group="g")
    raw = r.rpop(keys.queue("default"))
    clock = Clock()
    slots = reconciler(r, clock)
    slots.run(["default"])  # nowhere: a process took it and has not written its work hash yet
    identity = "host:1:beat"
    r.sadd(keys.PROCESSES, identity)
    r.hset(keys.work(identity), "tid", json.dumps({"queue": "default", "payload": raw.decode(), "run_at": 1}))
    clock.now += 10
    assert slots.run(["default"]) == 0
    r.delete(keys.work(identity))  # it ended without sidequest settling it
    clock.now += 1
    assert slots.run(["default"]) == 0  # found nowhere again: the grace starts again
    clock.now += 10
    assert slots.run(["default"]) == 1 and not r.exists(LANE.running("g"), LANE.busy)


def test_a_worker_gives_back_the_slot_of_a_job_a_ruby_worker_ran(client, r, start):
    for n in range(3):
        client.push(echo, [n], group="g", group_concurrency=1)
    taken = json.loads(r.rpop(keys.queue("default")))  # a Ruby worker took it, ran it, knew nothing of groups
    start(concurrency=1, recovery_interval=0.3)
    wait_until(lambda: len([x for x in r.lrange("test:ran", 0, -1) if b"echo" in x]) == 2, timeout=30,
               message="the group's other jobs, once its slot came back")
    assert taken["group"] == "g"
    # the last job's slot is given back by its acknowledgement, which lands just after it ran
    wait_until(lambda: r.smembers(LANE.running("g")) == set(), timeout=10, message="the group's slots all free")


def test_a_worker_heals_the_slots_of_a_queue_it_does_not_listen_on(client, r, start):
    """A queue only Ruby workers take from: a sidequest worker on other queues gives its slots back
    too (its recovery looks at the `queues` set a page a pass)."""
    for n in range(2):
        client.push(echo, [n], queue="ruby-only", group="g", group_concurrency=1)
    ruby_lane = lanes.LaneKeys(keys.DEFAULT.lanes("ruby-only"))
    taken = json.loads(r.rpop(keys.queue("ruby-only")))  # a Ruby worker took it and ran it
    assert r.smembers(ruby_lane.running("g")) == {taken["jid"].encode()}
    start(concurrency=1, recovery_interval=0.3)  # listens on `default` only
    wait_until(lambda: r.llen(keys.queue("ruby-only")) == 1, timeout=30,
               message="the group's next job staged, once the slot of the one Ruby ran came back")
    assert r.smembers(ruby_lane.running("g")) != {taken["jid"].encode()}
