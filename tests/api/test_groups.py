"""The admin API of a queue's lanes: its fairness groups (largest first, limits, paused), pausing
and resuming one (which stages it at once), its waiting jobs per priority level, and clearing
the queue with its lanes; on real laned pushes and a real worker."""

from __future__ import annotations

import pytest
from conftest import wait_until
from jobs_for_tests import work
from lane_state import fill, lane_keys, laned, scene

from sidequest.api import GroupInfo, Queue, groups, lanes, pause_group, reset_group, resume_group

GATE = "test:gate"  # the held `work` jobs end once this key exists


def test_groups_are_listed_largest_first_with_their_limits_and_pause(client):
    scene(client, "mail")
    pause_group("mail", "tenant-d", client=client)  # paused while it has nothing
    found = groups("mail", client=client)
    assert found == [
        GroupInfo("tenant-b", waiting=10, running=0, paused=False, concurrency=None, rate=(10, 60.0)),
        GroupInfo("tenant-a", waiting=5, running=1, paused=False, concurrency=None, rate=None),
        GroupInfo("tenant-c", waiting=3, running=0, paused=False, concurrency=2, rate=None),
        GroupInfo("tenant-d", waiting=0, running=0, paused=True, concurrency=None, rate=None),
    ]
    assert [g.name for g in groups("mail", limit=2, client=client)] == ["tenant-b", "tenant-a"]
    assert found[0].as_dict() == {"name": "tenant-b", "waiting": 10, "running": 0, "paused": False,
                                  "concurrency": None, "rate": (10, 60.0), "weight": 1, "overridden": ()}
    with pytest.raises(ValueError, match="limit"):
        groups("mail", limit=0, client=client)


def test_waiting_per_priority_level_highest_first(client):
    scene(client, "mail")
    found = lanes("mail", client=client)
    assert found == {9: 10, 5: 8, 0: 7}
    assert list(found) == [9, 5, 0]


def test_a_queue_without_lanes_has_no_groups_and_no_levels(client):
    scene(client, "mail")
    client.push("Echo", [1], queue="other")
    assert groups("other", client=client) == [] and lanes("other", client=client) == {}


def test_running_jobs_count_until_they_end_then_the_group_leaves_the_list(client, r, start):
    client.push(work, [1, 0, GATE], group="tenant-r")
    client.push(work, [2, 0, GATE], group="tenant-r", priority=9)
    start(concurrency=4)
    wait_until(lambda: len([x for x in r.lrange("test:ran", 0, -1) if b"work-start" in x]) == 2,
               message="both jobs running")
    assert groups("default", client=client) == [GroupInfo("tenant-r", 0, 2, False, None, None)]
    r.set(GATE, 1)
    wait_until(lambda: groups("default", client=client) == [], message="the group to drain")


def test_a_paused_group_is_not_staged_and_resuming_stages_it_at_once(client, r):
    pause_group("mail", "tenant-a", client=client)
    laned(client, "mail", 3, group="tenant-a")
    assert r.llen(client.keys.queue("mail")) == 0
    assert [(g.waiting, g.paused) for g in groups("mail", client=client)] == [(3, True)]
    assert client.redis.smembers(client.keys.lanes("mail") + ":paused") == {b"tenant-a"}
    resume_group("mail", "tenant-a", client=client)
    assert r.llen(client.keys.queue("mail")) == 3  # at once: not at the next poller pass
    assert [(g.waiting, g.running, g.paused) for g in groups("mail", client=client)] == [(0, 3, False)]
    resume_group("mail", "never-paused", client=client)  # no error: nothing to resume


def test_group_names_are_kept_as_given(client):
    fill(client, "mail")
    odd = ["<script>alert(1)</script>", "tenant:42:eu", "überall", "42"]
    for n, name in enumerate(odd, start=1):
        laned(client, "mail", n, group=name)
    assert {g.name: g.waiting for g in groups("mail", client=client)} == dict(zip(odd, [1, 2, 3, 4], strict=True))
    laned(client, "mail", 1, group=42)  # an int group is its text
    assert {g.name: g.waiting for g in groups("mail", client=client)}["42"] == 5


