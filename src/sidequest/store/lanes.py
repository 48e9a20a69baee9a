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
- within a level the groups take turns (a rotation list): a group that is paused, has
  `group_concurrency` jobs staged or running, or has used its `group_rate` for the current
  window is passed over.

Staging runs where a laned job is pushed (the push's script), where one ends (the lanes
feature's lifecycle operation: finished, retried, dead, dropped, snoozed, cancelled, deleted,
killed; after a job of level 0..5 only once the queue holds fewer than LANE_REFILL jobs, so a
busy queue is refilled a batch at a time rather than one job per end), where one comes back due
from `schedule` or `retry` (the poller's ENQUEUE_DUE, an operator's requeue), and at each poller
pass (STAGE, for a rate window that has passed or plain jobs that have drained). An operator's
cancel of a job still in its lane removes it there (ADMIN_DELETE_LANED, `lane_removed`). A
group's staged and running jobs are the jids in `B:running:<group>`, removed at the job's end; a
job put back or recovered goes to the head of the queue and stays counted until it ends.

Keys, under the base B = `Keyspace.lanes(queue)` (in Cluster mode in the queue's slot):

    B                      set of the levels with waiting jobs
    B:<level>              list: the level's groups with waiting jobs, in turn ('' = no group)
    B:<level>:<group>      list: the lane's waiting jobs (LPUSH, RPOP: oldest first)
    B:waiting              hash: group -> waiting jobs over all levels
    B:busy                 set: groups with jobs staged or running
    B:running:<group>      set: their jids
    B:limits               hash: group -> "<concurrency> <rate count> <rate ms>" (0: none), its last push's
    B:paused               set: groups an operator paused
    B:rate:<group>         the group's count in its current rate window (expires with it)
    B:head                 the job staged deepest in the last batch at the head (expires: HEAD_TTL_MS)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sidequest.store import keys

LANE_DEPTH = 32  # laned jobs staged into a queue at once (the fairness grain)
LANE_REFILL = LANE_DEPTH // 2  # a laned job's end stages more once the queue holds fewer than this
DEFAULT_LEVEL = 5  # a job with a group and no priority; above it: staged at the head
LEVELS = range(10)
HEAD_TTL_MS = 3_600_000  # `B:head` outlives its batch an hour at most (untaken that long: no one works the queue)

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


def level_of(payload: Mapping[str, Any]) -> int:
    """A payload's priority level: its `priority` (0..9), else the default."""
    level = payload.get("priority")
    return level if isinstance(level, int) and not isinstance(level, bool) and level in LEVELS else DEFAULT_LEVEL


def group_of(payload: Mapping[str, Any]) -> str:
    group = payload.get("group")
    return "" if group is None else str(group)


def limits_of(payload: Mapping[str, Any]) -> str:
    """`B:limits`'s value for a grouped payload: concurrency, rate count, rate window (ms)."""
    concurrency = payload.get("group_concurrency")
    rate = payload.get("group_rate")
    count, ms = 0, 0
    if isinstance(rate, (list, tuple)) and len(rate) == 2:
        count, ms = int(rate[0]), max(int(float(rate[1]) * 1000), 1)
    return f"{int(concurrency) if isinstance(concurrency, int) else 0} {count} {ms}"


def parse_limits(stored: str | None) -> tuple[int | None, tuple[int, float] | None]:
    """`B:limits`' value (`limits_of`) read back: (concurrency, (rate count, seconds)), None for none."""
    if not stored:
        return None, None
    concurrency, count, period_ms = (int(part) for part in stored.split())
    return concurrency or None, ((count, period_ms / 1000) if count else None)


def route(payload: Mapping[str, Any], space: keys.Keyspace, queue: str | None = None) -> LaneArgs | None:
    """The lane of a payload about to enter its queue (`queue`, default its own), or None for a
    plain job (no group, no priority): the scripts' lane arguments."""
    if "group" not in payload and "priority" not in payload:
        return None
    group = group_of(payload)
    return (space.lanes(queue or str(payload.get("queue") or "default")), str(level_of(payload)), group,
            limits_of(payload) if group else "")


NO_LANE = ("", "", "", "")


def waiting_lanes(client: Any, base: str) -> list[tuple[int, str, str]]:
    """(level, group, lane key) of every lane of the queue whose base is `base` that holds
    waiting jobs, highest level first, each level's groups in their turn: two round trips."""
    lane = LaneKeys(base)
    levels = sorted((int(level) for level in client.smembers(lane.levels)), reverse=True)
    pipe = client.pipeline(transaction=False)
    for level in levels:
        pipe.lrange(lane.rotation(level), 0, -1)
    found = []
    for level, groups in zip(levels, pipe.execute(), strict=True):
        for raw in groups:
            group = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
            found.append((level, group, lane.lane(level, group)))
    return found

# The lanes' Lua, shared by the scripts that push, stage and end laned jobs (`scripts.core_lib`,
# the push's script, ENQUEUE_DUE). Paths under B are built by suffix here, as `LaneKeys` builds them.
LANES_LUA = """
local LANE_DEPTH, LANE_HIGH, HEAD_TTL, LANE_REFILL = {depth}, {default}, {head_ttl}, {refill}
local function lane_limits(base, group)
  local limits = redis.call('hget', base .. ':limits', group)
  if not limits then return 0, 0, 0 end
  local c, n, ms = string.match(limits, '^(%d+) (%d+) (%d+)')
  return tonumber(c) or 0, tonumber(n) or 0, tonumber(ms) or 0
end
-- Whether `group` may stage one more now, and its rate (count, ms) to count it against.
local function lane_open(base, group, paused)
  if paused and redis.call('sismember', base .. ':paused', group) == 1 then return false end
  local concurrency, count, ms = lane_limits(base, group)
  if concurrency > 0 and redis.call('scard', base .. ':running:' .. group) >= concurrency then return false end
  if count > 0 and tonumber(redis.call('get', base .. ':rate:' .. group) or '0') >= count then return false end
  return true, count, ms
end
local function lane_count(base, group, job, count, ms)
  local jid = string.match(job, '"jid":%s*"([^"]+)"')
  if jid then
    redis.call('sadd', base .. ':running:' .. group, jid)
    redis.call('sadd', base .. ':busy', group)
  end
  if count > 0 and redis.call('incr', base .. ':rate:' .. group) == 1 then
    redis.call('pexpire', base .. ':rate:' .. group, ms)
  end
end
-- Move up to `budget` jobs of one level into `out`, the level's groups taking turns; a group
-- that may not stage now is passed over for the rest of the call. Returns whether the level is
-- exhausted (every group left is empty or passed over): only then may a lower level stage, so
-- a group held back never lets a lower level's job ahead of the open groups of this one. The
-- turns taken are bounded (`budget` and twice the groups), as a call's time must be; a level
-- cut short by that bound is not exhausted.
local function lane_take(base, level, budget, out)
  local rotation = base .. ':' .. level
  local groups, passed, turns = redis.call('llen', rotation), {}, 0
  local held, paused = 0, redis.call('exists', base .. ':paused') == 1
  while #out < budget and groups > held do
    turns = turns + 1
    if turns > budget + 2 * groups then return false end
    local group = redis.call('lmove', rotation, rotation, 'LEFT', 'RIGHT')
    if not passed[group] then
      local open, count, ms = true, 0, 0
      if group ~= '' then open, count, ms = lane_open(base, group, paused) end
      if open then
        local lane = base .. ':' .. level .. ':' .. group
        local job = redis.call('rpop', lane)
        if job then
          out[#out + 1] = job
          if group ~= '' then lane_count(base, group, job, count, ms) end
          local waiting = base .. ':waiting'
          if redis.call('hincrby', waiting, group, -1) <= 0 then redis.call('hdel', waiting, group) end
        end
        if redis.call('llen', lane) == 0 then
          redis.call('lrem', rotation, -1, group)
          groups = groups - 1
        end
      else
        passed[group], held = true, held + 1
      end
    end
  end
  if groups == 0 then redis.call('srem', base, level) end
  return groups <= held
end
-- Stage the lanes of the queue whose list is `queue` (see `lanes`); returns how many jobs moved.
local function stage(base, queue)
  local levels = redis.call('smembers', base)
  if #levels == 0 then return 0 end
  table.sort(levels, function(a, b) return tonumber(a) > tonumber(b) end)
  local head_free, head = true, redis.call('get', base .. ':head')
  if head then
    if redis.call('lpos', queue, head, 'RANK', -1, 'MAXLEN', LANE_DEPTH * 4) then
      head_free = false
    else
      redis.call('del', base .. ':head')
    end
  end
  local room, high, staged = LANE_DEPTH - redis.call('llen', queue), {}, 0
  for _, level in ipairs(levels) do
    local exhausted = true
    if tonumber(level) > LANE_HIGH then
      if head_free then exhausted = lane_take(base, level, LANE_DEPTH, high) end
    elseif room > 0 then
      local low = {}
      exhausted = lane_take(base, level, room, low)
      if #low > 0 then redis.call('lpush', queue, unpack(low)) end
      room, staged = room - #low, staged + #low
    end
    if not exhausted then break end  -- this level still has jobs that may go: none of a lower one first
  end
  if #high > 0 then  -- the first taken ends at the head: it runs first
    local reversed = {}
    for i = #high, 1, -1 do reversed[#reversed + 1] = high[i] end
    redis.call('rpush', queue, unpack(reversed))
    redis.call('set', base .. ':head', high[#high], 'PX', HEAD_TTL)
  end
  return staged + #high
end
local function lane_push(base, level, group, job, limits)
  if redis.call('lpush', base .. ':' .. level .. ':' .. group, job) == 1 then
    redis.call('rpush', base .. ':' .. level, group)
    redis.call('sadd', base, level)
  end
  redis.call('hincrby', base .. ':waiting', group, 1)
  if group ~= '' then redis.call('hset', base .. ':limits', group, limits) end
end
-- Where a laned job of `level` ends: the high levels stage at once (the next batch at the head),
-- the others once the queue has drained below LANE_REFILL, a batch at a time.
local function lane_ended(base, queue, level)
  if tonumber(level) > LANE_HIGH or redis.call('llen', queue) < LANE_REFILL then stage(base, queue) end
end
-- A job was removed from its lane (an operator's cancel): the counts and turns as if staged.
local function lane_removed(base, level, group)
  local waiting, rotation = base .. ':waiting', base .. ':' .. level
  if redis.call('hincrby', waiting, group, -1) <= 0 then redis.call('hdel', waiting, group) end
  if redis.call('llen', rotation .. ':' .. group) == 0 then
    redis.call('lrem', rotation, -1, group)
    if redis.call('llen', rotation) == 0 then redis.call('srem', base, level) end
  end
end
-- A laned job ended (or left for `schedule`/`retry`): its group no longer counts it.
local function lane_done(base, group, jid)
  if group == '' then return end
  local running = base .. ':running:' .. group
  if redis.call('srem', running, jid) == 1 and redis.call('scard', running) == 0 then
    redis.call('srem', base .. ':busy', group)
    if redis.call('hexists', base .. ':waiting', group) == 0 then
      redis.call('hdel', base .. ':limits', group)
    end
  end
end
"""
for _name, _value in (("depth", LANE_DEPTH), ("default", DEFAULT_LEVEL), ("head_ttl", HEAD_TTL_MS),
                      ("refill", LANE_REFILL)):
    LANES_LUA = LANES_LUA.replace("{" + _name + "}", str(_value))

# KEYS: the queue's lanes base, queue:<q>. Stage what may be (the poller's pass, a resumed group).
STAGE = LANES_LUA + """
if redis.call('exists', KEYS[1]) == 0 then return 0 end
return stage(KEYS[1], KEYS[2])
"""

# KEYS: a lane's list (`lanes`)   ARGV: entry, the queue's lanes base, level, group, now, point, ops...
# Registered after `scripts.core_lib` (it runs the lifecycle's operations). Delete (cancel) a laned
# job still waiting in its lane: remove one copy, and keep the lanes' counts and turns true
# (`lane_removed`).
ADMIN_DELETE_LANED = """
if redis.call('lrem', KEYS[1], 1, ARGV[1]) == 0 then
  return 0
end
lane_removed(ARGV[2], ARGV[3], ARGV[4])
run_ops(ARGV, 7, ARGV[6], ARGV[5])
return answer(1)
"""

# An operator's clear (`api.groups.clear_lanes`): delete every key of one queue's lanes at once,
# so a push or a staging meanwhile cannot leave a lane list that no rotation names. KEYS[1] = B:
# B:<level> (rotations), B:<level>:<group> (the lanes they name), B:running:<group> (the groups of
# B:busy), B:rate:<group> (the groups of B:limits and B:waiting; a drained group's expires with
# its window), B:waiting, B:busy, B:limits, B:paused, B:head. Returns how many waiting jobs went.
CLEAR_LANES = """
local base = KEYS[1]
local deleted = 0
for level = 0, 9 do
  local rotation = base .. ':' .. level
  for _, group in ipairs(redis.call('LRANGE', rotation, 0, -1)) do
    local lane = rotation .. ':' .. group
    deleted = deleted + redis.call('LLEN', lane)
    redis.call('DEL', lane)
  end
  redis.call('DEL', rotation)
end
for _, group in ipairs(redis.call('SMEMBERS', base .. ':busy')) do
  redis.call('DEL', base .. ':running:' .. group)
end
for _, counts in ipairs({'limits', 'waiting'}) do
  for _, group in ipairs(redis.call('HKEYS', base .. ':' .. counts)) do
    redis.call('DEL', base .. ':rate:' .. group)
  end
end
redis.call('DEL', base, base .. ':waiting', base .. ':busy', base .. ':limits', base .. ':paused', base .. ':head')
return deleted
"""
