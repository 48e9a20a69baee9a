"""The lanes' Lua (see `lanes` for the layout and the rules): the functions shared by the scripts
that push, stage and end laned jobs (`LANES_LUA`: `scripts.core_lib`, the push's script,
ENQUEUE_DUE, ADMIN_REQUEUE) and the poller's STAGE. An operator's scripts (and the slots' give-back)
are in `lanes.admin`.

Two rules hold throughout:
- no value is read from a payload's text by pattern: a staged job's jid comes from
  `cjson.decode` (the job staged is not the one pushed, so it cannot be an argument), every
  other value is a script argument;
- a script checks what it will write before its first write (Lua has no rollback): `stage`
  checks the types of the queue's keys, then each group's keys and counts before it pops the
  group's job, and parks a group it cannot stage (a key set by hand) for RECHECK_MS; a limit
  read back from `B:limits` is used only within the bounds a push checks (`options.group_rate_of`).
  A held group's wake (`lane_wake`, run where a script has already written) writes each level
  under pcall, its RPUSH before its ZREM, so a key set by hand leaves that level as it was.
"""

from __future__ import annotations

from sidequest.store.lanes.limits import LIMITS_LUA

LANE_DEPTH = 32  # laned jobs staged into a queue at once (the fairness grain)
LANE_REFILL = LANE_DEPTH // 2  # a laned job's end stages more once the queue holds fewer than this
DEFAULT_LEVEL = 5  # a job with a group and no priority; above it: staged at the head
HEAD_TTL_MS = 3_600_000  # `B:head` outlives its batch an hour at most (untaken that long: no one works the queue)
HELD_GRAIN = 2 * LANE_DEPTH  # held groups of a level one staging call moves back to their turns at most
TURN_SLACK = 2 * LANE_DEPTH  # turns one staging call takes beyond its budget of jobs at most (groups parked)
RECHECK_MS = 60_000  # a group whose keys were set by hand (of another type) is looked at again this late

