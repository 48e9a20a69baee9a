"""A queue's lanes as an operator sees them: its fairness groups (waiting, running, limits,
paused, weight) and its jobs waiting per priority level; pausing, resuming and resetting a group;
an operator's overrides of its weight, concurrency and rate; clearing lanes.

Laned jobs (pushed with `group=` or `priority=`) wait in the queue's lanes until staging moves
them into `queue:<q>` (see `store.lanes`). What is read here is the lanes' own bookkeeping, kept
by the core's scripts: `B:waiting` (group -> waiting), `B:busy` and `B:running:<g>` (staged or
running), `B:limits`, `B:paused`; a few round trips whatever the number of groups.

    groups("mail")                 # [GroupInfo(name="tenant-42", waiting=9000, running=2, ...), ...]
    pause_group("mail", "tenant-42"); resume_group("mail", "tenant-42")
    reset_group("mail", "tenant-42")   # its slots given back at once (they also heal by themselves)
    set_group_limits("mail", "tenant-42", weight=4, concurrency=10)  # over its jobs' options, until cleared
    clear_group_limits("mail", "tenant-42", "weight")                 # its jobs' weight again
    parse_rate("100/60")           # (100, 60.0): a rate as an operator types it (CLI, dashboard); "0": no rate
    lanes("mail")                  # {9: 3, 5: 120}: waiting jobs per priority level, highest first

In Cluster mode every key of a queue's lanes shares the queue's hash tag, so each call here
stays in the queue's slot.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, cast

from sidequest.client.sync_client import Client, default_client
from sidequest.jobs.options import MAX_GROUP_WEIGHT, MAX_LANE_COUNT, group_rate_of, group_weight_of
from sidequest.store.lanes import CLEAR_LANES, WAITING_PAGE, LaneKeys, lane_sizes, parse_limits
from sidequest.store.lanes.admin import RESET_GROUP, RESUME_GROUP, SET_GROUP_LIMITS
from sidequest.store.lanes.limits import NAMES, override_args

NO_GROUP = ""  # the `B:waiting` field of laned jobs without a group (priority only): not a group

@dataclass(frozen=True)
class GroupInfo:
    """One fairness group of a queue."""

    name: str
    waiting: int  # jobs in its lanes, not yet staged into the queue
    running: int  # jobs staged into the queue or running (what `concurrency` caps)
    paused: bool  # skipped by staging until resumed; its staged and running jobs go on
    concurrency: int | None  # at most this many staged or running at once, across the fleet
    rate: tuple[int, float] | None  # at most (count, per period seconds) staged
    weight: int = 1  # its share of its level's turns (`group_weight`)
    overridden: tuple[str, ...] = ()  # which of concurrency, rate, weight an operator set (`set_group_limits`)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def groups(queue: str, limit: int = 100, client: Client | None = None) -> list[GroupInfo]:
    """The queue's groups with jobs waiting or running (or paused), the largest (waiting +
    running) first, then by name; at most `limit`."""
    if limit < 1:
        raise ValueError("limit must be >= 1")
    chosen = client or default_client()
    lane = _lane_keys(chosen, queue)
    pipe = chosen.redis.pipeline(transaction=False)
    pipe.hgetall(lane.waiting)
    pipe.smembers(lane.busy)
    pipe.smembers(lane.paused)
    pipe.hgetall(lane.limits)
    waiting_raw, busy_raw, paused_raw, limits_raw = pipe.execute()
    waiting = {_text(g): int(n) for g, n in cast("dict[bytes, bytes]", waiting_raw).items() if int(n) > 0}
    paused = {_text(g) for g in cast("set[bytes]", paused_raw)}
    running = _running(chosen, lane, sorted(_text(g) for g in cast("set[bytes]", busy_raw)))
    limits = {_text(g): _text(v) for g, v in cast("dict[bytes, bytes]", limits_raw).items()}
    overridden = {g for g, v in limits.items() if ";" in v}  # kept until removed, as a pause
    names = (set(waiting) | {g for g, n in running.items() if n} | paused | overridden) - {NO_GROUP}
    found = [_info(name, waiting.get(name, 0), running.get(name, 0), name in paused, limits.get(name))
             for name in names]
    found.sort(key=lambda g: (-(g.waiting + g.running), g.name))
    return found[:limit]


def pause_group(queue: str, group: str, client: Client | None = None) -> None:
    """Staging skips the group from now on: its waiting jobs stay in their lanes (those already
    staged into the queue, and those running, go on)."""
    chosen = client or default_client()
    chosen.redis.sadd(_lane_keys(chosen, queue).paused, group)


def resume_group(queue: str, group: str, client: Client | None = None) -> None:
    """The group takes turns again, at once: in one call it leaves the paused set, comes back to
    its turns where staging had set it aside (`lanes`: held groups), and the lanes are staged."""
    chosen = client or default_client()
    script = chosen.redis.register_script(RESUME_GROUP)
    script(keys=[_lane_keys(chosen, queue).base, chosen.keys.queue(queue)], args=[group])


def lanes(queue: str, client: Client | None = None, limit: int | None = None) -> dict[int, int]:
    """Jobs waiting in the queue's lanes per priority level (9 runs first), highest level first;
    levels without waiting jobs are absent. Jobs already staged into `queue:<q>` are the queue's.
    With `limit`, only the lanes of the first `limit` or so groups read are counted
    (`count_levels` says how many were not)."""
    return count_levels(queue, limit, client)[0]


def count_levels(queue: str, limit: int | None = None, client: Client | None = None) -> tuple[dict[int, int], int]:
    """`lanes`' counts, read a page of groups a round trip (`store.lanes.lane_sizes`), and how many
    groups with waiting jobs were not read because `limit` was reached (0: the counts are whole).
    The dashboard counts 10,000 groups at most, so a queue with 100,000 tenants costs a refresh
    a bounded number of round trips."""
    chosen = client or default_client()
    base, counts, read = chosen.keys.lanes(queue), dict[int, int](), 0
    for found in lane_sizes(chosen.redis, base, min(limit or WAITING_PAGE, WAITING_PAGE)):
        for level, _, _, size in found:
            counts[level] = counts.get(level, 0) + size
        read += len({group for _, group, _, _ in found})
        if limit is not None and read >= limit:
            break
    unread = 0 if limit is None or read < limit else max(int(chosen.redis.hlen(LaneKeys(base).waiting)) - read, 0)
    return {level: counts[level] for level in sorted(counts, reverse=True) if counts[level]}, unread


def lanes_waiting(queues: list[str], client: Client | None = None) -> dict[str, int]:
    """Jobs waiting in each queue's lanes (pushed with a group or a priority, not yet staged into
    `queue:<q>`, so not in its size or latency): one round trip for every queue."""
    chosen = client or default_client()
    pipe = chosen.redis.pipeline(transaction=False)
    for queue in queues:
        pipe.hvals(_lane_keys(chosen, queue).waiting)
    return {queue: sum(int(n) for n in counts) for queue, counts in zip(queues, pipe.execute(), strict=True)}


def clear_lanes(queue: str, client: Client | None = None) -> int:
    """Delete the jobs waiting in the queue's lanes (with their turns and counts), a bounded call
    at a time; how many went. `Queue.clear` calls it before emptying the list, so staging cannot
    refill the queue meanwhile. A paused group stays paused; jobs already staged or running keep
    their group's slots until they end (a staged job that `Queue.clear` deletes gives its back)."""
    chosen = client or default_client()
    script = chosen.redis.register_script(CLEAR_LANES)
    base, deleted, more = _lane_keys(chosen, queue).base, 0, 1
    while more:
        found, more = cast("list[int]", script(keys=[base]))
        deleted += int(found)
    return deleted


