"""The lanes' layout and staging scripts (`store.lanes`, `.staging`, `.lua`) on a real Redis, without
a worker: what a push, a due move and a stage write, with arguments that hold a `jid`, limits a
push would refuse (as a payload from elsewhere brings them), keys set by hand, and queue names
that begin with another's."""

import json
import time

import pytest
from conftest import wait_until
from jobs_for_tests import echo

from sidequest import JobArgumentError
from sidequest.api import Queue, pause_group, resume_group
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
    assert lanes.parse_limits(r.hget(LANE.limits, "f")) == lanes.Limits()  # its rate ignored, with a line that says so
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
    base = keys.DEFAULT.lanes("a")
    assert list(lanes.waiting_lanes(r, base)) == [(5, "waiting", base + ":5:waiting")]
    assert list(lanes.waiting_lanes(r, keys.DEFAULT.lanes("a:5"))) == [(5, "x", keys.DEFAULT.lanes("a:5") + ":5:x")]


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
    assert not r.exists(LANE.base, LANE.waiting, LANE.limits) and list(lanes.waiting_lanes(r, LANE.base)) == []
    assert Queue("default", client).size == lanes.LANE_DEPTH


def test_a_batch_at_the_head_stays_ahead_of_the_next_after_many_put_backs(client, r):
    fill(client)
    client.push_bulk(echo, [[n] for n in range(40)], priority=9)  # 32 staged at the head, 8 wait for their take
    for n in range(100):  # a fleet's shutdown put 100 jobs back at the head, ahead of the batch
        client.push(echo, [f"back-{n}"], queue="scratch")
        r.lmove(keys.queue("scratch"), keys.queue("default"), "LEFT", "RIGHT")
    client.push(echo, [40], priority=9)  # its push stages: the batch is not taken yet
    urgent = [job["args"][0] for job in queued(r) if job.get("priority") == 9]
    assert urgent == list(range(lanes.LANE_DEPTH))  # nothing of level 9 went ahead of the batch
    assert r.llen(LANE.lane(9, "")) == 9


# A test's helper, not a layout of its own: N groups' jobs enter their lanes through the lanes'
# own `lane_push` (what a push writes, without its stage), each group paused, then the real
# `stage` runs until staging has set every one of them aside (no group is left in its turn).
HOLD = lanes.LANES_LUA + """
local base, queue, first, n = KEYS[1], KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2])
for i = first, first + n - 1 do
  local group = 'held-' .. i
  lane_push(base, '5', group, cjson.encode({jid = string.format('%024x', i), class = 'Echo', args = {i}}), '0 0 0')
  redis.call('sadd', base .. ':paused', group)
end
local calls = 0
while redis.call('llen', base .. ':5') > 0 do stage(base, queue); calls = calls + 1 end
return calls
"""
OPEN = lanes.LANES_LUA + """
for i = 1, tonumber(ARGV[1]) do
  lane_push(KEYS[1], '5', 'open', cjson.encode({jid = string.format('%024x', i), class = 'Echo', args = {i}}), '0 0 0')
end
"""


def hold(r, queue, n):
    """`n` groups of `queue` held back (paused), staging's work with them done: batches of 10,000."""
    base, script = keys.DEFAULT.lanes(queue), r.register_script(HOLD)
    for first in range(0, n, 10_000):
        script(keys=[base, keys.queue(queue)], args=[first, min(10_000, n - first)])
    assert r.zcard(lanes.LaneKeys(base).held(5)) == n and r.llen(lanes.LaneKeys(base).rotation(5)) == 0


def test_a_staging_call_costs_the_same_with_100000_groups_held_back_as_with_10(r):
    hold(r, "few", 10)
    hold(r, "many", 100_000)
    stage, fill = r.register_script(lanes.STAGE), r.register_script(OPEN)
    took: dict[str, list[float]] = {"few": [], "many": []}
    for _ in range(15):  # interleaved; the fastest of each: the machine's load is not the call's cost
        for queue in took:
            base = keys.DEFAULT.lanes(queue)
            r.delete(keys.queue(queue))
            fill(keys=[base], args=[lanes.LANE_DEPTH])
            begin = time.perf_counter()
            staged = stage(keys=[base, keys.queue(queue)])
            took[queue].append(time.perf_counter() - begin)
            assert staged == lanes.LANE_DEPTH  # the open group's jobs, none of the held ones
    assert min(took["many"]) <= 2 * min(took["few"]), {q: f"{min(t) * 1000:.2f} ms" for q, t in took.items()}
    assert r.zcard(lanes.LaneKeys(keys.DEFAULT.lanes("many")).held(5)) == 100_000  # all still held


def test_one_round_trip_of_the_waiting_lanes_walk_costs_the_same_with_100000_groups_held_back_as_with_1000(r):
    hold(r, "few", 1_000)
    hold(r, "many", 100_000)
    took: dict[str, list[float]] = {"few": [], "many": []}
    for _ in range(10):  # interleaved; the fastest of each: the machine's load is not the call's cost
        for queue in took:
            walk = lanes.lane_sizes(r, keys.DEFAULT.lanes(queue))
            begin = time.perf_counter()
            page = next(walk)  # SMEMBERS, one HSCAN, one pipeline of LLENs
            took[queue].append(time.perf_counter() - begin)
            assert lanes.WAITING_PAGE // 2 <= len(page) <= 2 * lanes.WAITING_PAGE, len(page)  # HSCAN's COUNT: a hint
    assert min(took["many"]) <= 2 * min(took["few"]), {q: f"{min(t) * 1000:.2f} ms" for q, t in took.items()}
    before = int(r.info("commandstats")["cmdstat_hscan"]["calls"])
    walked = list(lanes.waiting_lanes(r, keys.DEFAULT.lanes("many")))  # the whole walk: every group, once
    assert len({group for _, group, _ in walked}) == 100_000 and len(walked) == 100_000
    assert int(r.info("commandstats")["cmdstat_hscan"]["calls"]) - before >= 100_000 // (2 * lanes.WAITING_PAGE)