def test_clearing_a_queue_deletes_its_lanes_and_no_other_queues(client):
    pushed = scene(client, "mail")
    pause_group("mail", "tenant-b", client=client)
    scene(client, "mailer")  # its lanes' names begin with mail's: untouched
    before = lane_keys(client, "mailer")
    assert len(lane_keys(client, "mail")) > 10
    assert Queue("mail", client).clear() == pushed
    assert lane_keys(client, "mail") == [client.keys.lanes("mail") + ":paused"]  # the operator's pause stays
    assert Queue("mail", client).size == 0
    assert lane_keys(client, "mailer") == before and lanes("mailer", client=client) == {9: 10, 5: 8, 0: 7}
    assert groups("mail", client=client) == [GroupInfo("tenant-b", 0, 0, True, None, None)]
    assert lanes("mail", client=client) == {}


def test_resetting_a_group_gives_its_slots_back_and_stages_its_next_job_at_once(client, r):
    fill(client, "mail")
    laned(client, "mail", 3, group="stuck", group_concurrency=1, priority=9)  # one staged at the head
    r.rpop(client.keys.queue("mail"))  # taken where sidequest never hears of its end (a Ruby worker)
    assert groups("mail", client=client) == [GroupInfo("stuck", 2, 1, False, 1, None)]
    assert reset_group("mail", "stuck", client=client) == 1
    assert groups("mail", client=client) == [GroupInfo("stuck", 1, 1, False, 1, None)]  # the next one staged
    assert r.llen(client.keys.queue("mail")) == 33
    assert reset_group("mail", "no-such-group", client=client) == 0


def test_an_operators_limits_win_over_the_jobs_until_cleared_and_outlive_the_groups_jobs(client, r):
    from sidequest.api import clear_group_limits, set_group_limits
    from sidequest.store.lanes import LaneKeys

    laned(client, "mail", 5, group="t", group_concurrency=1, group_weight=2)
    assert Queue("mail", client).size == 1  # its concurrency of 1: the other 4 wait
    info = set_group_limits("mail", "t", concurrency=3, weight=5, client=client)  # held: looked at again, staged
    assert (info.concurrency, info.weight, info.overridden, info.running) == (3, 5, ("concurrency", "weight"), 3)
    assert Queue("mail", client).size == 3
    laned(client, "mail", 1, group="t", group_concurrency=1, group_rate=(100, 60))  # a push: its own part only
    [listed] = groups("mail", client=client)
    assert (listed.concurrency, listed.rate, listed.weight) == (3, (100, 60.0), 5)
    assert set_group_limits("mail", "t", rate=0, client=client).rate is None  # lifted, whatever the jobs say
    Queue("mail", client).clear()  # every job gone: the override stays, as a pause does
    assert clear_lanes_left(client) == [LaneKeys(client.keys.lanes("mail")).limits]
    assert [(g.name, g.overridden) for g in groups("mail", client=client)] == [("t", ("concurrency", "rate", "weight"))]
    assert clear_group_limits("mail", "t", "weight", client=client).weight == 1  # back to its jobs' (none now)
    clear_group_limits("mail", "t", client=client)
    assert groups("mail", client=client) == [] and clear_lanes_left(client) == []


def clear_lanes_left(client) -> list[str]:
    """The queue's lane keys that have no expiry (what would stay for good)."""
    return [key for key in lane_keys(client, "mail") if client.redis.ttl(key) == -1]


@pytest.mark.parametrize(("given", "said"), [
    ({"weight": 0}, "weight must be an int from 1 to 1,000"), ({"concurrency": -1}, "concurrency must be"),
    ({"rate": (1, 0)}, "rate must be"), ({}, "give weight="),
])
def test_a_wrong_override_is_one_line_and_writes_nothing(client, r, given, said):
    from sidequest.api import set_group_limits

    with pytest.raises(ValueError, match=said):
        set_group_limits("mail", "t", client=client, **given)
    assert r.dbsize() == 0


def test_counting_the_levels_of_3000_groups_stops_at_its_limit_and_says_how_many_were_not_read(client, r):
    from store.lanes.test_lua import hold

    from sidequest.api.groups import count_levels

    hold(r, "mail", 3_000)  # 3,000 held groups with one job each, at level 5
    assert count_levels("mail", client=client) == ({5: 3_000}, 0) and lanes("mail", client=client) == {5: 3_000}
    counts, unread = count_levels("mail", 1_000, client)
    assert 1_000 <= counts[5] < 3_000 and counts[5] + unread == 3_000, (counts, unread)  # a page or two, not all