def reset_group(queue: str, group: str, client: Client | None = None) -> int:
    """Give back every slot of the group at once: the jobs it counts as staged or running (what
    `group_concurrency` caps) are counted no more, and its `group_rate` window ends; then the
    queue's lanes are staged. For a group held full by jobs that ended where sidequest could not
    see (the slots also come back by themselves, see `lanes.slots`). Its jobs still staged or
    running go on, so until they end the group may run more than its concurrency. Returns how
    many slots it held."""
    chosen = client or default_client()
    script = chosen.redis.register_script(RESET_GROUP)
    return int(cast("int", script(keys=[_lane_keys(chosen, queue).base, chosen.keys.queue(queue)], args=[group])))


def set_group_limits(queue: str, group: str, *, weight: int | None = None, concurrency: int | None = None,
                     rate: tuple[int, float] | int | None = None, client: Client | None = None) -> GroupInfo:
    """Override the group's limits at run time, over its jobs' options, until removed
    (`clear_group_limits`): each one given replaces that limit, the others stay as they were.
    `concurrency=0` or `rate=0` lifts that limit whatever its jobs say. The group is looked at
    again at once (a held group takes turns again if its new limits allow) and the lanes are
    staged; a new weight counts from the group's next turn. Returns the group as it is now."""
    _check_override(weight, concurrency, rate)
    return _override(queue, group, override_args(concurrency, rate, weight), client)


