"""The lanes' layout and staging scripts (`store.lanes`, `store.lanes.lua`) on a real Redis, without
a worker: what a push, a due move and a stage write, with arguments that hold a `jid`, limits a
push would refuse (as a payload from elsewhere brings them), keys set by hand, and queue names
that begin with another's."""

import json
import time

import pytest
from jobs_for_tests import echo

from sidequest import JobArgumentError
from sidequest.api import Queue, pause_group
from sidequest.api.groups import clear_lanes
from sidequest.config import Config
from sidequest.jobs.payload import new_jid
from sidequest.store import keys, lanes
from sidequest.worker.background.poller import Poller

LANE = lanes.LaneKeys(keys.DEFAULT.lanes("default"))


def queued(r, queue="default"):
    return [json.loads(raw) for raw in reversed(r.lrange(keys.queue(queue), 0, -1))]  # oldest first


def fill(client, queue="default"):
    """LANE_DEPTH plain jobs: laned jobs of levels 0..5 wait in their lanes."""
    client.push_bulk(echo, [[n] for n in range(lanes.LANE_DEPTH)], queue=queue)


def foreign(group, **fields):
    """A payload another client wrote (a Ruby app, a hand ZADD): fields as they come."""
    return {"class": "Echo", "args": [group], "queue": "default", "jid": new_jid(), "retry": True,
            "created_at": time.time(), "enqueued_at": time.time(), "group": group, **fields}


def test_a_staged_job_counts_by_its_own_jid_not_one_in_its_arguments(client, r):
    inner = {"jid": "aaaaaaaaaaaaaaaaaaaaaaaa", "event": "webhook"}  # a Sidekiq payload passed as an argument
    jids = [client.push(echo, [inner], group="g", group_concurrency=2) for _ in range(3)]
    assert [job["jid"] for job in queued(r)] == jids[:2]  # the third waits: 2 at once
    assert r.smembers(LANE.running("g")) == {j.encode() for j in jids[:2]}


def test_a_group_rate_beyond_a_year_or_a_count_past_the_bound_is_refused_at_the_push(client, r):
    for rate in [(1, 1e308), (1, 1e16), (1, 366 * 86_400 + 1), (10**10, 60)]:
        with pytest.raises(JobArgumentError, match="option 'group_rate' must be"):
            client.push(echo, [1], group="g", group_rate=rate)
    assert r.dbsize() == 0
    client.push(echo, [1], group="g", group_rate=(1, 366 * 86_400))  # a year: fine


@pytest.mark.parametrize("rate", [[1, 1e308], [1, 1e16], [10, "1m"], "10/m"])
def test_a_due_payload_with_a_bad_group_rate_runs_without_it_and_holds_up_nothing(client, r, config: Config,
                                                                                    rate, caplog):
    fill(client)
    for group in "abcde":  # waiting in their lanes: the next stage takes them with the bad one
        client.push(echo, [group], group=group)
    r.delete(keys.queue("default"))  # the plain jobs ran elsewhere: room for a stage
    bad = foreign("f", group_rate=rate)
    r.zadd("schedule", {json.dumps(bad): time.time() - 1})
    plain = foreign("p")
    del plain["group"]
    r.zadd("schedule", {json.dumps(plain): time.time() - 1})
    assert Poller(config, r).enqueue_due() == 2
    assert r.zcard("schedule") == 0
    assert sorted(job["args"][0] for job in queued(r)) == ["a", "b", "c", "d", "e", "f", "p"]  # nothing lost
    assert r.hget(LANE.limits, "f") == b"0 0 0"  # its rate ignored, with one line that says so
    assert any(bad["jid"] in m and "group_rate" in m for m in caplog.messages)


def test_a_stage_passes_over_a_group_whose_keys_were_set_by_hand_and_loses_nothing(client, r):
    fill(client)
    for group in "abcdef":
        client.push(echo, [group], group=group, group_rate=(100, 60))
    r.delete(keys.queue("default"))
    r.rpush(LANE.rate("f"), "x")  # the wrong type: f cannot be counted
    r.hset(LANE.limits, "e", "0 1 99999999999999999999")  # out of bounds: e's rate is ignored
    r.evalsha(r.script_load(lanes.STAGE), 2, LANE.base, keys.queue("default"))
    assert sorted(job["args"][0] for job in queued(r)) == ["a", "b", "c", "d", "e"]
    assert r.llen(LANE.lane(5, "f")) == 1 and r.hget(LANE.waiting, "f") == b"1"  # f waits, its count true


def test_the_lanes_of_queue_a_and_of_queue_a_colon_5_are_apart(client, r):
    client.push(echo, [1], queue="a", priority=9)
    client.push(echo, [2], queue="a:5", priority=9)
    fill(client, "a")
    fill(client, "a:5")
    client.push(echo, [3], queue="a", group="waiting")  # queue a's lane of level 5, group "waiting"
    client.push(echo, [4], queue="a:5", group="x")
    assert queued(r, "a")[0]["args"] == [1] and queued(r, "a:5")[0]["args"] == [2]  # each at its queue's head
    assert lanes.waiting_lanes(r, keys.DEFAULT.lanes("a")) == [(5, "waiting", keys.DEFAULT.lanes("a") + ":5:waiting")]
    assert lanes.waiting_lanes(r, keys.DEFAULT.lanes("a:5")) == [(5, "x", keys.DEFAULT.lanes("a:5") + ":5:x")]


def test_clearing_lanes_keeps_a_paused_group_paused(client, r):
    fill(client)
    client.push_bulk(echo, [[n] for n in range(3)], group="tenant-3")
    pause_group("default", "tenant-3", client=client)
    assert clear_lanes("default", client=client) == 3
    assert r.smembers(LANE.paused) == {b"tenant-3"}  # cleared jobs, not the operator's pause
    client.push(echo, [4], group="tenant-3")
    r.delete(keys.queue("default"))
    r.evalsha(r.script_load(lanes.STAGE), 2, LANE.base, keys.queue("default"))
    assert r.llen(keys.queue("default")) == 0 and r.hget(LANE.waiting, "tenant-3") == b"1"


def test_clearing_lanes_takes_calls_of_bounded_work_whatever_the_number_of_groups(client, r):
    from sidequest.store.lanes import CLEAR_GRAIN

    fill(client)
    groups = [f"tenant-{n}" for n in range(CLEAR_GRAIN * 2 + 10)]
    for group in groups:
        client.push(echo, [group], group=group)
    script = r.register_script(lanes.CLEAR_LANES)
    assert script(keys=[LANE.base]) == [CLEAR_GRAIN, 1]  # one call: at most CLEAR_GRAIN lanes, and more left
    assert clear_lanes("default", client=client) == len(groups) - CLEAR_GRAIN
    assert not r.exists(LANE.base, LANE.waiting, LANE.limits) and lanes.waiting_lanes(r, LANE.base) == []
    assert Queue("default", client).size == lanes.LANE_DEPTH
