"""The lanes' Lua (see `lanes` for the layout and the rules): the functions shared by the scripts
that push, stage and end laned jobs (`LANES_LUA`: `scripts.core_lib`, the push's script,
ENQUEUE_DUE, ADMIN_REQUEUE) and the poller's STAGE. Staging's own functions (a group's turn, the
held groups, `stage`) are in `lanes.staging`, with the bounds on a call's work; an operator's
scripts (and the slots' give-back) are in `lanes.admin`.

Two rules hold throughout:
- no value is read from a payload's text by pattern: a staged job's jid comes from
  `cjson.decode` (the job staged is not the one pushed, so it cannot be an argument), every
  other value is a script argument;
- a script checks what it will write before its first write (Lua has no rollback): `stage`
  checks the types of the queue's keys, then each group's keys and counts before it pops the
  group's job (its waiting count by the HINCRBY that is the group's first write, which errors
  having written nothing), and parks a group it cannot stage (a key set by hand) for RECHECK_MS; a limit
  read back from `B:limits` is used only within the bounds a push checks (`options.group_rate_of`).
  A held group's wake (`lane_wake`, run where a script has already written) writes each level
  under pcall, its RPUSH before its ZREM, so a key set by hand leaves that level as it was.
"""

from __future__ import annotations

from sidequest.store.lanes.limits import LIMITS_LUA
from sidequest.store.lanes.staging import (
    DEFAULT_LEVEL,
    HEAD_TTL_MS,
    HELD_GRAIN,
    LANE_DEPTH,
    LANE_REFILL,
    RECHECK_MS,
    STAGING_LUA,
    TURN_SLACK,
)

__all__ = ["DEFAULT_LEVEL", "HEAD_TTL_MS", "HELD_GRAIN", "LANES_LUA", "LANE_DEPTH", "LANE_REFILL", "RECHECK_MS",
           "STAGE", "TURN_SLACK"]

# Paths under B are built by suffix here, as `LaneKeys` builds them.
LANES_LUA = LIMITS_LUA + STAGING_LUA + """
-- Wake a held group of one level (`lane_wake`): RPUSH first, so a rotation of another type (set
-- by hand) errors before the group left `B:held:<level>`.
local function wake_level(base, level, group, events)
  local held = base .. ':held:' .. level
  local at = redis.call('zscore', held, group)
  if at and (not events or at == 'inf') then
    redis.call('rpush', base .. ':' .. level, group)
    redis.call('zrem', held, group)
  end
end
-- A held group takes turns again at every level where it is parked: at its resume, a slot freed,
-- new limits, an operator's reset. With `events`, only where it waits for such an event (not for
-- its rate window's end). Each level under pcall: a key set by hand leaves that level as it was.
local function lane_wake(base, group, events)
  local ok, levels = pcall(redis.call, 'smembers', base)
  if not ok then return end
  for _, level in ipairs(levels) do pcall(wake_level, base, level, group, events) end
end
-- `typed`, once per key and call: `seen` holds the keys a call has found of their type already.
local function typed_once(seen, key, kind)
  if seen[key] then return true end
  seen[key] = typed(key, kind)
  return seen[key]
end
-- Whether a job may enter its lane: every key `lane_push` writes is of its type. A script checks
-- it for all its jobs before its first write; with `seen` (one table for the call) the queue's and
-- the level's keys are looked at once, so a bulk push over many groups costs one TYPE a group.
local function lane_ready(base, level, group, seen)
  seen = seen or {}
  local rotation = base .. ':' .. level
  if not (typed_once(seen, base, 'set') and typed_once(seen, rotation, 'list')
          and typed(rotation .. ':' .. group, 'list') and typed_once(seen, base .. ':waiting', 'hash')
          and typed_once(seen, base .. ':limits', 'hash')) then return false end
  return string.match(redis.call('hget', base .. ':waiting', group) or '0', '^%-?%d+$') ~= nil
end
local function lane_push(base, level, group, job, limits)
  if redis.call('lpush', base .. ':' .. level .. ':' .. group, job) == 1 then
    redis.call('rpush', base .. ':' .. level, group)
    redis.call('sadd', base, level)
  end
  redis.call('hincrby', base .. ':waiting', group, 1)
  if group == '' then return end
  local before = redis.call('hget', base .. ':limits', group)
  local over = limits_over(before)
  local after = (limits == NO_LIMITS) and '' or limits  -- a push without limits stores none
  if over ~= '' then after = after .. ';' .. over end  -- an override stays
  if (before or '') ~= after then  -- the push's part changed
    if after == '' then redis.call('hdel', base .. ':limits', group)
    else redis.call('hset', base .. ':limits', group, after) end
    if before then lane_wake(base, group, false) end  -- new limits: a held group is looked at again
  end
end
-- A laned job of a high level was taken by a worker: if it is the one staged deepest (`B:head`),
-- the next batch may go to the head now.
local function lane_taken(base, queue, jid)
  local head = redis.call('get', base .. ':head')
  if head and job_jid(head) == jid then
    redis.call('del', base .. ':head')
    stage(base, queue)
  end
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
    redis.call('zrem', base .. ':held:' .. level, group)
    if redis.call('llen', rotation) == 0 and redis.call('zcard', base .. ':held:' .. level) == 0 then
      redis.call('srem', base, level)
    end
  end
end
-- A laned job ended (or left for `schedule`/`retry`): its group no longer counts it. A group held
-- until an event by its concurrency takes turns again once this end brings its count below its
-- limit: only an end whose count crosses from the limit to one below wakes it (a count above the
-- limit, after the limit was lowered, wakes when it crosses), so other ends cost one HGET and no
-- look at every level's held set. A paused group is woken by its resume, not by its jobs' ends. A
-- group with no limits stored (none pushed, no override) has none to forget nor to wake for.
local function lane_done(base, group, jid)
  if group == '' then return end
  local running = base .. ':running:' .. group
  if redis.call('srem', running, jid) == 0 then return end
  local left, stored = redis.call('scard', running), redis.call('hget', base .. ':limits', group)
  if left == 0 then redis.call('srem', base .. ':busy', group) end
  if not stored then return end
  if left == 0 and redis.call('hexists', base .. ':waiting', group) == 0 then
    limits_forget(base, group, stored)
    return  -- nothing of it waits: it is held nowhere
  end
  local concurrency = limits_parse(stored)
  if concurrency > 0 and left == concurrency - 1 then lane_wake(base, group, true) end
end
"""

# KEYS: the queue's lanes base, queue:<q>. Stage what may be (the poller's pass, a resumed group).
STAGE = LANES_LUA + """
if redis.call('exists', KEYS[1]) == 0 then return 0 end
local staged = stage(KEYS[1], KEYS[2])
if staged < 0 then
  return redis.error_reply('a key of the lanes ' .. KEYS[1] .. ' is of another type: nothing staged')
end
return staged
"""