def clear_group_limits(queue: str, group: str, *limits: str, client: Client | None = None) -> GroupInfo:
    """Remove the group's overrides (`set_group_limits`) named in `limits` ("concurrency",
    "rate", "weight"), or all of them: its jobs' options apply again. Returns the group as it is now."""
    unknown = [name for name in limits if name not in NAMES]
    if unknown:
        raise ValueError(f"no such group limit {unknown[0]!r}: the limits are {', '.join(NAMES)}")
    return _override(queue, group, override_args(None, None, None, removed=limits or NAMES), client)


def parse_rate(text: str) -> tuple[int, float] | int:
    """A rate as an operator types it, `COUNT/SECONDS` (`100/60`) or `0` (no rate), as
    `set_group_limits` takes it; ValueError with one line for anything else (the bounds are
    `set_group_limits`' to check). The CLI's `--rate` and the dashboard's form read it here."""
    if text.strip() == "0":
        return 0
    count, slash, seconds = text.partition("/")
    try:
        if slash:
            return int(count), float(seconds)
    except ValueError:
        pass
    raise ValueError(f"rate must be COUNT/SECONDS (e.g. 100/60) or 0, got {text!r}")


def _override(queue: str, group: str, args: list[str], client: Client | None) -> GroupInfo:
    if not group:
        raise ValueError("a group's name must not be empty")
    chosen = client or default_client()
    lane = _lane_keys(chosen, queue)
    script = chosen.redis.register_script(SET_GROUP_LIMITS)
    stored = _text(script(keys=[lane.base, chosen.keys.queue(queue)], args=[group, *args]))
    pipe = chosen.redis.pipeline(transaction=False)
    pipe.hget(lane.waiting, group)
    pipe.scard(lane.running(group))
    pipe.sismember(lane.paused, group)
    waiting, running, paused = pipe.execute()
    return _info(group, int(waiting or 0), int(running), bool(paused), stored or None)


def _check_override(weight: int | None, concurrency: int | None, rate: tuple[int, float] | int | None) -> None:
    """One line a user can act on, before anything is written."""
    if weight is not None and group_weight_of(weight) is None:
        raise ValueError(f"weight must be an int from 1 to {MAX_GROUP_WEIGHT:,}, got {weight!r}")
    if concurrency is not None and not (concurrency == 0 or (isinstance(concurrency, int) and not isinstance(
            concurrency, bool) and 0 < concurrency <= MAX_LANE_COUNT)):
        raise ValueError(f"concurrency must be an int from 0 (no cap) to {MAX_LANE_COUNT:,}, got {concurrency!r}")
    if rate is not None and rate != 0 and group_rate_of(rate) is None:
        raise ValueError(f"rate must be (count, seconds) as a job's group_rate, or 0 (no rate), got {rate!r}")
    if weight is None and concurrency is None and rate is None:
        raise ValueError("give weight=, concurrency= or rate= (clear_group_limits removes overrides)")


def _info(name: str, waiting: int, running: int, paused: bool, stored: str | None) -> GroupInfo:
    limits = parse_limits(stored)
    return GroupInfo(name, waiting, running, paused, limits.concurrency, limits.rate, limits.weight, limits.overridden)


def _lane_keys(client: Client, queue: str) -> LaneKeys:
    return LaneKeys(client.keys.lanes(queue))


def _running(client: Client, lane: LaneKeys, busy: list[str]) -> dict[str, int]:
    """Jobs staged or running per busy group: one SCARD each, in one round trip."""
    if not busy:
        return {}
    pipe = client.redis.pipeline(transaction=False)
    for group in busy:
        pipe.scard(lane.running(group))
    return {group: int(n) for group, n in zip(busy, pipe.execute(), strict=True)}


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