# Paths under B are built by suffix here, as `LaneKeys` builds them.
LANES_LUA = LIMITS_LUA + """
local LANE_DEPTH, LANE_HIGH, HEAD_TTL, LANE_REFILL = {depth}, {default}, {head_ttl}, {refill}
local HELD_GRAIN, TURN_SLACK, RECHECK_MS, HELD_EVENT = {held_grain}, {turn_slack}, {recheck}, 'inf'
local function typed(key, kind)
  local found = redis.call('type', key)['ok']
  return found == 'none' or found == kind
end
-- When a group held back by its rate may stage again: its window's end (ms, from `now`).
local function window_end(base, group, ms, now)
  local left = redis.call('pttl', base .. ':rate:' .. group)
  return now + ((left >= 0) and left or ms)  -- a count without expiry (set by hand): a window on
end
-- A group's turn at `level`: how many jobs wait in its lane, whether it may stage one more now,
-- and then its limits and counts (`g`: to count the job and to tell whether it is held after it),
-- else when to look at it again (a time in ms, or HELD_EVENT: until `lane_wake`). It reads every
-- key a staging of the group then writes (its lane, its waiting count, its running set, its rate
-- count) and errors if one cannot take that write: the caller runs it under pcall and parks the
-- group for RECHECK_MS, before anything of it was written.
local function lane_open(base, level, group, paused, now)
  local waiting = redis.call('llen', base .. ':' .. level .. ':' .. group)
  if not string.match(redis.call('hget', base .. ':waiting', group) or '0', '^%-?%d+$') then
    error('the waiting count of group ' .. group .. ' is not a number')
  end
  if waiting == 0 or group == '' then return waiting, true, nil end
  if paused and redis.call('sismember', base .. ':paused', group) == 1 then return waiting, false, HELD_EVENT end
  local g = {}
  g.concurrency, g.count, g.ms, g.weight = lane_limits(base, group)
  g.running = redis.call('scard', base .. ':running:' .. group)
  if g.concurrency > 0 and g.running >= g.concurrency then return waiting, false, HELD_EVENT end
  if g.count > 0 then  -- a group without a rate never reads (nor writes) a rate count
    local used = redis.call('get', base .. ':rate:' .. group)
    if used and not string.match(used, '^%d+$') then
      error('the rate count of group ' .. group .. ' is not a number')
    end
    g.used = tonumber(used or '0')
    if g.used >= g.count then return waiting, false, window_end(base, group, g.ms, now) end
  end
  return waiting, true, g
end
-- A staged job's jid, from its JSON (never by pattern over its text: an argument may hold a
-- "jid" too); nil for a payload without one, which is then staged without a slot.
local function job_jid(job)
  local ok, decoded = pcall(cjson.decode, job)
  if ok and type(decoded) == 'table' and type(decoded['jid']) == 'string' then return decoded['jid'] end
  return nil
end
-- Count a staged job against its group (`g` from `lane_open`); returns when the group may stage
-- again if this job used its last slot or its rate (it is parked), else nil.
local function lane_count(base, group, job, g, now)
  local jid = job_jid(job)
  if jid then
    redis.call('sadd', base .. ':running:' .. group, jid)
    if g.running == 0 then redis.call('sadd', base .. ':busy', group) end  -- a running set's group is busy
    g.running = g.running + 1
  end
  if g.count > 0 then
    g.used = redis.call('incr', base .. ':rate:' .. group)
    if g.used == 1 then redis.call('pexpire', base .. ':rate:' .. group, g.ms) end
  end
  if g.concurrency > 0 and g.running >= g.concurrency then return HELD_EVENT end
  if g.count > 0 and g.used >= g.count then
    return g.used == 1 and now + g.ms or window_end(base, group, g.ms, now)
  end
  return nil
end
-- The held groups of a level whose time has come (a rate window's end) take turns again, at the
-- tail of the rotation: at most HELD_GRAIN a call.
local function lane_due(base, level, now)
  local held = base .. ':held:' .. level
  local due = redis.call('zrangebyscore', held, '-inf', now, 'LIMIT', 0, HELD_GRAIN)
  if #due > 0 then
    redis.call('rpush', base .. ':' .. level, unpack(due))
    redis.call('zrem', held, unpack(due))
  end
end
-- A weighted group's run of turns (`group_weight`): the group at the head of the rotation and how
-- many jobs it staged in a row, kept in `B:streak:<level>` ("<n> <group>") between calls, since a
-- call's budget may end a run half-way; nil, 0 for none.
local function streak_read(key)
  local kept = redis.call('get', key)
  if not kept then return nil, 0, false end
  local n, group = string.match(kept, '^(%d+) (.*)$')
  return group, tonumber(n) or 0, true
end
local function streak_keep(key, group, n, kept)
  if group then redis.call('set', key, n .. ' ' .. group, 'PX', HEAD_TTL)
  elseif kept then redis.call('del', key) end
end
-- Move up to `budget` jobs of one level into `out`, the level's groups taking turns (a turn:
-- LMOVE from the rotation's head to its tail). A group of weight w takes w turns in a row (moved
-- back to the head after each of its first w - 1), so over a pass of the rotation each group
-- stages its weight's share, at one more LMOVE per extra turn. A group that may not stage now,
-- or that used its last slot or its rate with the job it staged, leaves the rotation for
-- `B:held:<level>` (RPOP: it is the tail), so no call passes over it again until it is due or
-- woken (`lane_wake`). Returns whether the level is exhausted (its rotation is empty): only then
-- may a lower level stage, so a group held back never lets a lower level's job ahead of the open
-- groups of this one. Every turn stages a job or takes a group out of the rotation, and the turns
-- of a call are bounded by a constant (`budget` + TURN_SLACK), whatever the number of groups; a
-- level cut short by that bound is not exhausted.
local function lane_take(base, level, budget, out, now)
  local rotation, waiting_key, streak_key = base .. ':' .. level, base .. ':waiting', base .. ':streak:' .. level
  lane_due(base, level, now)
  local paused, turns = redis.call('exists', base .. ':paused') == 1, 0
  local run, streak, kept = streak_read(streak_key)
  while #out < budget and turns < budget + TURN_SLACK do
    turns = turns + 1
    local group = redis.call('lmove', rotation, rotation, 'LEFT', 'RIGHT')
    if not group then break end
    if group ~= run then run, streak = group, 0 end
    local checked, waiting, open, g = pcall(lane_open, base, level, group, paused, now)
    local leaves, at = true, nil
    if not checked then
      redis.log(redis.LOG_WARNING, 'sidequest: lanes ' .. base .. ': ' .. tostring(waiting))
      at = now + RECHECK_MS
    elseif not open then
      at = g
    elseif waiting > 0 then
      local job = redis.call('rpop', rotation .. ':' .. group)
      out[#out + 1], streak = job, streak + 1
      if group ~= '' then at = lane_count(base, group, job, g, now) end
      if redis.call('hincrby', waiting_key, group, -1) <= 0 then redis.call('hdel', waiting_key, group) end
      if waiting == 1 then at = nil else leaves = at ~= nil end  -- an emptied lane leaves its turn for good
    end
    if leaves then
      redis.call('rpop', rotation)
      run = nil
    elseif g and streak < g.weight then redis.call('lmove', rotation, rotation, 'RIGHT', 'LEFT')  -- its next turn
    else run = nil end
    if at then redis.call('zadd', base .. ':held:' .. level, at, group) end
  end
  streak_keep(streak_key, run, streak, kept)
  local left = redis.call('llen', rotation)
  if left == 0 and redis.call('zcard', base .. ':held:' .. level) == 0 then redis.call('srem', base, level) end
  return left == 0
end
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
-- The queue's keys that staging writes are of their types (a key set by hand is not): the
-- levels, sorted highest first, else nil.
local function stage_levels(base, queue)
  if not typed(base, 'set') then return nil end
  local levels = redis.call('smembers', base)
  for _, level in ipairs(levels) do
    if not string.match(level, '^%d$') or not typed(base .. ':' .. level, 'list')
       or not typed(base .. ':held:' .. level, 'zset') or not typed(base .. ':streak:' .. level, 'string') then
      return nil
    end
  end
  for suffix, kind in pairs({busy = 'set', waiting = 'hash', paused = 'set', limits = 'hash', head = 'string'}) do
    if not typed(base .. ':' .. suffix, kind) then return nil end
  end
  if not typed(queue, 'list') then return nil end
  table.sort(levels, function(a, b) return tonumber(a) > tonumber(b) end)
  return levels
end
-- Stage the lanes of the queue whose list is `queue` (see `lanes`); returns how many jobs moved,
-- or -1 when a key of the queue's lanes is of the wrong type (nothing moved).
local function stage(base, queue)
  local levels = stage_levels(base, queue)
  if not levels then return -1 end
  if #levels == 0 then return 0 end
  local head_free, head = true, redis.call('get', base .. ':head')
  if head then  -- the last batch's deepest job: deleted when a worker takes it (`lane_taken`)
    if redis.call('lpos', queue, head, 'RANK', -1, 'MAXLEN', LANE_DEPTH * 4) then
      head_free = false
    elseif redis.call('llen', queue) > LANE_DEPTH * 4 then
      head_free = false  -- deeper than a bounded look (put-backs went ahead of it): its take will tell
    else
      redis.call('del', base .. ':head')  -- gone without a take sidequest saw (Ruby, a hand LREM)
    end
  end
  local room, high, staged = LANE_DEPTH - redis.call('llen', queue), {}, 0
  local clock = redis.call('time')
  local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  for _, level in ipairs(levels) do
    local exhausted = true
    if tonumber(level) > LANE_HIGH then
      if head_free then exhausted = lane_take(base, level, LANE_DEPTH, high, now) end
    elseif room > 0 then
      local low = {}
      exhausted = lane_take(base, level, room, low, now)
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
  if before ~= limits and before ~= limits .. ';' .. over then  -- the push's part changed (an override stays)
    redis.call('hset', base .. ':limits', group, over == '' and limits or limits .. ';' .. over)
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
-- look at every level's held set. A paused group is woken by its resume, not by its jobs' ends.
local function lane_done(base, group, jid)
  if group == '' then return end
  local running = base .. ':running:' .. group
  if redis.call('srem', running, jid) == 0 then return end
  local left, stored = redis.call('scard', running), redis.call('hget', base .. ':limits', group)
  if left == 0 then
    redis.call('srem', base .. ':busy', group)
    if redis.call('hexists', base .. ':waiting', group) == 0 then
      limits_forget(base, group, stored)
      return  -- nothing of it waits: it is held nowhere
    end
  end
  local concurrency = limits_parse(stored)
  if concurrency > 0 and left == concurrency - 1 then lane_wake(base, group, true) end
end
"""
for _name, _value in (("held_grain", HELD_GRAIN), ("turn_slack", TURN_SLACK), ("recheck", RECHECK_MS),
                      ("depth", LANE_DEPTH), ("default", DEFAULT_LEVEL), ("head_ttl", HEAD_TTL_MS),
                      ("refill", LANE_REFILL)):
    LANES_LUA = LANES_LUA.replace("{" + _name + "}", str(_value))

# KEYS: the queue's lanes base, queue:<q>. Stage what may be (the poller's pass, a resumed group).
STAGE = LANES_LUA + """
if redis.call('exists', KEYS[1]) == 0 then return 0 end
local staged = stage(KEYS[1], KEYS[2])
if staged < 0 then
  return redis.error_reply('a key of the lanes ' .. KEYS[1] .. ' is of another type: nothing staged')
end
return staged
"""