def test_a_group_reopening_among_10000_held_ones_is_staged_within_one_poller_pass(client, r, config: Config):
    hold(r, "default", 10_000)
    client.push_bulk(echo, [[1], [2]], group="rated", group_rate=(1, 0.3))  # one now, one after its window
    assert [job["args"] for job in queued(r)] == [[1]]
    assert r.zscore(LANE.held(5), "rated") is not None  # set aside until its window's end
    r.delete(keys.queue("default"))
    wait_until(lambda: not r.exists(LANE.rate("rated")), timeout=5, message="the rate window's end")
    Poller(config, r).stage_lanes()
    assert [job["args"] for job in queued(r)] == [[2]]
    assert r.zcard(LANE.held(5)) == 10_000  # the paused ones stay held


def test_new_limits_from_a_push_and_a_resume_bring_a_held_group_back_at_once(client, r):
    client.push_bulk(echo, [[1], [2], [3]], group="g", group_concurrency=1)
    assert [job["args"] for job in queued(r)] == [[1]] and r.zscore(LANE.held(5), "g") == float("inf")
    client.push(echo, [4], group="g", group_concurrency=2)  # its limits changed: looked at again, staged
    assert [job["args"] for job in queued(r)] == [[1], [2]]
    pause_group("default", "h", client=client)
    client.push_bulk(echo, [[5], [6]], group="h")
    assert r.zscore(LANE.held(5), "h") == float("inf") and r.llen(LANE.lane(5, "h")) == 2
    resume_group("default", "h", client=client)
    assert [job["args"] for job in queued(r)][-2:] == [[5], [6]] and r.zscore(LANE.held(5), "h") is None


def test_a_push_without_limits_stores_none_and_lifts_those_a_held_group_had(client, r):
    client.push_bulk(echo, [[1], [2], [3]], group="g", group_concurrency=1)
    assert [job["args"] for job in queued(r)] == [[1]] and r.zscore(LANE.held(5), "g") == float("inf")
    client.push(echo, [4], group="g")  # its jobs have no limit now: the field goes, g is looked at again
    assert [job["args"] for job in queued(r)] == [[1], [2], [3], [4]] and not r.hexists(LANE.limits, "g")
    client.push(echo, [5], group="free")
    assert not r.exists(LANE.limits)  # an end of these jobs has no limits to read back nor forget


def test_a_group_held_at_its_concurrency_is_staged_when_an_end_brings_it_below_even_a_lowered_limit(client, r):
    from sidequest.store.lanes.admin import RELEASE_SLOTS

    client.push_bulk(echo, [[n] for n in range(6)], group="g", group_concurrency=3)
    running = sorted(r.smembers(LANE.running("g")))
    assert len(running) == 3 and r.zscore(LANE.held(5), "g") == float("inf")
    client.push(echo, [6], group="g", group_concurrency=1)  # lowered: 3 still run, so it stays held
    release = r.register_script(RELEASE_SLOTS)  # the end of a job, as its settle gives its slot back
    for jid in running[:2]:
        release(keys=[LANE.base, keys.queue("default")], args=["g", jid])
        assert r.llen(keys.queue("default")) == 3 and r.zscore(LANE.held(5), "g") == float("inf")
    release(keys=[LANE.base, keys.queue("default")], args=["g", running[2]])  # 0 running: below 1
    assert r.llen(keys.queue("default")) == 4 and r.scard(LANE.running("g")) == 1


def stage_shares(client, r, calls):
    """Stage `calls` batches into an emptied queue: how many jobs of each group went."""
    stage, shares = r.register_script(lanes.STAGE), {}
    for _ in range(calls):
        r.delete(keys.queue("default"))
        stage(keys=[LANE.base, keys.queue("default")])
        for job in queued(r):
            shares[job["args"][0]] = shares.get(job["args"][0], 0) + 1
    return shares


def test_groups_of_weights_1_2_and_4_stage_a_seventh_two_sevenths_and_four_sevenths(client, r):
    from sidequest.api.groups import set_group_limits

    fill(client)
    for group, weight in (("a", 1), ("b", 2), ("c", 4)):
        client.push_bulk(echo, [[group]] * 1000, group=group, group_weight=weight)
    shares = stage_shares(client, r, 30)  # 960 jobs, none of a group's backlog used up
    assert sum(shares.values()) == 30 * lanes.LANE_DEPTH
    for group, weight in (("a", 1), ("b", 2), ("c", 4)):
        assert abs(shares[group] / sum(shares.values()) - weight / 7) <= 0.1 * weight / 7, shares
    set_group_limits("default", "a", weight=4, client=client)  # at run time: from a's next turn
    after = stage_shares(client, r, 2)  # the next 64 jobs staged
    assert after["a"] >= 0.9 * 64 * 4 / 10 and after["c"] >= 0.9 * 64 * 4 / 10, after
    assert r.hget(LANE.waiting, "a") == str(1000 - shares["a"] - after["a"]).encode()
