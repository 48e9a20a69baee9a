"""Lanes: a queue's jobs pushed with a group (fairness between tenants) or a priority.

    @sidequest.job(group=lambda tenant_id, **_: tenant_id, group_concurrency=2)
    def sync(tenant_id, ...): ...     # tenants take turns; at most 2 of one tenant at once

    urgent.set(priority=9).perform_async(...)   # before the queue's other jobs (0..9, 5 the middle)

A job with a `group` or a `priority` (a *laned* job) is not pushed onto `queue:<q>`: it waits in
its lane, one list per (priority level, group), and is **staged** into `queue:<q>`, the list every
fetch reads, a few at a time. So fetch, the crash contract (reserved lists, recovery, put-back),
blocking waiters and a Ruby worker see only ordinary jobs in an ordinary queue, and a job without
these options costs nothing more. Staging (`stage`, Lua, atomic):

- levels 6..9 go to the HEAD of the queue (RPUSH: they run next), all that wait up to LANE_DEPTH,
  highest level first, in push order; the next batch goes there once the job staged deepest
  (`B:head`) has been taken, so the order within a level holds;
- levels 0..5 go to the tail (LPUSH, as a push) while the queue holds fewer than LANE_DEPTH jobs:
  the queue's plain jobs run before them, and a group with 100,000 waiting jobs has at most a
  few dozen in the queue at any time;
- within a level the groups take turns (a rotation list, `B:<level>`); a group that is paused,
  has `group_concurrency` jobs staged or running, or has used its `group_rate` for the current
  window is *held*: staging moves it out of the rotation into `B:held:<level>`, scored by when
  to look at it again (its rate window's end; `inf` for an event), and it comes back to the tail
  of the rotation when that time has come (at most HELD_GRAIN a level a call) or when the event
  happens (`lane_wake`: a resume, one of its jobs ending or its slot healing, an operator's
  reset, a push with new limits). A group that uses its last slot or its rate with the job it
  stages is held at once. So a call never passes over held groups, and its turns are bounded
  (its jobs + TURN_SLACK): staging costs O(1) in the number of groups, held or not;
- a group of `group_weight` w takes w turns in a row (a run that a call's budget cuts short goes
  on in the next call, `B:streak:<level>`), so its share of its level's jobs is w / the sum of
  the weights of the groups in turn; an operator's override of its weight, concurrency or rate
  (`api.groups.set_group_limits`) wins over its jobs' options.

Staging runs where a laned job is pushed (the push's script), where one ends (the lanes
feature's lifecycle operation: finished, retried, dead, dropped, snoozed, cancelled, deleted,
killed; after a job of level 0..5 only once the queue holds fewer than LANE_REFILL jobs, so a
busy queue is refilled a batch at a time rather than one job per end), where one comes back due
from `schedule` or `retry` (the poller's ENQUEUE_DUE, an operator's requeue), and at each poller
pass (STAGE, for a rate window that has passed or plain jobs that have drained). An operator's
cancel of a job still in its lane removes it there (ADMIN_DELETE_LANED, `lane_removed`). A
group's staged and running jobs are the jids in `B:running:<group>` (each staged job's own jid,
read from its JSON: an argument may hold a "jid" too), removed at the job's end, in the lanes of
the queue it ran from (a retry's payload names its `retry_queue` already); a job put back or
recovered goes to the head of the queue and stays counted until it ends. A slot whose job ended
where sidequest could not see it comes back by itself (`lanes.slots`), or at an operator's
`reset_group`. The scripts are in `lanes.staging` (a staging call's), `lanes.lua` (the push's, the end's,
a wake's) and `lanes.admin` (an operator's).

Limits come from the push's options, checked there (`options.group_rate_of`); a payload from
elsewhere with limits a push would refuse has them ignored, with one log line (`limits_of`).

Keys, under the base B = `Keyspace.lanes(queue)`, `sidequest:lanes:<length of q>:<q>` (the length
keeps queue `a`'s `B:5` apart from queue `a:5`'s B; in Cluster mode in the queue's slot):

    B                      set of the levels with waiting jobs
    B:<level>              list: the level's groups with waiting jobs, in turn ('' = no group)
    B:held:<level>         sorted set: the level's held groups, score = ms when to look again (inf: at an event)
    B:<level>:<group>      list: the lane's waiting jobs (LPUSH, RPOP: oldest first)
    B:waiting              hash: group -> waiting jobs over all levels
    B:busy                 set: groups with jobs staged or running
    B:running:<group>      set: their jids
    B:limits               hash: group -> its limits: its last push's (none stored when it had none), and an
                           operator's overrides, which stay until removed (`lanes.limits`)
    B:streak:<level>       the weighted group at the head of the level's turns and how many it took in a row
                           (expires: HEAD_TTL_MS)
    B:paused               set: groups an operator paused
    B:rate:<group>         the group's count in its current rate window (expires with it)
    B:head                 the job staged deepest in the last batch at the head (expires: HEAD_TTL_MS)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sidequest.store import keys
from sidequest.store.lanes.admin import ADMIN_DELETE_LANED, CLEAR_GRAIN, CLEAR_LANES
from sidequest.store.lanes.limits import Limits, limits_of, parse_limits
from sidequest.store.lanes.lua import (
    DEFAULT_LEVEL,
    HEAD_TTL_MS,
    LANE_DEPTH,
    LANE_REFILL,
    LANES_LUA,
    STAGE,
)

__all__ = ["ADMIN_DELETE_LANED", "CLEAR_GRAIN", "CLEAR_LANES", "DEFAULT_LEVEL", "HEAD_TTL_MS", "LANES_LUA",
           "LANE_DEPTH", "LANE_REFILL", "STAGE", "WAITING_PAGE", "LaneKeys", "Limits", "group_of", "lane_sizes",
           "level_of", "limits_of", "parse_limits", "route", "waiting_lanes"]

LEVELS = range(10)

LaneArgs = tuple[str, str, str, str]  # lanes base, level, group, limits: what the scripts take


class LaneKeys:
    """The names of one queue's lane keys (see the module), from its base `Keyspace.lanes(queue)`."""

    def __init__(self, base: str) -> None:
        self.base = self.levels = base
        self.waiting = f"{base}:waiting"
        self.busy = f"{base}:busy"
        self.limits = f"{base}:limits"
        self.paused = f"{base}:paused"
        self.head = f"{base}:head"

    def rotation(self, level: int | str) -> str:
        return f"{self.base}:{level}"

    def lane(self, level: int | str, group: str) -> str:
        return f"{self.base}:{level}:{group}"

    def running(self, group: str) -> str:
        return f"{self.base}:running:{group}"

    def rate(self, group: str) -> str:
        return f"{self.base}:rate:{group}"

    def held(self, level: int | str) -> str:
        return f"{self.base}:held:{level}"

    def streak(self, level: int | str) -> str:
        return f"{self.base}:streak:{level}"


