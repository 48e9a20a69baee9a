"""The admin API of a queue's lanes: its fairness groups (largest first, limits, paused), pausing
and resuming one, its waiting jobs per priority level, and clearing the queue with its lanes.

The lanes' state is written here as the core's scripts leave it (API31.md's key layout), so
each number read is known exactly."""

from __future__ import annotations

import json

import pytest
from lane_state import LaneState

from sidequest.api import GroupInfo, Queue, groups, lanes, pause_group, resume_group


@pytest.fixture
def mail(client) -> LaneState:
    return LaneState(client, "mail")


def test_groups_are_listed_largest_first_with_their_limits_and_pause(client, mail):
    mail.waiting("tenant-a", 5)
    mail.running("tenant-a", 1)
    mail.waiting("tenant-b", 10, level=9)
    mail.running("tenant-c", 2)
    mail.limits("tenant-c", concurrency=2)
    mail.limits("tenant-b", count=10, period_ms=60_000)
    mail.waiting("", 7)  # laned by priority alone: no group
    pause_group("mail", "tenant-d", client=client)  # paused while it has nothing
    found = groups("mail", client=client)
    assert found == [
        GroupInfo("tenant-b", waiting=10, running=0, paused=False, concurrency=None, rate=(10, 60.0)),
        GroupInfo("tenant-a", waiting=5, running=1, paused=False, concurrency=None, rate=None),
        GroupInfo("tenant-c", waiting=0, running=2, paused=False, concurrency=2, rate=None),
        GroupInfo("tenant-d", waiting=0, running=0, paused=True, concurrency=None, rate=None),
    ]
    assert [g.name for g in groups("mail", limit=2, client=client)] == ["tenant-b", "tenant-a"]
    assert found[0].as_dict() == {"name": "tenant-b", "waiting": 10, "running": 0, "paused": False,
                                  "concurrency": None, "rate": (10, 60.0)}
    with pytest.raises(ValueError, match="limit"):
        groups("mail", limit=0, client=client)


def test_a_queue_without_lanes_has_no_groups_and_no_levels(client, mail):
    client.redis.lpush("queue:mail", "{}")
    mail.waiting("tenant-a", 1)  # another queue's lanes are not this one's
    assert groups("other", client=client) == [] and lanes("other", client=client) == {}


def test_a_drained_group_leaves_the_list(client, mail):
    mail.waiting("tenant-a", 2)
    mail.running("tenant-b", 1)
    client.redis.hset(f"{mail.base}:waiting", "tenant-a", 0)  # its jobs all staged, then ended
    client.redis.srem(f"{mail.base}:running:tenant-b", "run-tenant-b-0")
    assert groups("mail", client=client) == []


def test_pause_and_resume_a_group(client, mail):
    mail.waiting("tenant-a", 3)
    pause_group("mail", "tenant-a", client=client)
    assert [g.paused for g in groups("mail", client=client)] == [True]
    assert client.redis.smembers(f"{mail.base}:paused") == {b"tenant-a"}
    resume_group("mail", "tenant-a", client=client)
    assert [g.paused for g in groups("mail", client=client)] == [False]
    resume_group("mail", "never-paused", client=client)  # no error: nothing to resume


def test_waiting_per_priority_level_highest_first(client, mail):
    mail.waiting("tenant-a", 2, level=9)
    mail.waiting("tenant-b", 1, level=9)
    mail.waiting("", 4, level=5)
    mail.waiting("tenant-a", 1, level=0)
    found = lanes("mail", client=client)
    assert found == {9: 3, 5: 4, 0: 1}
    assert list(found) == [9, 5, 0]


def test_group_names_are_kept_as_given(client, mail):
    odd = ["<script>alert(1)</script>", "tenant:42:eu", "überall", "42"]
    for n, name in enumerate(odd, start=1):
        mail.waiting(name, n)
    assert {g.name: g.waiting for g in groups("mail", client=client)} == dict(zip(odd, [1, 2, 3, 4], strict=True))
    assert lanes("mail", client=client) == {5: 10}


def test_clearing_a_queue_deletes_its_lanes_and_no_other_queues(client, mail):
    client.redis.lpush("queue:mail", *(json.dumps({"class": "Echo", "args": [i], "queue": "mail",
                                                   "jid": f"{1000 + i:024x}"}) for i in range(3)))
    client.redis.sadd("queues", "mail")
    mail.waiting("tenant-a", 4, level=9)
    mail.waiting("tenant-b", 2)
    mail.waiting("", 1, level=0)
    mail.running("tenant-a", 2)
    mail.limits("tenant-a", concurrency=2, count=5, period_ms=60_000)
    pause_group("mail", "tenant-b", client=client)
    other = LaneState(client, "mailer")  # its base begins with mail's: untouched
    other.waiting("tenant-a", 1)
    other.limits("tenant-a", concurrency=1)
    before = other.keys()
    assert len(mail.keys()) > 10
    assert Queue("mail", client).clear() == 3 + 7
    assert mail.keys() == [] and client.redis.llen("queue:mail") == 0
    assert other.keys() == before and groups("mailer", client=client)[0].waiting == 1
    assert groups("mail", client=client) == [] and lanes("mail", client=client) == {}
