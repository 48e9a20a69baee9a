"""A staging call (`store.lanes.staging`) on a real Redis, without a worker: what one staged job of a
group costs in Redis commands (counted by the server, INFO commandstats), and a group whose
waiting count was set by hand, which its staging's first write finds."""

import json

from jobs_for_tests import echo

from sidequest.store import keys, lanes

LANE = lanes.LaneKeys(keys.DEFAULT.lanes("default"))
OWN = {"evalsha", "del", "config", "info", "script"}  # this test's own calls, not the script's


def commands(r) -> int:
    """Commands run since the last reset, those inside scripts included, this test's own left out."""
    stats = r.info("commandstats")
    return sum(int(entry["calls"]) for name, entry in stats.items()
               if name.removeprefix("cmdstat_").split("|")[0] not in OWN)


def stage_all(r) -> list[dict]:
    """Stage into an emptied queue until the lanes are empty: the jobs staged, oldest first."""
    stage, staged = r.register_script(lanes.STAGE), []
    while True:
        r.delete(keys.queue("default"))
        if not stage(keys=[LANE.base, keys.queue("default")]):
            return staged
        staged += [json.loads(raw) for raw in reversed(r.lrange(keys.queue("default"), 0, -1))]
        r.delete(keys.queue("default"))


def test_a_staged_job_of_a_group_without_limits_costs_at_most_eight_and_a_half_commands(client, r):
    client.push_bulk(echo, [[n] for n in range(lanes.LANE_DEPTH)])  # the queue full: the grouped jobs wait
    client.push_bulk(echo, [[n] for n in range(640)], group=lambda n: n % 128)  # 5 jobs in each of 128 groups
    r.delete(keys.queue("default"))
    r.config_resetstat()
    staged = stage_all(r)
    assert sorted(job["args"][0] for job in staged) == list(range(640))  # every job, once
    assert r.scard(LANE.busy) == 128 and r.scard(LANE.running("0")) == 5  # each counted against its group
    # a turn (LMOVE), its lane (LLEN, RPOP), limits (HGET), running set (SCARD, SADD), busy (SADD), waiting
    # (HINCRBY), the lane's last job leaving (HDEL, RPOP) and each call's checks: 9.2 before, 7.6 at 39d679b
    assert commands(r) / len(staged) <= 8.5, commands(r) / len(staged)


def test_a_waiting_count_set_by_hand_parks_its_group_with_nothing_of_it_written(client, r):
    client.push_bulk(echo, [[n] for n in range(lanes.LANE_DEPTH)])
    for group in "abc":
        client.push_bulk(echo, [[group], [group]], group=group)
    r.delete(keys.queue("default"))
    r.hset(LANE.waiting, "b", "two")  # not a number: b cannot be counted out
    staged = stage_all(r)
    assert sorted(job["args"][0] for job in staged) == ["a", "a", "c", "c"]
    assert r.llen(LANE.lane(5, "b")) == 2 and r.hget(LANE.waiting, "b") == b"two"  # b waits, as it was
    assert not r.exists(LANE.running("b")) and r.zscore(LANE.held(5), "b") is not None  # parked, no slot taken