def level_of(payload: Mapping[str, Any]) -> int:
    """A payload's priority level: its `priority` (0..9), else the default."""
    level = payload.get("priority")
    return level if isinstance(level, int) and not isinstance(level, bool) and level in LEVELS else DEFAULT_LEVEL


def group_of(payload: Mapping[str, Any]) -> str:
    group = payload.get("group")
    return "" if group is None else str(group)


def route(payload: Mapping[str, Any], space: keys.Keyspace, queue: str | None = None) -> LaneArgs | None:
    """The lane of a payload about to enter its queue (`queue`, default its own), or None for a
    plain job (no group, no priority): the scripts' lane arguments."""
    if "group" not in payload and "priority" not in payload:
        return None
    group = group_of(payload)
    return (space.lanes(queue or str(payload.get("queue") or "default")), str(level_of(payload)), group,
            limits_of(payload) if group else "")


NO_LANE = ("", "", "", "")


WAITING_PAGE = 1_000  # groups `waiting_lanes` reads a round trip (one HSCAN, then one pipeline of LLENs)


def waiting_lanes(client: Any, base: str, page: int = WAITING_PAGE) -> Iterator[tuple[int, str, str]]:
    """(level, group, lane key) of every lane of the queue whose base is `base` that holds
    waiting jobs (`lane_sizes` without the sizes)."""
    for found in lane_sizes(client, base, page):
        yield from ((level, group, key) for level, group, key, _ in found)


def lane_sizes(client: Any, base: str, page: int = WAITING_PAGE) -> Iterator[list[tuple[int, str, str, int]]]:
    """The queue's lanes with waiting jobs, (level, group, lane key, jobs), a page of groups at a
    time: the groups come from `B:waiting` (every group with waiting jobs, in its turn or held) by
    HSCAN, and each page's lanes are measured with one pipeline of LLENs (one per level in `B`, at
    most 10). So a round trip's work is bounded by `page`, whatever the number of groups, and a
    caller that stops early (cancel, once it found its job) reads no further; a group that waits
    from the walk's start to its end is met (HSCAN's guarantee), at most once per page it is
    returned in. Within a page, each group's levels come highest first."""
    lane = LaneKeys(base)
    levels = sorted((int(level) for level in client.smembers(lane.levels)), reverse=True)
    cursor: int | None = None
    while cursor != 0 and levels:
        cursor, fields = client.hscan(lane.waiting, cursor or 0, count=page)
        groups = [raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw) for raw in fields]
        pipe = client.pipeline(transaction=False)
        for group in groups:
            for level in levels:
                pipe.llen(lane.lane(level, group))
        sizes = iter(pipe.execute() if groups else [])
        found = [(level, group, lane.lane(level, group), int(next(sizes))) for group in groups for level in levels]
        yield [entry for entry in found if entry[3]]
